"""The failure museum: tiny runs made to fail one way each, and the healthy runs beside them.

Each :class:`Exhibit` is the tiny model on the arithmetic task (``course_lib.presets``'s
measured GRPO settings) with one thing broken; the doctor must name that failure
(``expect``). The ``healthy_*`` exhibits are the measured presets as they are (GRPO, RLOO):
no rule above "info" may fire on them. PPO has no measured preset: ``ppo_grpo_settings`` runs
it on GRPO's settings, where nothing above "info" may fire either. ``tests/lib/test_doctor_museum.py`` replays them and
lesson 13 shows their curves. Every run takes seconds on one CPU thread.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .doctor.core import Finding


def constant_reward(prompts, completions, **columns) -> list[float]:
    """Gives every completion 1.0: a reward that cannot tell answers apart."""
    return [1.0] * len(completions)


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)


def length_reward(prompts, completions, **columns) -> list[float]:
    """Pays for characters: 0.1 per character of the completion (hackable by writing more)."""
    return [0.1 * len(_text(c)) for c in completions]


def absolute_error_reward(prompts, completions, answer, **columns) -> list[float]:
    """Minus the distance to the answer, in raw units (0 to about -100 here; -100 with no number)."""
    from .rewards.extract import extract_first_number, parse_number

    scores = []
    for completion, reference in zip(completions, answer):
        guess = parse_number(extract_first_number(_text(completion)))
        scores.append(-100.0 if guess is None else -abs(float(guess) - float(reference)))
    return scores


def half_reward(prompts, completions, **columns) -> list[float]:
    """Gives every completion 0.5: a constant that is no success rate (second museum)."""
    return [0.5] * len(completions)


def wrong_sign_correctness(prompts, completions, answer, **columns) -> list[float]:
    """The 0/1 correctness of the first number, negated: the policy is paid for wrong answers."""
    from .rewards import get_reward_functions

    correct = get_reward_functions(["correctness_first_number_reward"])[0]
    return [-float(x) for x in correct(prompts, completions, answer=answer, **columns)]


def nan_reward(prompts, completions, **columns) -> list[float]:
    """A parser that fails on everything and returns NaN (float('nan') instead of None or 0)."""
    return [float("nan")] * len(completions)


@dataclass(frozen=True)
class Exhibit:
    """One museum run: what is broken (``overrides``, extra rewards, a hook on the trainer)."""

    name: str
    expect: tuple[str, ...]            # rules that must fire; () for a healthy run
    story: str                         # what was done to the run, in a sentence
    algo: str = "grpo"
    overrides: dict[str, Any] = field(default_factory=dict)
    rewards: tuple[str | Callable, ...] = ("correctness_first_number_reward",)
    prepare: Callable | None = None    # f(trainer) after construction: break the engine, etc.


def _stale_sampler(trainer) -> None:
    """The sampler gets a copy of the starting weights and never the updates (a broken push)."""
    from .rollout.hf import HFEngine

    engine = HFEngine(copy.deepcopy(trainer.model), trainer.tokenizer, record_logps=True)
    engine.sync_weights = lambda model: None
    trainer.engine = engine


EXHIBITS: dict[str, Exhibit] = {e.name: e for e in [
    Exhibit("healthy_grpo", (), "GRPO with the tiny model's measured preset."),
    Exhibit("healthy_rloo", (), "RLOO with the tiny model's measured preset.", algo="rloo"),
    # PPO has no measured preset; on GRPO's settings its reward drifts at 0.1-0.3 and, late in
    # the run, more than half of the groups are alike, which does not zero a critic's advantages
    # (zero_spread_groups reads GRPO's and RLOO's group baselines only).
    Exhibit("ppo_grpo_settings", (), "PPO on the GRPO preset's batch and learning rate (no measured PPO preset).",
            algo="ppo", overrides={"max_steps": 100}),
    Exhibit("short_budget", ("completions_truncated",), "max_completion_length=2: answers need 3-4 tokens.",
            overrides={"max_completion_length": 2, "max_steps": 20}),
    Exhibit("constant_reward", ("no_learning_signal", "zero_spread_groups", "dead_reward_function"),
            "the only reward returns 1.0 for everything.", rewards=(constant_reward,), overrides={"max_steps": 10}),
    Exhibit("dead_second_reward", ("dead_reward_function", "loss_near_zero_is_normal"),
            "a second reward that returns a constant (and GRPO's loss near 0, which is normal).",
            rewards=("correctness_first_number_reward", constant_reward), overrides={"max_steps": 10}),
    Exhibit("near_greedy", ("zero_spread_groups", "entropy_collapse"),
            "temperature=0.05: the completions of a group are all alike.",
            overrides={"temperature": 0.05, "max_steps": 30}),
    Exhibit("raw_units_reward", ("dominant_reward_function",),
            "beside the 0/1 correctness, a reward of minus the distance to the answer in raw units.",
            rewards=("correctness_first_number_reward", absolute_error_reward), overrides={"max_steps": 10}),
    Exhibit("length_paid", ("reward_hacking",),
            "a reward that pays 0.1 per character beside the 0/1 correctness.",
            rewards=("correctness_first_number_reward", length_reward),
            overrides={"max_completion_length": 16, "learning_rate": 3e-4, "max_steps": 60}),
    Exhibit("learning_rate_100x", ("policy_moves_too_fast",), "learning_rate=3e-3 (100x) and num_iterations=4.",
            overrides={"learning_rate": 3e-3, "num_iterations": 4, "max_steps": 30}),
    # On-policy the clip never binds and no per-step KL is logged: only the KL to the reference
    # shows the run leaving (0 -> 2.3-5.2 nats per token from step 2, measured).
    Exhibit("kl_runaway", ("policy_moves_too_fast",),
            "learning_rate=3e-3 (100x) on-policy with beta=0.04: the KL to the reference runs away.",
            overrides={"learning_rate": 3e-3, "beta": 0.04, "max_steps": 10}),
    Exhibit("learning_rate_300x", ("entropy_explosion",), "learning_rate=1e-2 (300x): the model turns to noise.",
            overrides={"learning_rate": 1e-2, "max_steps": 30}),
    Exhibit("frozen", ("nothing_moves",), "learning_rate=1e-9: the policy cannot move.",
            overrides={"learning_rate": 1e-9, "max_steps": 40}),
    Exhibit("stale_sampler", ("sampler_mismatch",), "the sampler never receives the updated weights.",
            overrides={"vllm_importance_sampling_correction": True, "learning_rate": 3e-4, "max_steps": 30},
            prepare=_stale_sampler),
    Exhibit("long_rollouts", ("generation_dominates",),
            "min_new_tokens=80 (generation_kwargs): every completion runs 80 tokens, sampled one at a time.",
            overrides={"generation_kwargs": {"min_new_tokens": 80}, "max_completion_length": 90, "max_steps": 6}),
    Exhibit("nan_reward", ("non_finite_values",), "the reward returns NaN for every completion.",
            rewards=(nan_reward,), overrides={"max_steps": 5}),
]}


def run_exhibit(name: str, output_dir: str | Path, seed: int = 0, **fix: Any) -> tuple[list[dict], Any]:
    """Train exhibit ``name`` into ``output_dir``; return ``(history rows, config)``.

    ``fix``: config values applied last, e.g. the doctor's fix (``max_completion_length=8``)."""
    from .algos import make_config
    from .data import get_task
    from .models import load_policy
    from .presets import run_settings
    from .rewards import get_reward_functions
    from .trainer import Trainer

    exhibit = EXHIBITS[name]
    preset_algo = exhibit.algo if exhibit.algo in ("grpo", "rloo") else "grpo"
    settings = dict(run_settings("tiny", "arithmetic", preset_algo), model_name_or_path="tiny",
                    output_dir=str(output_dir), seed=seed, save_steps=0, logging_steps=1,
                    overwrite_output_dir=True)
    settings.update(exhibit.overrides)
    settings.update(fix)
    config = make_config(exhibit.algo, **settings)
    rewards = [get_reward_functions([r])[0] if isinstance(r, str) else r for r in exhibit.rewards]
    model, tokenizer = load_policy("tiny")
    trainer = Trainer(config, rewards, get_task("arithmetic", split="train", n=4000, seed=seed), model, tokenizer,
                      progress=False)
    if exhibit.prepare is not None:
        exhibit.prepare(trainer)
    return trainer.train(), config


def confusion(results: dict[str, list[Finding]], rules: list[str]) -> str:
    """A rules x runs table: the severity's first letter where a rule fired on a run, '.' elsewhere."""
    names = list(results)
    width = max(len(r) for r in rules)
    lines = [" " * width + " " + " ".join(f"{i:>2d}" for i in range(len(names)))]
    for rule_name in rules:
        cells = []
        for run in names:
            hit = [f for f in results[run] if f.rule == rule_name]
            cells.append(f"{hit[0].severity[0].upper():>2s}" if hit else " .")
        lines.append(f"{rule_name:<{width}} " + " ".join(cells))
    lines += [f"{i:>2d} = {n}" for i, n in enumerate(names)]
    return "\n".join(lines)
