"""Checks for lesson 01 (RL basics): sampling until success, a verifier-based reward, epsilon-greedy.

Expected values come from hand-worked cases, closed forms (a geometric distribution has
mean ``1 / p``; epsilon-greedy picks the best arm with probability ``1 - eps + eps / K``)
and the course's own ``course_lib.toy`` rewards. Random functions are checked on fixed
seeds with tolerances of about five standard errors, so a correct answer passes on every
run and the typical mistakes land far outside.
"""

from __future__ import annotations

import math

import numpy as np

from ..feedback import Hint
from ..toy.answer_policy import CANDIDATE_ANSWERS, correctness_reward, is_number_reward, verify_answer


class _CountingGenerator:
    """Wraps a numpy Generator and stops a learner's loop that never ends."""

    def __init__(self, seed: int, limit: int) -> None:
        self._rng = np.random.default_rng(seed)
        self.calls = 0
        self._limit = limit

    def __getattr__(self, name):
        method = getattr(self._rng, name)
        if not callable(method):
            return method

        def counted(*args, **kwargs):
            self.calls += 1
            if self.calls > self._limit:
                raise Hint(f"more than {self._limit} random draws for max_attempts={self._limit}: "
                           "stop after max_attempts failures and return None.")
            return method(*args, **kwargs)

        return counted


def check_sample_until_success(fn) -> None:
    sure = fn([0.0, 1.0, 0.0], 1, np.random.default_rng(0))
    if sure == 0:
        raise Hint("a policy that always answers correctly returned 0 attempts: count the successful "
                   "draw too (the first attempt is number 1).")
    if sure != 1:
        raise Hint(f"with probs=[0, 1, 0] and correct_index=1 the first draw succeeds: expected 1, got {sure!r}. "
                   "Do you sample from the policy, rng.choice(len(probs), p=probs)?")

    never = fn([0.5, 0.5, 0.0], 2, _CountingGenerator(seed=1, limit=50), max_attempts=50)
    if never is not None:
        raise Hint(f"the correct answer has probability 0, so after max_attempts=50 failures return None; "
                   f"got {never!r}.")

    probs, p = np.array([0.45, 0.25, 0.30]), 0.25
    counts = [fn(probs, 1, np.random.default_rng(seed)) for seed in range(2000)]
    if any(c is None for c in counts):
        raise Hint("returned None although the answer has probability 0.25 and max_attempts was not reached.")
    counts = np.asarray(counts, dtype=float)
    if counts.min() < 1:
        raise Hint(f"got an attempt count of {counts.min():g}: the first attempt is number 1.")
    # Geometric distribution: mean 1 / p = 4, standard deviation sqrt(1 - p) / p = 3.46.
    expected, stderr = 1 / p, math.sqrt(1 - p) / p / math.sqrt(counts.size)
    if abs(counts.mean() - expected) > 5 * stderr:
        if abs(counts.mean() - (expected - 1)) <= 5 * stderr:
            raise Hint(f"the average count is {counts.mean():.2f}, one less than 1/p = {expected:g}: "
                       "you do not count the successful draw.")
        if abs(counts.mean() - (expected + 1)) <= 5 * stderr:
            raise Hint(f"the average count is {counts.mean():.2f}, one more than 1/p = {expected:g}: "
                       "start counting at 1, not 2 (or do not draw again after the success).")
        raise Hint(f"over 2000 runs with P(correct) = {p} the average count should be close to 1/p = "
                   f"{expected:g}, got {counts.mean():.2f}. Do you sample with p=probs?")
    # P(N = 1) = p: the first draw succeeds a quarter of the time.
    first = np.mean(counts == 1)
    if abs(first - p) > 5 * math.sqrt(p * (1 - p) / counts.size):
        raise Hint(f"the first draw should succeed with probability {p}, it did in {first:.1%} of runs.")


def _number_score(answer: str) -> float:
    try:
        float(answer.strip())
    except ValueError:
        return -1.0
    return 1.0


def check_verifier_reward(fn) -> None:
    # The verifier's argument order: (answer, target). A symmetric verifier would hide a swap,
    # so record what the learner passes.
    calls = []

    def recording_verifier(answer, target):
        calls.append((answer, target))
        return verify_answer(answer, target)

    fn("3", "4", recording_verifier)
    if not calls:
        raise Hint("the verifier passed in was never called: correctness is its verdict, verifier(answer, target).")
    if calls[0] == ("4", "3"):
        raise Hint("you called verifier(target, answer); the verifier takes verifier(answer, target) "
                   "(a real verifier such as math_verify's is not symmetric).")
    # Hand-worked cases of the lesson's rubric (target "4").
    for answer, expected in (("4", 4.0), ("3", -2.0), ("cat", -4.0)):
        got = fn(answer, "4", verify_answer)
        if got == expected:
            continue
        if answer == "cat" and got == -3.0:
            raise Hint("'cat' scored -3: the number reward is missing (-1 when no number is detected).")
        if answer == "4" and got == 3.0:
            raise Hint("'4' scored 3: add the number reward (+1, a number was detected).")
        if answer == "4" and got in (1.0, True):
            raise Hint("'4' scored 1: that is the binary verifier signal; the reward is +1 (number) + 3 (correct).")
        if answer == "cat" and got == -2.0:
            raise Hint("'cat' scored -2: a non-number gets -1, not +1.")
        raise Hint(f"verifier_reward({answer!r}, '4') should be {expected:g}, got {got!r}.")

    # The verifier decides correctness: a verifier that accepts everything makes "cat" right.
    lenient = fn("cat", "4", lambda answer, target: True)
    if lenient != 2.0:
        raise Hint(f"with a verifier that accepts every answer, 'cat' should score -1 + 3 = 2, got {lenient!r}: "
                   "use the verifier's verdict instead of checking the answer yourself.")
    strict = fn("4", "4", lambda answer, target: False)
    if strict != -2.0:
        raise Hint(f"with a verifier that rejects every answer, '4' should score 1 - 3 = -2, got {strict!r}: "
                   "use the verifier's verdict instead of checking the answer yourself.")

    # Every candidate answer of the toy policy, plus spacing and spelling variants, against
    # the course's own reward functions.
    for answer in (*CANDIDATE_ANSWERS, " 4 ", "4.0", "-0.5", "four", "", "2+2"):
        expected = is_number_reward(answer) + correctness_reward(answer, "4")
        got = fn(answer, "4", verify_answer)
        if got != expected:
            if answer == " 4 " and got == 0.0:
                raise Hint("' 4 ' scored 0: strip the spaces before deciding whether it is a number.")
            raise Hint(f"verifier_reward({answer!r}, '4') should be {expected:g} "
                       f"(number {_number_score(answer):+g}, correctness {correctness_reward(answer, '4'):+g}), "
                       f"got {got!r}.")


def _picks_with_global_state(fn, global_seed: int) -> list[int]:
    """Arms picked with a fixed rng while the global random states are seeded with ``global_seed``."""
    import random

    import torch

    saved = np.random.get_state(), random.getstate(), torch.get_rng_state()
    try:
        np.random.seed(global_seed)
        random.seed(global_seed)
        torch.manual_seed(global_seed)
        rng = np.random.default_rng(123)
        return [int(fn([0.1, 0.9, 0.3, 0.5], 0.5, rng)) for _ in range(200)]
    finally:
        np.random.set_state(saved[0])
        random.setstate(saved[1])
        torch.set_rng_state(saved[2])


def check_epsilon_greedy_action(fn) -> None:
    rng = np.random.default_rng(0)
    for values, best in (([0.1, 0.9, 0.3], 1), ([2.0, -1.0], 0), ([0.0, 0.0, 0.5, 0.1, 0.4], 2)):
        picks = {int(fn(values, 0.0, rng)) for _ in range(50)}
        if picks != {best}:
            raise Hint(f"with epsilon=0 always exploit: values={values} should always give arm {best}, "
                       f"got arms {sorted(picks)}.")
    tied = {int(fn([1.0, 3.0, 3.0], 0.0, rng)) for _ in range(50)}
    if not tied <= {1, 2}:
        raise Hint(f"with values=[1, 3, 3] and epsilon=0 the best arm is 1 or 2, got {sorted(tied)}.")

    # Every random draw must come from the rng passed in: the same rng seed then gives the same
    # arms whatever the global random state (np.random, random, torch) holds.
    if _picks_with_global_state(fn, 0) != _picks_with_global_state(fn, 1):
        raise Hint("with the same rng the arms changed when only the global random state changed: draw from "
                   "the rng passed in (rng.random(), rng.integers(K)), not np.random.*, random.* or torch's "
                   "global generator. That is what makes a run reproducible from its seed.")

    draws = 8000
    uniform = np.bincount([int(fn([0.0, 5.0, 1.0, 2.0], 1.0, rng)) for _ in range(draws)], minlength=4) / draws
    if uniform.size != 4:
        raise Hint(f"returned an arm outside 0..3 for 4 arms: {uniform.size - 1}.")
    tolerance = 5 * math.sqrt(0.25 * 0.75 / draws)
    if uniform[1] < 0.25 - tolerance:
        raise Hint(f"with epsilon=1 every arm, the best one too, should come up 25% of the time; the best arm "
                   f"came up {uniform[1]:.1%}. Exploring picks among ALL arms.")
    if np.abs(uniform - 0.25).max() > tolerance:
        raise Hint(f"with epsilon=1 choose uniformly among the 4 arms; frequencies were {np.round(uniform, 3)}.")

    epsilon, k = 0.2, 5
    values = [0.3, 0.1, 0.8, 0.5, 0.2]
    picks = np.array([int(fn(values, epsilon, rng)) for _ in range(draws)])
    best_rate = np.mean(picks == 2)
    expected = 1 - epsilon + epsilon / k  # 0.84
    tolerance = 5 * math.sqrt(expected * (1 - expected) / draws)
    if abs(best_rate - expected) > tolerance:
        if abs(best_rate - (1 - epsilon)) <= tolerance:
            raise Hint(f"the best arm came up {best_rate:.1%} of the time, expected {expected:.0%}: exploring "
                       "picks uniformly among ALL arms, the best one included.")
        if abs(best_rate - (epsilon + (1 - epsilon) / k)) <= tolerance:
            raise Hint(f"the best arm came up {best_rate:.1%} of the time: explore and exploit are swapped "
                       "(explore with probability epsilon, exploit otherwise).")
        raise Hint(f"with epsilon={epsilon} and {k} arms the best arm should come up 1 - eps + eps/K = "
                   f"{expected:.0%} of the time, got {best_rate:.1%}.")
