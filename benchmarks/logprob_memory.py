"""Peak memory and time of fused vs naive per-token log-probs, forward + backward.

Both variants compute `log_softmax(hidden @ weight.T / T)[ids]` for N = batch * seq
tokens and back-propagate a random upstream gradient into `hidden` and `weight`:

- naive: full `(N, V)` logits -> log_softmax -> gather (what autograd does by default);
- fused: `course_lib.ops.logprobs.fused_linear_logprobs` (chunked, recomputed backward).

Defaults are SmolLM2-135M's sizes (hidden 576, vocabulary 49,152) at 8 x 1,024 tokens.

Memory: "peak extra" is the peak memory during the forward + backward minus the memory
held just before it (inputs, weights, libraries). On CUDA it is
`torch.cuda.max_memory_allocated()` minus `memory_allocated()` before the run. On CPU,
where PyTorch's allocator is invisible to tracemalloc, each variant runs in its own
subprocess and reports its resident-set high-water mark (`getrusage` `ru_maxrss`) minus
its resident set just before the first run, so neither variant pollutes the other.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/logprob_memory.py
    python benchmarks/logprob_memory.py --batch 2 --seq 512 --repeats 1 --chunk-size 256
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from course_lib.ops.logprobs import default_chunk_size, fused_linear_logprobs  # noqa: E402

VARIANTS = ("naive", "fused")


def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _make_inputs(args, device):
    gen = torch.Generator(device="cpu").manual_seed(0)
    num_tokens = args.batch * args.seq
    dtype = getattr(torch, args.dtype)
    hidden = torch.randn(num_tokens, args.hidden, generator=gen).to(device, dtype)
    weight = (torch.randn(args.vocab, args.hidden, generator=gen) / args.hidden**0.5).to(device, dtype)
    ids = torch.randint(0, args.vocab, (num_tokens,), generator=gen).to(device)
    upstream = torch.randn(num_tokens, generator=gen).to(device, dtype)
    return hidden.requires_grad_(True), weight.requires_grad_(True), ids, upstream


def _run_once(variant, hidden, weight, ids, upstream, args):
    hidden.grad = None
    weight.grad = None
    if variant == "naive":
        logits = hidden @ weight.t()
        if args.temperature != 1.0:
            logits = logits / args.temperature
        logps = torch.log_softmax(logits, dim=-1).gather(1, ids[:, None]).squeeze(1)
        del logits
    else:
        logps = fused_linear_logprobs(hidden, weight, ids, temperature=args.temperature,
                                      chunk_size=args.chunk_size)
    (logps * upstream).sum().backward()
    return logps.detach()


def measure(variant: str, args) -> dict:
    """Run one variant `1 + repeats` times (the first is a warm-up) in this process."""
    device = torch.device(args.device)
    hidden, weight, ids, upstream = _make_inputs(args, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = _current_rss_bytes()
    times, cpu_times = [], []
    for repeat in range(1 + args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        logps = _run_once(variant, hidden, weight, ids, upstream, args)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if repeat > 0:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else _peak_rss_bytes()
    return {
        "variant": variant,
        "peak_extra_bytes": peak - baseline,
        "seconds": statistics.median(times),
        "cpu_seconds": statistics.median(cpu_times),
        "all_seconds": times,
        # Checksums so the parent can confirm that both variants computed the same thing.
        "logps_sum": logps.double().sum().item(),
        "grad_hidden_norm": hidden.grad.double().norm().item(),
        "grad_weight_norm": weight.grad.double().norm().item(),
    }


def _measure_in_subprocess(variant: str, argv: list[str]) -> dict:
    command = [sys.executable, __file__, *argv, "--worker", variant]
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="sequences")
    parser.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    parser.add_argument("--hidden", type=int, default=576, help="hidden size H")
    parser.add_argument("--vocab", type=int, default=49152, help="vocabulary size V")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="rows per chunk of the fused path (default: from its memory budget)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs after one warm-up")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.chunk_size = args.chunk_size or default_chunk_size(args.vocab)
    return args


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, args)))
        return
    if args.device == "cpu":
        results = {variant: _measure_in_subprocess(variant, argv) for variant in VARIANTS}
    else:
        results = {variant: measure(variant, args) for variant in VARIANTS}
        torch.cuda.empty_cache()

    num_tokens = args.batch * args.seq
    print(f"log-probs + backward, N = {args.batch} x {args.seq} = {num_tokens} tokens, "
          f"H = {args.hidden}, V = {args.vocab}, {args.dtype} on {args.device} "
          f"(threads: {torch.get_num_threads()}), fused chunk = {args.chunk_size} rows, "
          f"median of {args.repeats} after a warm-up")
    print(f"  (for scale: one (N, V) float32 logits tensor is {num_tokens * args.vocab * 4 / 2**20:,.0f} MiB)")
    print(f"{'variant':<8} {'peak extra MiB':>15} {'wall s':>9} {'CPU s':>9}")
    for variant in VARIANTS:
        r = results[variant]
        print(f"{variant:<8} {r['peak_extra_bytes'] / 2**20:>15,.0f} {r['seconds']:>9.3f} "
              f"{r['cpu_seconds']:>9.3f}")
    naive, fused = results["naive"], results["fused"]
    print(f"peak extra memory naive/fused: {naive['peak_extra_bytes'] / max(fused['peak_extra_bytes'], 1):.1f}x")
    print(f"time fused/naive: {fused['seconds'] / naive['seconds']:.2f}x (wall), "
          f"{fused['cpu_seconds'] / naive['cpu_seconds']:.2f}x (CPU time; steadier on a shared machine)")
    for key in ("logps_sum", "grad_hidden_norm", "grad_weight_norm"):
        rel = abs(naive[key] - fused[key]) / max(abs(naive[key]), 1e-12)
        print(f"check {key}: naive {naive[key]:.6g} fused {fused[key]:.6g} (rel. diff {rel:.1e})")


if __name__ == "__main__":
    main()
