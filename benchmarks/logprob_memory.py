"""Peak memory and time of per-token log-probs from the LM head, forward + backward.

Every variant computes `log_softmax(hidden @ weight.T / T)[ids]` for N = batch * seq
tokens and back-propagates a random upstream gradient into `hidden` and `weight`:

- naive: full `(N, V)` logits -> float32 log_softmax -> gather (what autograd does by default);
- chunked: `course_lib.ops.logprobs.fused_linear_logprobs` (PyTorch, row chunks, recomputed backward);
- triton: `course_lib.ops.triton_logprobs.triton_linear_logprobs` (Triton kernels; CUDA);
- trl: TRL's own chunked LM-head log-probs, `trl.kernels.ChunkedLogProbFunction` (the
  function behind its `add_fused_lm_head`, with its default 32,768-column chunks);
- liger: Liger-Kernel's fused linear cross-entropy with `reduction="none"` (log-prob =
  -loss; the temperature is folded into `hidden`), when `liger_kernel` is installed.

Defaults are SmolLM2-135M's sizes (hidden 576, vocabulary 49,152) at 8 x 1,024 tokens, in
float32, naive and chunked on CPU and every variant on CUDA. `--grid` runs the four
GPU shapes of the course's benchmark table, (8 x 1,024) and (8 x 16,384) tokens with
(H, V) = (576, 49,152) and (2,048, 128,256), in bfloat16, and prints a Markdown table.

Memory: "peak extra" is the peak memory during the forward + backward minus the memory
held just before it (inputs, weights, libraries). On CUDA it is
`torch.cuda.max_memory_allocated()` minus `memory_allocated()` before the run, each
variant in turn in one process (a variant that runs out of memory is reported as such).
On CPU, where PyTorch's allocator is invisible to tracemalloc, each variant runs in its
own subprocess and reports its resident-set high-water mark (`getrusage` `ru_maxrss`)
minus its resident set just before the first run, so no variant pollutes another.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/logprob_memory.py
    python benchmarks/logprob_memory.py --batch 2 --seq 512 --repeats 1 --chunk-size 256
    python benchmarks/logprob_memory.py --device cuda --grid          # the GPU table
    python benchmarks/logprob_memory.py --device cuda --dtype bfloat16 --seq 16384 --hidden 2048 --vocab 128256
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

VARIANTS = ("naive", "chunked", "triton", "trl", "liger")
CPU_DEFAULT = ("naive", "chunked")
# (batch, seq, hidden, vocab) of the GPU table: SmolLM2-135M's head and a 128K-vocabulary
# head of width 2,048 (Llama 3.2 1B), at 8 sequences of 1,024 and 16,384 tokens.
GRID = [(8, 1024, 576, 49152), (8, 1024, 2048, 128256), (8, 16384, 576, 49152), (8, 16384, 2048, 128256)]
TRL_CHUNK_COLUMNS = 32768  # the chunk TRL's add_fused_lm_head passes


class VariantUnavailable(RuntimeError):
    """The variant cannot run here (library missing, no GPU); the message says why."""


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
    upstream = torch.randn(num_tokens, generator=gen).to(device, torch.float32)
    return hidden.requires_grad_(True), weight.requires_grad_(True), ids, upstream


def _variant_function(variant: str, args):
    """`f(hidden, weight, ids) -> (N,) log-probs` for one variant; imports happen here."""
    temperature = args.temperature
    if variant == "naive":
        def naive(hidden, weight, ids):
            logits = (hidden @ weight.t()).float()  # (N, V): what `head(hidden).float()` costs
            if temperature != 1.0:
                logits = logits / temperature
            return torch.log_softmax(logits, dim=-1).gather(1, ids[:, None]).squeeze(1)
        return naive
    if variant == "chunked":
        return lambda hidden, weight, ids: fused_linear_logprobs(hidden, weight, ids, temperature=temperature,
                                                                 chunk_size=args.chunk_size)
    if variant == "triton":
        from course_lib.ops.triton_logprobs import triton_available, triton_linear_logprobs

        if not triton_available(args.device):
            raise VariantUnavailable(f"Triton kernels need a CUDA device (or TRITON_INTERPRET=1), not {args.device}")
        return lambda hidden, weight, ids: triton_linear_logprobs(hidden, weight, ids, temperature=temperature)[0]
    if variant == "trl":
        try:
            from trl.kernels import ChunkedLogProbFunction
        except ImportError as error:
            raise VariantUnavailable(f"trl.kernels.ChunkedLogProbFunction missing ({error}); needs trl>=1.16") from None
        # (hidden, weight, bias, targets, temperature, chunk columns, softcap, logit scale, extra outputs)
        return lambda hidden, weight, ids: ChunkedLogProbFunction.apply(
            hidden, weight, None, ids, temperature, TRL_CHUNK_COLUMNS, None, 1.0, ())[0]
    if variant == "liger":
        try:
            from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
        except ImportError:
            raise VariantUnavailable("liger_kernel is not installed (pip install liger-kernel)") from None
        if args.device == "cpu":
            raise VariantUnavailable("Liger-Kernel's Triton kernels need a GPU")

        def liger(hidden, weight, ids):
            scaled = hidden if temperature == 1.0 else hidden / temperature
            loss = liger_fused_linear_cross_entropy(scaled, weight, ids, reduction="none")
            return -(loss[0] if isinstance(loss, tuple) else loss)
        return liger
    raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")


def _run_once(fn, hidden, weight, ids, upstream):
    hidden.grad = None
    weight.grad = None
    logps = fn(hidden, weight, ids)
    (logps.float() * upstream).sum().backward()
    return logps.detach()


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(variant: str, args) -> dict:
    """Run one variant `1 + repeats` times (the first is a warm-up) in this process."""
    device = torch.device(args.device)
    try:
        fn = _variant_function(variant, args)
    except VariantUnavailable as error:
        return {"variant": variant, "skipped": str(error)}
    hidden, weight, ids, upstream = _make_inputs(args, device)
    _synchronize(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = _current_rss_bytes()
    times, cpu_times = [], []
    try:
        for repeat in range(1 + args.repeats):
            _synchronize(device)
            start, cpu_start = time.perf_counter(), time.process_time()
            logps = _run_once(fn, hidden, weight, ids, upstream)
            _synchronize(device)
            if repeat > 0:
                times.append(time.perf_counter() - start)
                cpu_times.append(time.process_time() - cpu_start)
    except torch.OutOfMemoryError:
        peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else _peak_rss_bytes()
        del hidden, weight
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return {"variant": variant, "skipped": f"out of memory (peak {(peak - baseline) / 2**30:.1f} GiB)"}
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else _peak_rss_bytes()
    return {
        "variant": variant,
        "peak_extra_bytes": peak - baseline,
        "seconds": statistics.median(times),
        "cpu_seconds": statistics.median(cpu_times),
        "all_seconds": times,
        # Checksums so the parent can confirm that every variant computed the same thing.
        "logps_sum": logps.double().sum().item(),
        "grad_hidden_norm": hidden.grad.double().norm().item(),
        "grad_weight_norm": weight.grad.double().norm().item(),
    }


def _measure_in_subprocess(variant: str, argv: list[str]) -> dict:
    command = [sys.executable, __file__, *argv, "--worker", variant]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        return {"variant": variant, "skipped": "failed: " + completed.stderr.strip().splitlines()[-1]}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="sequences")
    parser.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    parser.add_argument("--hidden", type=int, default=576, help="hidden size H")
    parser.add_argument("--vocab", type=int, default=49152, help="vocabulary size V")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="rows per chunk of the chunked path (default: from its memory budget)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs after one warm-up")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                        help="default: float32 (bfloat16 with --grid)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--variants", default=None,
                        help=f"comma-separated, from {','.join(VARIANTS)} "
                             f"(default: {','.join(CPU_DEFAULT)} on CPU, all on CUDA)")
    parser.add_argument("--grid", action="store_true", help="the four shapes of the GPU table, as Markdown")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.grid else "float32")
    default = CPU_DEFAULT if args.device == "cpu" else VARIANTS
    args.variants = tuple(v for v in (args.variants.split(",") if args.variants else default) if v)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is visible to PyTorch")
    args.chunk_size = args.chunk_size or default_chunk_size(args.vocab)
    return args


def run_shape(args, argv) -> dict:
    """Measure every requested variant at `args`' shape; {variant: result}."""
    if args.device == "cpu":
        return {variant: _measure_in_subprocess(variant, argv) for variant in args.variants}
    return {variant: measure(variant, args) for variant in args.variants}


def print_report(args, results) -> None:
    num_tokens = args.batch * args.seq
    print(f"log-probs + backward, N = {args.batch} x {args.seq} = {num_tokens} tokens, "
          f"H = {args.hidden}, V = {args.vocab}, {args.dtype} on {args.device} "
          f"(threads: {torch.get_num_threads()}), chunked path: {args.chunk_size} rows, "
          f"median of {args.repeats} after a warm-up")
    print(f"  (for scale: one (N, V) float32 logits tensor is {num_tokens * args.vocab * 4 / 2**20:,.0f} MiB)")
    print(f"{'variant':<8} {'peak extra MiB':>15} {'wall s':>9} {'CPU s':>9} {'naive/this memory':>18} "
          f"{'this/naive time':>16}")
    naive = results.get("naive", {})
    for variant, r in results.items():
        if "skipped" in r:
            print(f"{variant:<8} skipped: {r['skipped']}")
            continue
        mem_ratio = time_ratio = ""
        if "seconds" in naive:
            mem_ratio = f"{naive['peak_extra_bytes'] / max(r['peak_extra_bytes'], 1):.1f}x"
            time_ratio = f"{r['seconds'] / naive['seconds']:.2f}x"
        print(f"{variant:<8} {r['peak_extra_bytes'] / 2**20:>15,.0f} {r['seconds']:>9.3f} "
              f"{r['cpu_seconds']:>9.3f} {mem_ratio:>18} {time_ratio:>16}")
    reference = naive if "seconds" in naive else next((r for r in results.values() if "seconds" in r), None)
    if reference is None:
        return
    for variant, r in results.items():
        if "seconds" not in r or r is reference:
            continue
        diffs = ", ".join(f"{key} {abs(reference[key] - r[key]) / max(abs(reference[key]), 1e-12):.1e}"
                          for key in ("logps_sum", "grad_hidden_norm", "grad_weight_norm"))
        print(f"check {variant} vs {reference['variant']} (rel. diff): {diffs}")


def print_grid_table(rows) -> None:
    """One Markdown line per (shape, variant): peak extra memory and time, with ratios."""
    print("\n| tokens | H | V | variant | peak extra GiB | naive / this memory | fwd+bwd ms | this / fastest other |")
    print("|---|---|---|---|---|---|---|---|")
    for shape_args, results in rows:
        naive = results.get("naive", {})
        timed = {v: r["seconds"] for v, r in results.items() if "seconds" in r}
        for variant, r in results.items():
            shape = f"{shape_args.batch} x {shape_args.seq:,} | {shape_args.hidden:,} | {shape_args.vocab:,}"
            if "seconds" not in r:
                print(f"| {shape} | {variant} | {r['skipped']} | | | |")
                continue
            memory_ratio = (f"{naive['peak_extra_bytes'] / max(r['peak_extra_bytes'], 1):.1f}x"
                            if "seconds" in naive else "naive did not run")
            others = [t for v, t in timed.items() if v != variant]
            versus = f"{r['seconds'] / min(others):.2f}x" if others else ""
            print(f"| {shape} | {variant} | {r['peak_extra_bytes'] / 2**30:.2f} | {memory_ratio} | "
                  f"{r['seconds'] * 1e3:.1f} | {versus} |")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, args)))
        return
    if not args.grid:
        print_report(args, run_shape(args, argv))
        return
    rows = []
    for batch, seq, hidden, vocab in GRID:
        shape_argv = [a for a in argv if a != "--grid"] + [
            "--batch", str(batch), "--seq", str(seq), "--hidden", str(hidden), "--vocab", str(vocab),
            "--dtype", args.dtype]
        shape_args = parse_args(shape_argv)
        results = run_shape(shape_args, shape_argv)
        print_report(shape_args, results)
        print()
        rows.append((shape_args, results))
    print_grid_table(rows)


if __name__ == "__main__":
    main()
