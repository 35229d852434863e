"""The reward hack of lesson 09: the tiny model trained on a flawed reward, then on the verifier.

:func:`run_reward_hack` trains the tiny model on the arithmetic task with GRPO, the measured
preset of ``course_lib.presets`` (32 completions a step, 8 per prompt, learning rate 3e-5,
200 steps), once with ``course_lib.rewards.flawed.closeness_reward`` (the missing ``abs``)
and once with the verifier ``correctness_first_number_reward``, evaluating greedy accuracy
on 50 held-out problems every 20 steps. ``benchmarks/reward_hack.py`` runs both and stores
:data:`STORED` (the histories, trimmed to the signals lesson 09 plots and the doctor reads,
and samples of the last policy's completions); lesson 09 plots the stored file in fast mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["KEPT_KEYS", "STORED", "load_reward_hack", "run_reward_hack"]

#: The run's record, shipped with the package.
STORED = Path(__file__).resolve().parent / "assets" / "rewards" / "reward_hack.json"

#: The history signals kept in the stored record (what lesson 09 plots and the doctor's rules read).
KEPT_KEYS = ("step", "reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
             "completions/clipped_ratio", "entropy", "grad_norm", "eval/greedy_accuracy", "eval/reward")

REWARDS = {"flawed": "course_lib.rewards.flawed:closeness_reward", "fixed": "correctness_first_number_reward"}


def run_reward_hack(which: str, output_dir: str | Path, *, max_steps: int = 200, eval_n: int = 50,
                    seed: int = 0) -> tuple[list[dict], Any]:
    """Train the tiny model on ``which`` reward (``"flawed"`` or ``"fixed"``); return ``(history, trainer)``."""
    from .algos import make_config
    from .data import get_task
    from .models import load_policy
    from .presets import run_settings
    from .rewards import get_reward_functions
    from .trainer import Trainer

    if which not in REWARDS:
        raise ValueError(f"which={which!r}: choose 'flawed' or 'fixed'.")
    settings = dict(run_settings("tiny", "arithmetic", "grpo"), model_name_or_path="tiny",
                    output_dir=str(output_dir), seed=seed, save_steps=0, logging_steps=1, overwrite_output_dir=True,
                    max_steps=max_steps, eval_strategy="steps", eval_steps=20, num_generations_eval=2)
    config = make_config("grpo", **settings)
    model, tokenizer = load_policy("tiny")
    trainer = Trainer(config, get_reward_functions([REWARDS[which]]),
                      get_task("arithmetic", split="train", n=4000, seed=seed), model, tokenizer, progress=False,
                      eval_dataset=get_task("arithmetic", split="test", n=eval_n, seed=1))
    return trainer.train(), trainer


def trimmed(rows: list[dict]) -> list[dict]:
    """The history rows with :data:`KEPT_KEYS` only (rows without a step, such as a run summary, dropped)."""
    return [{k: r[k] for k in KEPT_KEYS if k in r} for r in rows if "step" in r and "reward" in r]


def load_reward_hack(path: str | Path = STORED) -> dict:
    """The stored record: ``{"flawed": {"history", "samples", ...}, "fixed": {...}, "settings": ...}``."""
    return json.loads(Path(path).read_text())
