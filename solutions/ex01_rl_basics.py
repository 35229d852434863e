"""Lesson 01 exercises: patience, a reward built on a verifier, and exploring a bandit."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def sample_until_success(probs: Sequence[float], correct_index: int, rng: np.random.Generator,
                         max_attempts: int = 10_000) -> int | None:
    """Sample answers until the correct one comes up; return how many samples it took.

    ``probs`` is the policy: ``probs[i]`` is the probability of answer ``i`` (length ``V``,
    sums to 1). Draw one answer per attempt, e.g. with
    ``rng.choice(len(probs), p=probs)``, and stop at the first draw equal to
    ``correct_index``. The count includes that successful draw, so a policy that always
    answers correctly needs exactly 1 attempt. If ``max_attempts`` draws all fail, stop
    drawing and return ``None`` (with probability 0 the answer never comes).

    Example: with ``probs = [0.75, 0.25]`` and ``correct_index = 1`` the result is a
    random number 1, 2, 3, ... whose average over many runs is ``1 / 0.25 = 4``.
    """
    # BEGIN SOLUTION
    # HINT: loop at most max_attempts times; return the attempt number (starting at 1) on success.
    for attempt in range(1, max_attempts + 1):
        if rng.choice(len(probs), p=probs) == correct_index:
            return attempt
    return None
    # END SOLUTION


def verifier_reward(answer: str, target: str, verifier: Callable[[str, str], bool]) -> float:
    """The reward of the "2 + 2" example, built on a verifier's verdict.

    Two reward functions, summed:

    - number detected: ``+1`` if ``answer`` (spaces around it ignored) is a number,
      ``-1`` otherwise. "A number" means ``float(answer)`` succeeds, as for ``"-10"`` or
      ``"12.31"``;
    - correctness: ``+3`` if ``verifier(answer, target)`` says the answer is right,
      ``-3`` otherwise. Do not re-check the answer yourself: the verifier decides.

    Example: with a verifier that compares numbers, target ``"4"``: ``"4"`` scores
    ``1 + 3 = 4``, ``"3"`` scores ``1 - 3 = -2`` and ``"cat"`` scores ``-1 - 3 = -4``.
    """
    # BEGIN SOLUTION
    # HINT: float("cat") raises ValueError; catch it to decide "not a number".
    try:
        float(answer.strip())
        number_score = 1.0
    except ValueError:
        number_score = -1.0
    correctness_score = 3.0 if verifier(answer, target) else -3.0
    return number_score + correctness_score
    # END SOLUTION


def epsilon_greedy_action(values: Sequence[float], epsilon: float, rng: np.random.Generator) -> int:
    """Pick an arm epsilon-greedily from the estimated ``values`` (length ``K``).

    With probability ``epsilon`` explore: an arm chosen uniformly among *all* ``K`` arms
    (the best one included). Otherwise exploit: the arm with the highest value
    (``np.argmax``: the first one if several tie). Use ``rng`` for every random choice,
    e.g. ``rng.random() < epsilon`` and ``rng.integers(K)``.

    Example: ``values = [0.1, 0.9, 0.3]``, ``epsilon = 0`` always returns ``1``; with
    ``epsilon = 0.3`` arm 1 comes up with probability ``0.7 + 0.3 / 3 = 0.8``.
    """
    # BEGIN SOLUTION
    if rng.random() < epsilon:
        return int(rng.integers(len(values)))
    return int(np.argmax(values))
    # END SOLUTION
