"""Dynamic sampling on and off: held-out lift per sampled token and per minute.

The tiny model on two-digit addition with 4 completions per prompt (about a quarter of
the groups then have equal rewards at its ~30% accuracy), the GRPO preset otherwise. For
each seed, the same run with ``dynamic_sampling`` off and on; greedy accuracy on 200
held-out problems before and after, the paired lift with its 95% interval
(``course_lib.evaluation.lift_interval``), the tokens that went through the sampler
(``num_tokens``: prompts + completions of every generation round) and the wall time.

    OMP_NUM_THREADS=1 python benchmarks/dynamic_sampling.py [--steps 100] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.evaluation import greedy_completions, is_correct, lift_interval
from course_lib.models import load_policy
from course_lib.presets import run_settings, task_settings
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer


def _correct(model, tokenizer, test) -> list[bool]:
    completions = greedy_completions(model, tokenizer, test["prompt"], max_new_tokens=6)
    return [is_correct(c, a) for c, a in zip(completions, test["answer"])]


def run(seed: int, dynamic: bool, steps: int, test) -> dict:
    model, tokenizer = load_policy("tiny")
    before = _correct(model, tokenizer, test)
    run_folder = tempfile.TemporaryDirectory(prefix="ds-")  # goes when the run's results are returned
    settings = dict(run_settings("tiny", "arithmetic", "grpo"), model_name_or_path="tiny", num_generations=4,
                    max_steps=steps, seed=seed, save_steps=0, doctor="off", dynamic_sampling=dynamic,
                    output_dir=run_folder.name)
    trainer = Trainer(make_config("grpo", **settings), get_reward_functions(task_settings("arithmetic")["rewards"]),
                      get_task("arithmetic", split="train", n=4000, seed=seed), model, tokenizer, progress=False)
    started = time.time()
    rows = trainer.train()
    minutes = (time.time() - started) / 60
    lift, low, high = lift_interval(before, _correct(trainer.model, tokenizer, test))
    rounds = [r.get("dynamic_sampling/num_gen_batches", 1.0) for r in rows]
    return {"lift": lift, "low": low, "high": high, "tokens": rows[-1]["num_tokens"], "minutes": minutes,
            "rounds": sum(rounds) / len(rounds), "zero_std": sum(r["frac_reward_zero_std"] for r in rows) / len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    test = get_task("arithmetic", split="test", n=200, seed=1)
    print("seed  dynamic  lift [95% CI]             Mtok   lift/Mtok [CI]          min   lift/min  rounds  zero-std")
    for seed in args.seeds:
        for dynamic in (False, True):
            r = run(seed, dynamic, args.steps, test)
            mtok = r["tokens"] / 1e6
            print(f"{seed:4d}  {str(dynamic):7s}  {r['lift']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]  "
                  f"{mtok:5.2f}  {r['lift'] / mtok:+.3f} [{r['low'] / mtok:+.3f}, {r['high'] / mtok:+.3f}]  "
                  f"{r['minutes']:4.1f}  {r['lift'] / r['minutes']:+.3f}  {r['rounds']:5.2f}  {r['zero_std']:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
