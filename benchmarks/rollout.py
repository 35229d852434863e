"""Rollout throughput: the vLLM engine against the Hugging Face ``generate`` engine.

Both engines sample the same prompts with the same settings in one process, with the same
thread budget; each does one warm-up call first (not timed), then they take turns. Throughput counts completion
tokens that were really generated (up to and including eos), so the padding steps that
``generate`` spends on finished rows count as time, not as tokens.

    OMP_NUM_THREADS=1 python benchmarks/rollout.py                # SmolLM2-135M, 8 prompts x 4
    OMP_NUM_THREADS=1 python benchmarks/rollout.py --model tiny --repeats 3
    OMP_NUM_THREADS=2 python benchmarks/rollout.py --threads 2

``--vllm-multiprocessing`` runs vLLM's engine core in its own process, where vLLM chooses
and pins its OpenMP threads itself (its default outside this library).
"""

from __future__ import annotations

import argparse
import os
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="tiny, smollm2-135m or a folder")
    parser.add_argument("--task", default="arithmetic-tagged")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4, help="completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per engine (after one warm-up)")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")),
                        help="torch threads for both engines (default: OMP_NUM_THREADS or 1)")
    parser.add_argument("--vllm-multiprocessing", action="store_true",
                        help="run vLLM's engine core in a separate process with vLLM's own thread pinning")
    parser.add_argument("--kv-cache-gib", type=float, default=1.0)
    parser.add_argument("--vllm-dtype", default="float32",
                        help="vLLM weights; bfloat16 is much faster on CPUs with AMX, but then the sampling "
                             "log-probs no longer match the float32 trainer (the TIS correction's job)")
    return parser.parse_args()


def interleaved_throughput(engines: dict, prompts, n, sampling, repeats):
    """Tokens per second of each engine over ``repeats`` timed calls after one untimed warm-up.

    The engines take turns call by call, so a change in machine load hits both alike.
    """
    from dataclasses import replace

    for engine in engines.values():
        engine.generate(prompts, n, replace(sampling, seed=10_000))  # warm-up: kernels, allocator, caches
    totals = {name: [0, 0.0] for name in engines}
    for repeat in range(repeats):
        for name, engine in engines.items():
            start = time.perf_counter()
            batch = engine.generate(prompts, n, replace(sampling, seed=repeat))
            totals[name][1] += time.perf_counter() - start
            totals[name][0] += batch.num_completion_tokens
    return {name: (tokens / seconds, tokens, seconds) for name, (tokens, seconds) in totals.items()}


def main():
    args = parse_args()
    if args.vllm_multiprocessing:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    import torch

    torch.set_num_threads(args.threads)
    from course_lib.data import get_task
    from course_lib.models import load_policy, resolve_model_path
    from course_lib.rollout import HFEngine, SamplingConfig

    model, tokenizer = load_policy(args.model)
    prompts = get_task(args.task, split="test", n=args.prompts)["prompt"]
    sampling = SamplingConfig(temperature=args.temperature, max_tokens=args.max_tokens)
    print(f"model={args.model} prompts={args.prompts} n={args.n} max_tokens={args.max_tokens} "
          f"temperature={args.temperature} torch threads={args.threads} repeats={args.repeats}")

    from course_lib.rollout.vllm_engine import VLLMEngine

    start = time.perf_counter()
    vllm_engine = VLLMEngine(resolve_model_path(args.model), tokenizer, dtype=args.vllm_dtype,
                             kv_cache_gib=args.kv_cache_gib)
    startup = time.perf_counter() - start
    torch.set_num_threads(args.threads)
    mode = "own process, vLLM-pinned threads" if args.vllm_multiprocessing else "in-process"
    results = interleaved_throughput({"hf": HFEngine(model, tokenizer), "vllm": vllm_engine}, prompts, args.n,
                                     sampling, args.repeats)
    labels = {"hf": "HF generate (float32)", "vllm": f"vLLM ({args.vllm_dtype}, {mode}; start {startup:.0f} s)"}
    for name, (rate, tokens, seconds) in results.items():
        print(f"{labels[name]:<55} {rate:8.1f} tokens/s  ({tokens} tokens in {seconds:.2f} s)")
    print(f"ratio vLLM / HF: {results['vllm'][0] / results['hf'][0]:.2f}x")
    vllm_engine.shutdown()

if __name__ == "__main__":
    main()
