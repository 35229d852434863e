"""How far a small LLM judge agrees with the verifier, on the tiny model's held-out arithmetic answers.

The tiny model answers ``--n`` held-out arithmetic problems, ``--group`` samples each at
temperature 1 (a mix of right and wrong answers). The verifier
(:func:`course_lib.rewards.answers.is_correct`) says which are right. Then the judge (default
the embedded SmolLM2-135M-Instruct) grades them two ways:

- pointwise (``make_rubric_judge_reward``): score >= 5 counts as "right"; reported: accuracy
  and Cohen's kappa against the verifier, the share of unparsable replies;
- group-relative (``make_group_judge_reward``): for every pair (right, wrong) of one prompt's
  samples, whether the judge ranks the right one higher (0.5 is a coin flip).

Every judgment is stored in ``--cache`` (lesson 09 replays them from
``course_lib/assets/rewards/judge_smollm2_arithmetic.json`` without loading the judge).

    OMP_NUM_THREADS=1 python benchmarks/judge_agreement.py            # 12 problems x 4 samples
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from course_lib.judge import (DEFAULT_RUBRIC, STORED_JUDGMENTS, Judge, agreement, held_out_answers,
                                     make_group_judge_reward, make_rubric_judge_reward, pairwise_order)

CACHE = STORED_JUDGMENTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", default="smollm2-135m", help="any model load_policy loads")
    parser.add_argument("--n", type=int, default=12)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args()
    from course_lib.rewards.answers import is_correct

    prompts, completions, answers = held_out_answers(args.n, args.group)
    verdicts = [is_correct(c, a) for c, a in zip(completions, answers)]
    judge = Judge(args.judge, max_new_tokens=8, timeout_s=None, cache_path=str(args.cache))
    start = time.perf_counter()
    pointwise = make_rubric_judge_reward(judge, DEFAULT_RUBRIC)(prompts=prompts, completions=completions)
    ranked = make_group_judge_reward(judge, DEFAULT_RUBRIC)(prompts=prompts, completions=completions)
    seconds = time.perf_counter() - start
    judge.save()
    stats = agreement(pointwise, verdicts)
    order, pairs = pairwise_order(ranked, verdicts, args.group)
    print(json.dumps({"judge": args.judge, "answers": len(completions), "verifier_right": sum(verdicts),
                      "pointwise": stats, "pointwise_unparsable": sum(s is None for s in pointwise),
                      "group_unscored": sum(s is None for s in ranked),
                      "group_right_above_wrong": order, "group_pairs": pairs,
                      "judge_calls": judge.stats.calls, "judge_seconds": round(seconds, 1),
                      "cache": str(args.cache)}, indent=1))


if __name__ == "__main__":
    main()
