"""A plausible reward with a bug, kept to show a reward hack that takes (lesson 09 §11).

``closeness_reward`` was meant as partial credit by distance, like ``proximity_reward``:
``1 - |y - x| / max(|y|, 1)`` for a guess ``x`` and the reference ``y``, floored at -1 so that
a wild guess does not dominate a batch. It forgets the absolute value: ``1 - (y - x) / max(|y|, 1)``.
Below the answer the score is what was meant; *above* it the score grows without bound
(``x = 2y`` earns 2.0, ``x = 1000y`` earns 1000). A policy trained on it learns to write
large numbers: on the tiny model the mean reward goes from about 1 to about 1,000 in 200 steps
while held-out greedy accuracy falls to 0 (``course_lib/assets/rewards/reward_hack.json``).

The probe (``course_lib.rewards.probe``) flags it before training: its ``huge_number`` case
scores far above the correct reference. The fix is the absolute value (``proximity_reward``)
or, better, a verifier: ``correctness_first_number_reward``.
"""

from __future__ import annotations

from .extract import completion_text, extract_first_number, parse_number

__all__ = ["closeness_reward"]


def closeness_reward(prompts=None, completions=(), answer=(), **kwargs) -> list[float | None]:
    """FLAWED on purpose: ``max(-1, 1 - (y - x) / max(|y|, 1))`` (the missing ``abs``); -1 without a number."""
    scores: list[float | None] = []
    for completion, reference in zip(completions, answer):
        if reference is None:
            scores.append(None)
            continue
        x, y = parse_number(extract_first_number(completion_text(completion))), float(parse_number(reference))
        scores.append(-1.0 if x is None else max(-1.0, 1.0 - (y - float(x)) / max(abs(y), 1.0)))
    return scores
