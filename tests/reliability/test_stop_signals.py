"""SIGTERM (``timeout``, ``docker stop``, Slurm, Kubernetes) and SIGHUP (a closed terminal) stop a
run the way Ctrl-C does: a checkpoint at the next optimizer step, the output folder released,
and the shell's exit status ``128 + signal`` (143, 129; 130 for Ctrl-C), in one process and
in a run of two processes started by ``train --num-processes 2``.

Each case runs the real command in a child process and signals it once it has logged a step.
Before, SIGTERM and SIGHUP killed the process where it stood: no checkpoint with the default
``save_steps``, exit status -15 / -1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib.run import checkpoint as ckpt
from course_lib.run.folder import claim_output_dir
from course_lib.run.signals import StopOnSignals, exit_code

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ["--set", "per_device_train_batch_size=4", "--set", "num_generations=2", "--set", "max_completion_length=4",
            "--set", "save_steps=0", "--set", "logging_steps=1"]


def _start(output_dir: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "MASTER_PORT": str(29600 + os.getpid() % 300)}
    command = [sys.executable, "-m", "course_lib", "train", "--model", "tiny", "--task", "arithmetic",
               "--train-rows", "64", "--max-steps", "10000", "--output-dir", str(output_dir), *SETTINGS, *extra]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_a_logged_step(process: subprocess.Popen, output_dir: Path, timeout: float = 300) -> None:
    history = output_dir / "history.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the run ended before its first step: {process.communicate()[1][-2000:]}")
        if history.is_file() and history.read_text().strip():
            return
        time.sleep(0.2)
    process.kill()
    raise AssertionError("no step logged in time")


def _processes_writing(output_dir: Path) -> list[int]:
    """Live processes whose command line names the run's folder (workers left behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().split(")")[-1].split()[0]
            except OSError:
                continue
            if str(output_dir) in command and state != "Z":
                found.append(int(entry.name))
    return found


def _check_stopped_and_saved(process: subprocess.Popen, output_dir: Path, signum: int) -> None:
    try:
        _, stderr = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("the run did not stop within 180 s of the signal")
    assert process.returncode == exit_code(signum), (process.returncode, stderr[-2000:])
    assert f"stopped by {signal.Signals(signum).name}" in stderr, stderr[-2000:]
    latest = ckpt.latest_checkpoint(output_dir)
    assert latest is not None, f"no checkpoint saved: {sorted(p.name for p in output_dir.iterdir())}"
    assert not (output_dir / "final").exists()
    state = json.loads((latest / "trainer_state.json").read_text())
    assert state["step"] >= 1 and latest.name == f"checkpoint-{state['step']}"
    # The folder is free again: the next run may claim it to resume (the lock is released).
    with claim_output_dir(output_dir, resume_folder=latest):
        pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_saves_releases_the_folder_and_exits_with_128_plus_the_signal(signum, tmp_path):
    output_dir = tmp_path / "run"
    process = _start(output_dir)
    _wait_for_a_logged_step(process, output_dir)
    process.send_signal(signum)
    _check_stopped_and_saved(process, output_dir, signum)


def test_sigterm_stops_a_two_process_run_saved_and_leaves_no_worker_behind(tmp_path):
    output_dir = tmp_path / "run2"
    process = _start(output_dir, "--num-processes", "2")
    _wait_for_a_logged_step(process, output_dir, timeout=420)
    process.send_signal(signal.SIGTERM)  # to the command the user started, as `timeout` or a scheduler does
    _check_stopped_and_saved(process, output_dir, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _processes_writing(output_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_writing(output_dir) == []


def test_a_repeated_sigterm_is_one_request_and_a_second_ctrl_c_raises():
    with StopOnSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # Slurm signals every process of a job; a sender may repeat
        assert stop.requested and stop.signum == signal.SIGTERM and stop.exit_code == 143
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored on exit
