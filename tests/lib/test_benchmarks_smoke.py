"""The step benchmark against TRL runs end to end through its command line (no timing checks)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from trl_child import env_for_trl_child

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "step_vs_trl.py"


def _run(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = env_for_trl_child({**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
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


def test_logprob_memory_benchmark_compares_variants_that_agree():
    """Small CPU run of the log-prob benchmark: every variant runs (Triton's through its
    interpreter), reports memory and time, and matches the naive log-probs and gradients."""
    script = ROOT / "benchmarks" / "logprob_memory.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRITON_INTERPRET": "1"}
    variants = ["naive", "chunked", "trl"] + (["triton"] if _has_module("triton") else [])
    result = subprocess.run([sys.executable, str(script), "--batch", "1", "--seq", "24", "--hidden", "32",
                             "--vocab", "300", "--repeats", "1", "--temperature", "0.8",
                             "--variants", ",".join(variants)],
                            capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = result.stdout
    for variant in variants:
        assert re.search(rf"^{variant}\s+\d+\s+\d+\.\d+", out, re.M), f"no line for {variant}:\n{out}"
    checks = re.findall(r"check (\w+) vs naive \(rel\. diff\): logps_sum (\S+), grad_hidden_norm (\S+), "
                        r"grad_weight_norm (\S+)", out)
    assert {c[0] for c in checks} == set(variants) - {"naive"}, out
    assert all(float(x) < 1e-5 for c in checks for x in c[1:]), out


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
def test_async_benchmark_prints_sync_and_both_staleness_bounds():
    script = ROOT / "benchmarks" / "async_vs_sync.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(script), "--seconds", "1", "--warmup", "1", "--eval-n", "4"],
                            capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    # mode, steps, steps/min, x sync, tok/s, stale
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^(sync|async S=1 recompute|async S=1|async S=2)\s+(\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+\d+\.\d+\s+(\d+\.\d+)",
        result.stdout, re.M)}
    assert set(rows) == {"sync", "async S=1", "async S=2", "async S=1 recompute"}, result.stdout
    assert float(rows["sync"][2]) == 1.0 and float(rows["sync"][3]) == 0.0  # the ratio's base; never stale
    for mode, bound in (("async S=1", 1), ("async S=2", 2), ("async S=1 recompute", 1)):
        assert int(rows[mode][0]) >= 1 and float(rows[mode][1]) > 0 and float(rows[mode][3]) <= bound


@pytest.mark.slow
def test_tool_lift_benchmark_reports_paired_lifts(tmp_path):
    """A minimal run of benchmarks/tool_lift.py: every stage is evaluated and every lift printed."""
    from course_lib.models import ModelNotAvailableError, resolve_model_path

    try:
        resolve_model_path("smollm2-135m")
    except ModelNotAvailableError as error:
        pytest.skip(str(error))
    script = ROOT / "benchmarks" / "tool_lift.py"
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TMPDIR": str(temp)}
    # two held-out problems and one group of two rollouts: the smallest run that still walks every stage
    result = subprocess.run([sys.executable, str(script), "--eval-n", "2", "--warmup-batches", "1",
                             "--warmup-batch-size", "2", "--steps", "1", "--batch", "2", "--generations", "2",
                             "--max-completion-length", "64"],
                            capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = result.stdout
    for stage in ("base", "warm", "grpo"):
        assert re.search(rf"\] {stage}\s+accuracy \d+\.\d% \[.*\] \(\d/2\)", out), out
    for pair in ("warm - base", "grpo - warm", "grpo - base"):
        assert re.search(rf"{pair}: [+-]\d+\.\d \[[+-]\d+\.\d, [+-]\d+\.\d\]", out), out
    assert re.search(r"^\s+1\s+\d\.\d\d\s+\d\.\d{3}", out, re.M), out  # the step's call frequency and reward
    # the GRPO run's folder (history and the trained SmolLM2, 540 MB) goes when the script ends
    assert not list(temp.rglob("history.jsonl")), sorted(str(p) for p in temp.rglob("*"))[:20]


@pytest.mark.slow
def test_tool_lift_tiny_benchmark_reports_each_stage():
    script = ROOT / "benchmarks" / "tool_lift_tiny.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(script), "--eval-n", "3", "--warmup-batches", "1",
                             "--warmup-batch-size", "2", "--warmup-epochs", "1", "--steps", "1"],
                            capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = result.stdout
    assert re.search(r"prompt \((\d+) tokens\)", out) and int(re.search(r"prompt \((\d+) tokens\)", out).group(1)) < 64
    for stage in ("base", "warm", "grpo"):
        assert re.search(rf"\] {stage}\s+accuracy \d+\.\d% .*\(\d/3\).*% call on the question's numbers", out), out
    for pair in ("warm - base", "grpo - warm"):
        assert re.search(rf"{pair}: [+-]\d+\.\d \[[+-]\d+\.\d, [+-]\d+\.\d\] points", out), out


def _post_training(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "post_training.py"), "--eval-n", "8",
                           "--curve-n", "4", "--curve-points", "2", "--pass-n", "3", "--k", "2", "--train-rows", "64",
                           *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def test_post_training_benchmark_rejects_an_unknown_method():
    result = _post_training("--methods", "sft,ppo2", timeout=120)
    assert result.returncode == 2 and "ppo2" in result.stderr


def _rows(out: str) -> dict:
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (start model|\w+) \| (\d+) \|", out, re.M)}


@pytest.mark.slow
def test_post_training_benchmark_runs_all_five_methods_on_the_same_budget(tmp_path):
    """One run of every method: each has its row; SFT and GRPO each stop at the first step whose
    cost reaches the budget (at least the budget, less than one more step); the results and the
    curves are written."""
    budget = 14000
    result = _post_training("--budget", str(budget), "--teacher-steps", "2", "--pair-prompts", "64",
                            "--out", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    rows = _rows(result.stdout)
    assert set(rows) == {"start model", "sft", "rejection", "dpo", "grpo", "distill"}, result.stdout
    assert all(budget <= int(rows[m]) < budget + 2 * 32 * 60 for m in ("sft", "grpo")), rows
    assert (tmp_path / "results.json").is_file() and (tmp_path / "curves.png").is_file()
