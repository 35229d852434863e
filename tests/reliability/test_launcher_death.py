"""``kill -9`` of ``train --num-processes 2`` (or of torch's launcher) stops the workers and frees the folder.

The command starts torch's launcher, which starts two workers. SIGKILL cannot be handled
by the process it hits, so the workers must learn of it from the kernel (the parent-death
signal, ``course_lib.cli.lifeline``): within seconds of the kill no process of the run is left,
no checkpoint is written any more, and the next ``--resume-from latest`` may take the folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from course_lib.run.checkpoint import list_checkpoints, resolve_resume
from course_lib.run.folder import claim_output_dir

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(output_dir: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "course_lib", "train", "--num-processes", "2", "--model", "tiny",
               "--train-rows", "16", "--max-steps", "10000", "--output-dir", str(output_dir),
               "--set", "per_device_train_batch_size=2", "--set", "num_generations=2",
               "--set", "max_completion_length=4", "--set", "save_steps=1", "--set", "save_total_limit=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "MASTER_PORT": str(_free_port())}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_checkpoint(output_dir: Path, command: subprocess.Popen, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while not list_checkpoints(output_dir):
        assert command.poll() is None, f"the run ended early with exit code {command.returncode}"
        assert time.monotonic() < deadline, "no checkpoint within the time limit"
        time.sleep(0.5)


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.parametrize("victim", ["command", "launcher"])
def test_workers_die_with_their_launcher_and_the_folder_is_free(tmp_path, victim):
    output_dir = tmp_path / "run"
    command = _start(output_dir)
    tree = []
    try:
        _wait_for_checkpoint(output_dir, command)
        tree = psutil.Process(command.pid).children(recursive=True)
        launcher = psutil.Process(command.pid).children()[0]
        assert len(launcher.children()) == 2, "expected two workers under the launcher"
        os.kill(command.pid if victim == "command" else launcher.pid, signal.SIGKILL)
        command.wait()
        deadline = time.monotonic() + 30
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _alive(tree)
        assert not left, f"still running after the kill: {[(p.pid, p.cmdline()[-6:]) for p in left]}"
        saved = {c.name for c in list_checkpoints(output_dir)}
        time.sleep(2)
        assert {c.name for c in list_checkpoints(output_dir)} == saved, "checkpoints are still being written"
        with claim_output_dir(output_dir, resume_folder=resolve_resume("latest", output_dir)):
            pass
    finally:
        for process in _alive(tree) + _alive([psutil.Process(command.pid)] if command.poll() is None else []):
            process.kill()
