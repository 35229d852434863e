"""Synchronous against asynchronous GRPO (``async_generation``): learning per minute of wall time.

Each mode trains a fresh copy of the same model on the same task, settings and seed, for
``warmup`` optimizer steps and then for ``--seconds`` of wall time (the worker's start-up falls
in the warm-up: ~10 s of imports for the first asynchronous mode, which starts the fork server,
about a second for the next, forked from it): ``sync`` (generate, then learn, on one
core), ``async S=1`` / ``async S=2`` (``async_generation=True, max_staleness=S``: a worker
process samples the next generation batches while the trainer learns, and its log-probs are
the clip's old ones, ``async_old_logps="sampler"``), and ``async S=1 recompute`` (the trainer
recomputes the log-probs of each batch and the sampling correction reweights it:
``async_old_logps="recompute"``); ``course_lib.run.async_rollouts`` has both. The learning
rate is constant, so every mode follows the same schedule however many steps it fits.
Columns:

- ``steps/min``: optimizer steps per minute of wall time; ``x sync``: the ratio to sync.
- ``tok/s``: completion tokens sampled per wall second (the generation batch's mean
  completion length x its rows, summed over the timed steps).
- ``stale``: mean ``sample/staleness_max`` (optimizer steps between the sampling weights and
  the trainer's); ``clip``: mean fraction of tokens the clip held (``clip_ratio/region_mean``).
- ``acc``: greedy accuracy on ``--eval-n`` held-out problems after the same wall time, and
  ``lift``: its paired difference to the untrained model (``course_lib.evaluation.lift_interval``,
  95%); ``vs sync``: the paired difference to the synchronous run's accuracy.

On a machine with two cores the worker and the trainer each get one thread
(``OMP_NUM_THREADS=1``); the overlap can at best hide the shorter of the two phases.

    OMP_NUM_THREADS=1 python benchmarks/async_vs_sync.py                   # tiny, 30 s per mode
    OMP_NUM_THREADS=1 python benchmarks/async_vs_sync.py --models tiny-learn --seconds 30  # the tiny learning preset
    OMP_NUM_THREADS=1 python benchmarks/async_vs_sync.py --models smollm2 --seconds 180 --warmup 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib.presets import MEASURED  # noqa: E402

SETUPS = {  # "tiny" and "smollm2" as benchmarks/step_vs_trl.py; "tiny-learn": the tiny model's learning preset
    "tiny": {"model": "tiny", "task": "arithmetic", "rewards": ["correctness_first_number_reward"], "tokens": 8,
             "config": dict(per_device_train_batch_size=16, num_generations=8, max_completion_length=8,
                            learning_rate=3e-4, beta=0.0, loss_type="dapo", temperature=1.0)},
    "smollm2": {"model": "smollm2-135m", "task": "arithmetic-tagged", "tokens": 32,
                "rewards": ["answer_tag_format_reward", "correctness_reward"],
                "config": dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=32,
                               learning_rate=1e-4, beta=0.0, loss_type="dapo", temperature=0.7, use_lora=True,
                               lora_r=16, lora_alpha=32, lora_dropout=0.05)},
    "tiny-learn": {"model": "tiny", "task": "arithmetic", "rewards": ["correctness_first_number_reward"], "tokens": 8,
                   "config": {k: v for k, v in MEASURED[("tiny", "arithmetic", "grpo")].items()
                              if k not in ("max_steps", "lr_scheduler_type")}},
}
MODES = {"sync": {}, "async S=1": dict(async_generation=True, max_staleness=1),
         "async S=2": dict(async_generation=True, max_staleness=2),
         "async S=1 recompute": dict(async_generation=True, max_staleness=1, async_old_logps="recompute")}


def _correct(model, tokenizer, eval_rows, max_tokens):
    from course_lib.rewards.answers import is_correct
    from course_lib.evaluation import greedy_completions

    completions = greedy_completions(model, tokenizer, eval_rows["prompt"], max_tokens, 32, False)
    return [bool(is_correct(c, a)) for c, a in zip(completions, eval_rows["answer"])]


def run_mode(name: str, setup: dict, mode: dict, seconds: float, warmup: int, eval_rows) -> dict:
    from course_lib.algos import make_config
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    model, tokenizer = load_policy(setup["model"])
    ends, rows, holder = {}, [], []

    def on_step(row):  # the clock starts after the warm-up; the run stops at the first step past the budget
        ends[row["step"]] = time.perf_counter()
        rows.append(row)
        if row["step"] > warmup and ends[row["step"]] - ends[warmup] >= seconds:
            holder[0].max_steps = row["step"]

    with tempfile.TemporaryDirectory() as folder:
        config = make_config("grpo", model_name_or_path=setup["model"], output_dir=folder, max_steps=10**6,
                             gradient_accumulation_steps=1, logging_steps=10**6, save_steps=0, seed=0, doctor="off",
                             lr_scheduler_type="constant", **setup["config"], **mode)
        trainer = Trainer(config, get_reward_functions(setup["rewards"]), get_task(setup["task"], n=4096, seed=0),
                          model, tokenizer, progress=False, on_step=on_step)
        holder.append(trainer)
        trainer.train()
    last = max(ends)
    elapsed = ends[last] - ends[warmup]
    timed = [r for r in rows if r["step"] > warmup]
    batch = config.effective_generation_batch_size
    tokens = sum(r["completions/mean_length"] * batch for r in timed)
    model.eval()
    return {"name": name, "steps": len(timed), "steps/min": 60 * len(timed) / elapsed, "tok/s": tokens / elapsed,
            "stale": sum(r.get("sample/staleness_max", 0.0) for r in timed) / len(timed),
            "clip": sum(r.get("clip_ratio/region_mean", 0.0) for r in timed) / len(timed),
            "correct": _correct(model, tokenizer, eval_rows, setup["tokens"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny"], choices=sorted(SETUPS))
    parser.add_argument("--seconds", type=float, default=30.0, help="wall time per mode after the warm-up")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--eval-n", type=int, default=200, help="held-out problems for the accuracy")
    args = parser.parse_args()
    from course_lib.data import get_task
    from course_lib.evaluation import lift_interval
    from course_lib.models import load_policy

    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS')}; {args.seconds:g} s per mode after {args.warmup} warm-up steps")
    for key in args.models:
        setup = SETUPS[key]
        eval_rows = get_task(setup["task"], n=args.eval_n, seed=1234)
        base_model, tokenizer = load_policy(setup["model"])
        before = _correct(base_model, tokenizer, eval_rows, setup["tokens"])
        del base_model
        results = [run_mode(name, setup, mode, args.seconds, args.warmup, eval_rows) for name, mode in MODES.items()]
        sync = results[0]
        print(f"\n{key}: untrained accuracy {sum(before) / len(before):.3f} on {len(before)} held-out problems")
        print(f"{'mode':<19} {'steps':>5} {'steps/min':>9} {'x sync':>6} {'tok/s':>7} {'stale':>5} {'clip':>6} "
              f"{'acc':>6} {'lift [95%]':>22} {'vs sync [95%]':>22}")
        for r in results:
            lift = lift_interval(before, r["correct"])
            versus = lift_interval(sync["correct"], r["correct"])
            acc = sum(r["correct"]) / len(r["correct"])
            print(f"{r['name']:<19} {r['steps']:5d} {r['steps/min']:9.1f} {r['steps/min'] / sync['steps/min']:6.2f} "
                  f"{r['tok/s']:7.1f} {r['stale']:5.2f} {r['clip']:6.3f} {acc:6.3f} "
                  f"{lift[0]:+.3f} [{lift[1]:+.3f}, {lift[2]:+.3f}] {versus[0]:+.3f} [{versus[1]:+.3f}, {versus[2]:+.3f}]")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":  # the worker process imports this module again: it must not run then
    main()
