"""Greedy evaluation with the prompts' common beginning run once, against plain left padding.

Both arms answer the same held-out problems greedily in the same process (course_lib.evaluation.
greedy_completions); the plain arm turns sharing off (course_lib.rollout.shared_prefix). The
script prints each arm's CPU seconds, the ratio, the common prefix's share of the prompt tokens
and whether the two arms gave the same answers.

    OMP_NUM_THREADS=1 python benchmarks/shared_prefix.py --model smollm2-135m --task arithmetic-tagged --n 200
"""

from __future__ import annotations

import argparse
import time

DEFAULT_TOKENS = {"tiny": 6, "smollm2-135m": 32}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="tiny, smollm2-135m or a local folder")
    parser.add_argument("--task", default="arithmetic-tagged")
    parser.add_argument("--n", type=int, default=64, help="held-out problems")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="answer length (default: 6 for tiny, else 32)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)

    import torch

    from course_lib.data import get_task
    from course_lib.evaluation import greedy_completions
    from course_lib.models import load_policy
    from course_lib.rollout import shared_prefix, tokenize_prompts

    torch.manual_seed(0)
    model, tokenizer = load_policy(args.model)
    prompts = list(get_task(args.task, split="test", n=args.n, seed=0)["prompt"])
    tokens = args.max_new_tokens or DEFAULT_TOKENS.get(args.model, 32)
    rows = tokenize_prompts(tokenizer, prompts)
    batches = [rows[start:start + args.batch_size] for start in range(0, len(rows), args.batch_size)]
    common = sum(shared_prefix.common_prefix_length(batch) * len(batch) for batch in batches)
    print(f"{args.model} on {args.task}: {len(rows)} prompts, {sum(map(len, rows))} prompt tokens, "
          f"{common} of them in their batch's common prefix ({common / sum(map(len, rows)):.0%}); "
          f"{tokens} new tokens, batches of {args.batch_size}")

    results, answers = {}, {}
    default = shared_prefix.MIN_SHARED_TOKENS
    for arm, minimum in (("plain (left padding)", 10**9), ("shared prefix", default)):
        shared_prefix.MIN_SHARED_TOKENS = minimum
        started = time.process_time()
        answers[arm] = greedy_completions(model, tokenizer, prompts, max_new_tokens=tokens,
                                          batch_size=args.batch_size, progress=False)
        results[arm] = time.process_time() - started
    shared_prefix.MIN_SHARED_TOKENS = default
    base = results["plain (left padding)"]
    print(f"{'arm':22s} {'CPU s':>8s} {'x plain':>8s}")
    for arm, seconds in results.items():
        print(f"{arm:22s} {seconds:8.1f} {seconds / base:8.2f}")
    same = answers["plain (left padding)"] == answers["shared prefix"]
    print(f"the same {len(prompts)} answers: {same}")
    return {"cpu_s": results, "same_answers": same, "common_prefix_tokens": common}


if __name__ == "__main__":
    main()
