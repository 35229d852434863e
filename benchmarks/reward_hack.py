"""A reward hack that takes, and its fix: the tiny model on a flawed reward, then on the verifier.

Trains twice (``course_lib.reward_hack.run_reward_hack``: GRPO, the tiny model's measured
arithmetic preset, 200 steps, greedy accuracy on 50 held-out problems every 20 steps):

- ``flawed``: ``course_lib.rewards.flawed.closeness_reward``, partial credit by distance with
  the absolute value forgotten, so that answers above the reference earn more than the answer;
- ``fixed``: the verifier ``correctness_first_number_reward``.

Prints both curves, the doctor's findings and completions of the last policy, and writes the
record lesson 09 plots (``course_lib/assets/rewards/reward_hack.json``, or ``--out``).

    OMP_NUM_THREADS=1 python benchmarks/reward_hack.py          # both runs, a few minutes on one thread
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from course_lib.reward_hack import REWARDS, STORED, run_reward_hack, trimmed


def samples(trainer, n: int = 6) -> list[dict]:
    """Completions of the last policy (temperature 1, seed 0) to held-out problems, with their references."""
    from course_lib.data import get_task
    from course_lib.rollout import SamplingConfig, make_engine

    problems = get_task("arithmetic", split="test", n=n, seed=2)
    out = make_engine("hf", trainer.model, trainer.tokenizer).generate(
        list(problems["prompt"]), n=2, sampling=SamplingConfig(max_tokens=6, temperature=1.0, seed=0))
    return [{"question": q, "answer": a, "completions": out.texts[2 * i:2 * i + 2]}
            for i, (q, a) in enumerate(zip(problems["question"], problems["answer"]))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=STORED)
    args = parser.parse_args()
    from course_lib.doctor import diagnose

    record = {"settings": {"model": "tiny", "task": "arithmetic", "algo": "grpo", "max_steps": args.steps,
                           "eval": "greedy accuracy on 50 held-out problems every 20 steps", "rewards": REWARDS}}
    from course_lib.data import get_task
    from course_lib.evaluation import evaluate_accuracy
    from course_lib.models import load_policy

    test = get_task("arithmetic", split="test", n=200, seed=1)
    before = evaluate_accuracy(*load_policy("tiny"), test, max_new_tokens=6)
    record["settings"]["greedy_accuracy_200_before"] = before
    for which in ("flawed", "fixed"):
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            rows, trainer = run_reward_hack(which, folder, max_steps=args.steps)
        seconds = time.perf_counter() - start
        history = trimmed(rows)
        findings = [f.rule for f in diagnose(history, trainer.config)]
        after = evaluate_accuracy(trainer.model, trainer.tokenizer, test, max_new_tokens=6)
        record[which] = {"history": history, "samples": samples(trainer), "seconds": round(seconds, 1),
                         "doctor": findings, "greedy_accuracy_200_after": after}
        print(f"{which} ({REWARDS[which]}), {seconds:.0f} s; greedy accuracy on 200 held-out problems "
              f"{before:.3f} -> {after:.3f}; doctor: {findings}")
        for row in history:
            if "eval/greedy_accuracy" in row:
                print(f"  step {row['step']:>3}  reward {row['reward']:>10.3f}  held-out greedy accuracy "
                      f"{row['eval/greedy_accuracy']:.2f}")
        for s in record[which]["samples"][:3]:
            print(f"  {s['question']} (answer {s['answer']}): {s['completions']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=0))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
