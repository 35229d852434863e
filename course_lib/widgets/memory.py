"""Memory arithmetic and measurement for lesson 10 (why log-probs are computed in chunks).

- `logits_memory_gb`: the full-logits bill of a GRPO step. The source notes' example: 2 logits
  tensors x 2 bytes x 8 generations x 20K context x 128,256 vocabulary = 78.3 GB.
  That number holds with "20K" = 20 x 1024 = 20,480 tokens and "GB" = 2^30 bytes
  (GiB); with 10^9 bytes it would read 84.1 GB, and with 20,000 tokens 76.4 GiB. The
  seed's "8x less, 9.8 GB" is 78.3 / 8.
- `kv_cache_gb`: the KV cache of generation. Seed: K and V x 2 bytes x 32 layers x
  20K context x 1024 (8 KV heads x 128 dims for Llama 3.1 8B) = 2.5 GB per sequence,
  again in GiB.
- `measure_logprob_memory`: measured peak memory of the log-probs of N tokens (forward
  and backward), for the naive path (full `(N, V)` logits, then
  `selective_log_softmax`) and for `fused_linear_logprobs` at several chunk sizes. On a
  CPU each measurement runs in a fresh Python process: on Linux it resets the process's
  resident-memory high-water mark (`/proc/self/clear_refs`) and reads `VmHWM` minus
  the resident memory before the call. (`getrusage(...).ru_maxrss` is the fallback
  elsewhere; on Linux it is unreliable here, because a child started by fork/exec
  inherits its parent's peak.) On CUDA it reads `torch.cuda.max_memory_allocated`.
- `plot_memory_vs_chunk_size`: the measured peaks (and times) vs the chunk size.

Simplification: RSS includes allocator slack, so CPU numbers are good to a few MiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from ..common.figures import new_figure

__all__ = ["kv_cache_gb", "logits_memory_gb", "measure_logprob_memory", "plot_memory_vs_chunk_size"]

GIB = 2**30
MIB = 2**20


def _to_unit(num_bytes: float, unit: str) -> float:
    if unit == "GiB":
        return num_bytes / GIB
    if unit == "GB":
        return num_bytes / 1e9
    raise ValueError(f"unit={unit!r} is unknown. Fix: use 'GiB' (2^30 bytes, the GB of lesson 10's source notes) or 'GB' (10^9).")


def logits_memory_gb(batch: int, seq_len: int, vocab: int, bytes_per_value: int = 2, copies: int = 2,
                     unit: str = "GiB") -> float:
    """Memory of `copies` logits tensors of shape `(batch, seq_len, vocab)`.

    GRPO's loss needs the logits of the policy and of the reference (or old) model:
    `copies=2`. Seed example: `logits_memory_gb(8, 20 * 1024, 128_256)` = 78.3 (GiB).

    Args:
        batch: sequences (e.g. the 8 generations of one prompt).
        seq_len: tokens per sequence (context length).
        vocab: vocabulary size.
        bytes_per_value: 2 for bf16/fp16, 4 for fp32.
        copies: logits tensors alive at once.
        unit: `"GiB"` (2^30 bytes, what lesson 10's source notes call GB) or `"GB"` (10^9 bytes).
    """
    return _to_unit(float(copies) * bytes_per_value * batch * seq_len * vocab, unit)


def kv_cache_gb(layers: int, kv_dim: int, context: int, batch: int = 1, bytes_per_value: int = 2,
                unit: str = "GiB") -> float:
    """KV-cache memory: K and V (2) x bytes x layers x context x kv_dim x batch.

    `kv_dim` = number of KV heads x head dimension (1024 for Llama 3.1 8B: 8 x 128).
    Seed example: `kv_cache_gb(32, 1024, 20 * 1024)` = 2.5 (GiB) per sequence; a vLLM
    batch of 8 would need 20.
    """
    return _to_unit(2.0 * bytes_per_value * layers * context * kv_dim * batch, unit)


# The measurement, run in a fresh interpreter so that its peak-RSS growth is its own.
_MEASURE_SCRIPT = r"""
import json, re, resource, sys, time
import torch
from course_lib.ops.logprobs import fused_linear_logprobs, selective_log_softmax

args = json.loads(sys.argv[1])
device = torch.device(args["device"])
torch.manual_seed(0)
hidden = torch.randn(args["n_tokens"], args["hidden"], device=device, requires_grad=True)
weight = (torch.randn(args["vocab"], args["hidden"], device=device) / args["hidden"] ** 0.5).requires_grad_(True)
ids = torch.randint(0, args["vocab"], (args["n_tokens"],), device=device)

def run():
    if args["chunk_size"] is None:  # naive: the full (N, V) logits, then log-softmax + gather
        logits = hidden @ weight.T
        logps = selective_log_softmax(logits[None], ids[None])[0]
    else:
        logps = fused_linear_logprobs(hidden, weight, ids, chunk_size=args["chunk_size"])
    if args["backward"]:
        logps.sum().backward()
    return logps

def proc_status_kib(field):
    return int(re.search(field + r":\s+(\d+)", open("/proc/self/status").read()).group(1))

if device.type == "cuda":
    method = "cuda.max_memory_allocated"
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() - base
else:
    try:  # Linux: reset this process's RSS high-water mark, then read it back
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        method, base = "VmHWM", proc_status_kib("VmRSS") * 1024
    except OSError:
        # Elsewhere: peak RSS since start (bytes on macOS, KiB on Linux). It can start
        # from the parent's peak after fork/exec, so it only sees growth beyond that.
        method = "ru_maxrss"
        scale = 1 if sys.platform == "darwin" else 1024
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    if method == "VmHWM":
        peak = proc_status_kib("VmHWM") * 1024 - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale - base
print(json.dumps({"peak_bytes": peak, "seconds": seconds, "method": method}))
"""


def _measure_once(settings: dict[str, Any], in_process: bool) -> dict[str, Any]:
    if in_process:  # CUDA: the allocator's own counters isolate the measurement
        import io
        from contextlib import redirect_stdout

        buffer = io.StringIO()
        saved_argv = sys.argv
        sys.argv = ["measure", json.dumps(settings)]
        try:
            with redirect_stdout(buffer):
                exec(compile(_MEASURE_SCRIPT, "<measure_logprob_memory>", "exec"), {"__name__": "__measure__"})
        finally:
            sys.argv = saved_argv
        return json.loads(buffer.getvalue().strip().splitlines()[-1])
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    completed = subprocess.run([sys.executable, "-c", _MEASURE_SCRIPT, json.dumps(settings)], env=env,
                               capture_output=True, text=True, timeout=600)
    if completed.returncode != 0:
        raise RuntimeError(f"memory measurement failed for {settings}:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure_logprob_memory(chunk_sizes: Sequence[int | None] = (None, 4096, 1024, 256, 64),
                           n_tokens: int = 4096, hidden: int = 256, vocab: int = 32_768,
                           backward: bool = True, device: str | None = None) -> list[dict[str, Any]]:
    """Peak extra memory of per-token log-probs, naive vs fused at each chunk size.

    Args:
        chunk_sizes: `None` = the naive path (full logits); an int = rows per chunk of
            `fused_linear_logprobs`.
        n_tokens: N rows (completion tokens of the batch).
        hidden: H, the hidden size.
        vocab: V, the vocabulary size.
        backward: include the backward pass (where the naive path peaks).
        device: "cpu" or "cuda"; None = cuda when available.

    Returns:
        One dict per chunk size: `chunk_size`, `peak_mib` (peak memory above what the
        inputs already hold), `seconds`, `full_logits_mib` (`N * V * 4` bytes, one
        float32 logits tensor), `n_tokens`, `hidden`, `vocab`, `device`, `method`
        ("VmHWM", "ru_maxrss" or "cuda.max_memory_allocated").
    """
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is unknown. Fix: use 'cpu' or 'cuda'.")
    results = []
    for chunk_size in chunk_sizes:
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_sizes holds {chunk_size}; chunk sizes must be >= 1 (None = naive).")
        settings = dict(chunk_size=chunk_size, n_tokens=n_tokens, hidden=hidden, vocab=vocab, backward=backward,
                        device=device)
        measured = _measure_once(settings, in_process=device == "cuda")
        results.append({
            "chunk_size": chunk_size, "peak_mib": measured["peak_bytes"] / MIB, "seconds": measured["seconds"],
            "full_logits_mib": n_tokens * vocab * 4 / MIB, "n_tokens": n_tokens, "hidden": hidden, "vocab": vocab,
            "device": device, "method": measured["method"],
        })
    return results


def plot_memory_vs_chunk_size(results: Sequence[dict[str, Any]]) -> Figure:
    """Measured peak memory (left) and time (right) vs chunk size, naive as a line.

    Args:
        results: `measure_logprob_memory` output (at least one fused entry).

    Returns:
        A Figure with 2 axes. Left: the fused peaks as the first line (x = chunk size,
        log scale; y = MiB), the naive peak as a horizontal line, and the size of one
        float32 `(N, V)` logits tensor dotted. Right: seconds, same layout.
    """
    fused = sorted((r for r in results if r["chunk_size"] is not None), key=lambda r: r["chunk_size"])
    naive = [r for r in results if r["chunk_size"] is None]
    if not fused:
        raise ValueError("results hold no fused measurement. Fix: pass chunk sizes, e.g. (None, 1024, 64).")
    first = fused[0]
    chunks = np.array([r["chunk_size"] for r in fused], dtype=float)
    fig = new_figure(11, 4.0)
    memory_ax, time_ax = fig.subplots(1, 2)
    memory_ax.plot(chunks, [r["peak_mib"] for r in fused], marker="o", color="tab:green",
                   label="chunked, block by block")
    time_ax.plot(chunks, [r["seconds"] for r in fused], marker="o", color="tab:green",
                 label="chunked, block by block")
    if naive:
        memory_ax.axhline(naive[0]["peak_mib"], color="tab:red", label=f"naive: {naive[0]['peak_mib']:.0f} MiB")
        time_ax.axhline(naive[0]["seconds"], color="tab:red", label="naive (full logits)")
    memory_ax.axhline(first["full_logits_mib"], color="0.4", linestyle=":",
                      label=f"one float32 (N, V) logits = {first['full_logits_mib']:.0f} MiB")
    memory_ax.set(xscale="log", yscale="log", xlabel="chunk size (rows of logits at once)",
                  ylabel="peak extra memory (MiB)", title="Peak memory, forward + backward")
    time_ax.set(xscale="log", xlabel="chunk size (rows of logits at once)", ylabel="seconds",
                title="Time (not a benchmark: one run)")
    for axis in (memory_ax, time_ax):  # labelled minor ticks collide when the sizes span under a decade
        axis.xaxis.set_minor_formatter(NullFormatter())
    time_ax.set_ylim(bottom=0)
    for ax in (memory_ax, time_ax):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(f"Log-probs of N={first['n_tokens']} tokens, V={first['vocab']}, H={first['hidden']} "
                 f"on {first['device']} ({first['method']})", fontsize=11)
    return fig
