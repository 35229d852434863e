"""The step benchmark against TRL runs end to end through its command line (no timing checks)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "step_vs_trl.py"


def _run(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def test_unknown_model_name_is_rejected_with_the_known_names():
    result = _run("--models", "tiny,gpt5", timeout=120)
    assert result.returncode == 2
    assert "gpt5" in result.stderr and "smollm2" in result.stderr


@pytest.mark.slow
def test_one_step_of_each_trainer_on_the_tiny_model_prints_a_ratio():
    pytest.importorskip("trl")
    from course_lib.models import ModelNotAvailableError, resolve_model_path

    try:
        resolve_model_path("tiny")
    except ModelNotAvailableError as error:
        pytest.skip(str(error))
    result = _run("--models", "tiny", "--steps", "1", "--warmup", "0", "--rounds", "1", timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = result.stdout
    # Both trainers ran their step and generated completions.
    for side in ("ours", "trl"):
        line = re.search(rf"round 1\s+{side}\s+(\d+\.\d+) s/step .* tokens\s+(\d+\.\d+)", out)
        assert line is not None, f"no timing line for {side}:\n{out}"
        assert float(line.group(1)) > 0 and float(line.group(2)) > 0
    # The two trainers started from the same weights, so the comparison is like for like.
    assert re.search(r"starting weights: ours (\w+)\s+TRL \1\s+\(identical\)", out), out
    ratio = re.search(r"ratio ours/TRL \[tiny\]: (\d+\.\d+)x wall", out)
    assert ratio is not None and float(ratio.group(1)) > 0, out
