"""``examples/digit_sum``: your own task and rewards through the Python API, the command line
and the export for TRL, on the tiny model (offline).

What is checked is the path, not learning (the tiny model was trained on arithmetic, not digit
sums): each step runs, reads the user's own functions and writes what the next one reads; the
export carries the user's reward module. The command line's path (``train``, ``eval`` of its
checkpoint and ``export-trl`` of the example) is the README's block, run as written and checked
for what it leaves in ``tests/lib/test_readme.py``. That TRL trains such an export (``trl grpo``
on a command-line export of a task and rewards of one's own, in a moved folder) is checked once,
in ``tests/lib/test_own_task.py``.
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

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "digit_sum"
MODULE = EXAMPLE / "digit_sum.py"


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "WANDB_DISABLED": "true", **extra}


def _run(command: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def test_the_example_functions_follow_their_own_rules():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import digit_sum
    finally:
        sys.path.remove(str(EXAMPLE))
    rows = digit_sum.digit_sum_task("train", n=20, seed=1)
    test_rows = digit_sum.digit_sum_task("test", n=20, seed=1)
    numbers = lambda rs: {int(r["prompt"][-1]["content"].split()[-1]) for r in rs}  # noqa: E731
    assert not numbers(rows) & numbers(test_rows)  # held out
    assert all(r["answer"] == sum(int(d) for d in r["prompt"][-1]["content"].split()[-1]) for r in rows)
    assert digit_sum.digit_sum_reward(None, ["13", "The sum is 12", "x"], answer=[13, 13, 13]) == [1.0, 0.0, 0.0]
    assert digit_sum.is_digit_sum_correct("13.", 13) and not digit_sum.is_digit_sum_correct("1 3", 13)


def test_the_python_api_script_trains_reloads_and_exports(tmp_path):
    result = _run([sys.executable, str(EXAMPLE / "train_digit_sum.py"), "--max-steps", "2", "--eval-n", "8",
                   "--output-dir", str(tmp_path / "api")], cwd=tmp_path)
    summary = _last_json(result.stdout)
    assert Path(summary["checkpoint"]).name == "checkpoint-2"
    assert summary["checkpoint_accuracy"] == summary["accuracy_after"]  # the reloaded checkpoint is the trained model
    export = Path(summary["trl_export"])
    assert (export / "digit_sum.py").read_text() == MODULE.read_text()  # the reward module travels with the export
    assert "course_rewards.digit_sum_reward" in (export / "grpo.yaml").read_text()


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
def test_the_python_api_script_stops_on_sigterm_without_evaluating_or_exporting(tmp_path):
    """``train()`` returns after SIGTERM with ``trainer.interrupted``: the script must stop there
    and exit 143 (128 + SIGTERM), not evaluate and export a half-trained run as if it finished."""
    out = tmp_path / "api"
    process = subprocess.Popen([sys.executable, str(EXAMPLE / "train_digit_sum.py"), "--max-steps", "10000",
                                "--eval-n", "2", "--output-dir", str(out)], cwd=tmp_path, env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not ((out / "history.jsonl").is_file() and (out / "history.jsonl").read_text().strip()):
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no step logged in time"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, (process.returncode, stderr[-3000:])
    assert "stopped by SIGTERM" in stderr and "resume_from='latest'" in stderr
    assert not [line for line in stdout.splitlines() if line.startswith("{")]  # no summary: nothing evaluated after
    assert not (out / "trl").exists() and not (out / "final").exists()
    assert list(out.glob("checkpoint-*/trainer_state.json"))  # the stop saved a checkpoint
