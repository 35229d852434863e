"""benchmarks/gpu_check.py on a CPU: the GPU parts skip and say why; at toy size with
``--device cpu --small`` every measurement runs and agrees with its independent reference."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trl_child import env_for_trl_child

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def _run(out: Path, *args: str, env: dict | None = None, timeout: int = 600) -> dict:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   **(env or {})}
    environment.pop("OUT", None)
    environment = env_for_trl_child(environment)  # TRL's step runs without vLLM on a CPU
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], capture_output=True, text=True,
                          env=environment, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "gpu_check.json").read_text())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_without_cuda_every_gpu_part_is_skipped_and_the_report_says_why(tmp_path):
    data = _run(tmp_path)
    parts = data["parts"]
    assert list(parts) == list(gpu_check.PARTS)
    env = parts["env"]
    assert env["status"] == "ok" and env["data"]["cuda_available"] is False
    assert env["data"]["versions"]["torch"] == torch.__version__
    assert set(env["data"]["carry"]) == set(gpu_check.CARRY)
    assert {"vllm", "smollm2-135m weights"} <= set(env["data"]["cannot_carry"])
    for name in gpu_check.GPU_PARTS:
        assert parts[name]["status"] == "skipped" and "no CUDA device" in parts[name]["reason"], parts[name]
    table = (tmp_path / "gpu_check.md").read_text()
    for name in gpu_check.GPU_PARTS:
        assert re.search(rf"^\| {name} \| skipped \| [\d.]+ \| no CUDA device", table, re.M), table
    assert "Device: **no CUDA device**" in table


def test_an_unknown_part_is_refused_with_the_known_ones(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--parts", "env,kernels"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "kernels" in done.stderr and "logprobs" in done.stderr


def test_every_test_marked_gpu_lives_where_the_check_runs_pytest():
    marked = {path.relative_to(ROOT) for path in (ROOT / "tests").rglob("test_*.py")
              if re.search(r"pytest\.mark\.gpu\b", path.read_text())}
    assert marked, "no test is marked gpu"
    assert all(str(path).startswith(gpu_check.GPU_TEST_PATHS) for path in marked), marked


def test_tests_marked_gpu_skip_without_cuda_and_say_so(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the tests run")
    result = gpu_check.run_gpu_tests()
    assert result["tests"] and result["counts"]["skipped"] == len(result["tests"]), result
    assert all("no CUDA device" in t["message"] for t in result["tests"])


def _notebook_config_calls(source: str) -> dict:
    """The keyword arguments of lesson 11's `config = GRPOConfig(...)`, full-mode side."""
    tree = ast.parse(source)
    call = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", None) == "config" and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "GRPOConfig")
    return {kw.arg: kw.value for kw in call.keywords}


def test_lesson11_settings_are_the_notebooks_full_mode():
    """The check trains what the lesson trains: every field it sets equals the notebook's
    value in full mode on a GPU machine without vLLM (`scaled(fast, full)` -> full)."""
    source = (ROOT / "notebooks" / "11_capstone.py").read_text()
    names = {"scaled": lambda fast, full: full, "MODEL": "smollm2-135m", "sampler": {},
             "reward_weights": ast.literal_eval(re.search(r"^reward_weights = (.+)$", source, re.M).group(1))}
    keywords = _notebook_config_calls(source)
    lesson = gpu_check.LESSON11
    for field, expected in lesson["config"].items():
        assert field in keywords, f"{field} is not set in the notebook's GRPOConfig"
        value = eval(compile(ast.Expression(keywords[field]), "notebook", "eval"), names)  # noqa: S307
        assert value == expected, (field, value, expected)
    assert eval(compile(ast.Expression(keywords["use_lora"]), "nb", "eval"), names) is True  # noqa: S307
    assert re.search(r'^MODEL = scaled\("tiny", "smollm2-135m"\)$', source, re.M)
    assert re.search(r'^TASK = scaled\("arithmetic", "arithmetic-tagged"\)$', source, re.M)
    assert lesson["task"] == "arithmetic-tagged" and lesson["model"] == "smollm2-135m"
    assert re.search(rf"split=\"train\", n=scaled\(256, {lesson['train_n']}\)", source)
    assert re.search(rf"split=\"test\", n={lesson['test_n']}, seed=0", source)
    assert re.search(rf"^rambling_limit = scaled\(8, {lesson['rambling_limit']}\)", source, re.M)


@pytest.mark.slow
def test_small_run_on_cpu_measures_every_part(tmp_path):
    """Toy sizes on a CPU: the heads agree with float32 logits, both trainers start from the
    same weights and time their step, lesson 11's cell trains and evaluates. Under Triton's
    interpreter (``TRITON_INTERPRET=1``, which the trainers on a CPU do not use) the Triton head
    is one of the heads compared, where Triton is installed."""
    data = _run(tmp_path, "--device", "cpu", "--small", "--parts", "logprobs,step,lesson11",
                env={"TRITON_INTERPRET": "1"})
    parts = data["parts"]
    assert all(part["status"] == "ok" for part in parts.values()), {k: v["reason"] for k, v in parts.items()}
    rows = {row["variant"]: row for row in parts["logprobs"]["data"]["rows"] if "skipped" not in row}
    assert {"naive", "chunked", "trl"} <= set(rows)
    if importlib.util.find_spec("triton") is not None:
        assert "triton" in rows, parts["logprobs"]["data"]["rows"]
    for row in rows.values():  # float32 inputs: every variant equals the float32 head to rounding
        assert row["forward_s"] > 0 and row["backward_s"] > 0
        assert max(row["max_diff_logp"], row["max_diff_grad_hidden"], row["max_diff_grad_weight"]) < 1e-5, row
    step = parts["step"]["data"]
    assert "(identical)" in step["digests"]
    assert step["ours"]["steps"] == step["trl"]["steps"] == 1
    assert step["ratio"] == pytest.approx(step["ours"]["step"] / step["trl"]["step"])
    assert step["ours"]["tokens"] > 0 and step["trl"]["tokens"] > 0
    lesson = parts["lesson11"]["data"]
    assert lesson["steps"] == 2 and lesson["test_n"] == 8 and lesson["device"] == "cpu"
    table = (tmp_path / "gpu_check.md").read_text()
    assert "Ratio ours / TRL" in table and "## Lesson 11, fast-mode settings" in table


def test_a_part_that_breaks_is_reported_with_its_traceback_and_the_next_part_still_runs(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kernel launch failed")

    monkeypatch.setattr(gpu_check, "compare_logprob_heads", broken)
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--parts", "logprobs,env"]) == 0
    parts = json.loads((tmp_path / "gpu_check.json").read_text())["parts"]
    assert parts["logprobs"]["status"] == "failed"
    assert parts["logprobs"]["reason"] == "RuntimeError: kernel launch failed"
    assert parts["env"]["status"] == "ok"
    table = (tmp_path / "gpu_check.md").read_text()
    assert "| logprobs | failed |" in table and "## logprobs: failed" in table and "kernel launch failed" in table


def test_smollm2_shaped_stand_in_is_the_same_model_on_every_load(monkeypatch):
    """Where SmolLM2's weights are absent the step is timed on this stand-in; both trainers
    load it separately, so every load must give the same weights (one layer here for speed)."""
    import step_vs_trl

    monkeypatch.setitem(gpu_check.SMOLLM2_SHAPE, "num_hidden_layers", 1)
    first, tokenizer = gpu_check.smollm2_shaped()
    second, _ = gpu_check.smollm2_shaped()
    assert step_vs_trl.weights_digest(first) == step_vs_trl.weights_digest(second)
    config = first.config
    assert (config.hidden_size, config.intermediate_size, config.num_attention_heads,
            config.num_key_value_heads) == (576, 1536, 9, 3)
    assert config.vocab_size == len(tokenizer) and first.get_output_embeddings().weight is \
        first.get_input_embeddings().weight


@pytest.mark.slow
def test_without_smollm2_the_step_is_timed_on_the_stand_in_and_says_so(monkeypatch):
    """The `step` part's path on a machine without SmolLM2's weights (one layer, one step, CPU)."""
    pytest.importorskip("trl")
    monkeypatch.setitem(gpu_check.SMOLLM2_SHAPE, "num_hidden_layers", 1)
    monkeypatch.setattr(gpu_check, "smollm2_available", lambda: "SmolLM2-135M-Instruct is not available here")
    monkeypatch.setattr(gpu_check, "STEP_WARMUP", 0)
    monkeypatch.setattr(gpu_check, "STEP_TIMED", 1)
    monkeypatch.setitem(gpu_check.STEP_SETUP, "config", {**gpu_check.STEP_SETUP["config"], "max_completion_length": 4})
    status, summary, data, reason = gpu_check._run_part("step", "cpu", None, None)
    assert status == "ok" and reason is None
    assert data["model"] == "smollm2-shaped" and "not available here" in data["note"]
    assert "(identical)" in data["digests"] and data["dtype"] == "float32"
    # a random model writes to the length cap on both sides: 16 completions x 4 tokens
    assert data["ours"]["tokens"] == data["trl"]["tokens"] == 64
    assert "Model: SmolLM2-135M-Instruct is not available here" in gpu_check.markdown(
        {"command": "", "started": "", "parts": {"step": {"status": status, "seconds": 1, "summary": summary,
                                                          "reason": None, "data": data}}})
