"""The guessing-game benchmark's pieces: the demonstrator's success rate, worked out by hand and
played through the real rollout loop, and its game scored from the environment's state."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import guess_rl_vs_sft as bench  # noqa: E402

from course_lib.models import load_policy  # noqa: E402
from course_lib.rollout.warmup import ScriptedPolicy  # noqa: E402
from course_lib.tool_evaluation import evaluate_tool_accuracy  # noqa: E402


def test_demonstrator_success_by_hand():
    assert bench.random_consistent_success(1, 1) == 1.0
    assert bench.random_consistent_success(2, 1) == 0.5
    # 1..3, 2 guesses: the middle first (1/3) always wins; an end first (2/3) wins at once 1/3 of the
    # time, else one of two is left for one guess: 1/3 + 2/3 * 1/2 = 2/3. Total 1/3 + 2/3 * 2/3 = 7/9.
    assert bench.random_consistent_success(3, 2) == pytest.approx(7 / 9)
    assert bench.random_consistent_success(7, 3) == pytest.approx(0.678, abs=5e-4)


def test_demonstrator_plays_the_game_through_the_loop_at_its_expected_rate():
    model, tokenizer = load_policy("tiny")
    n, budget = 7, 3
    rows = bench.problems(n, budget, bench.TRAIN_PHRASINGS, list(range(1, n + 1)) * 15)  # 420 games
    result = evaluate_tool_accuracy(model, tokenizer, rows, environment_factory=bench.make_game(budget),
                                    score="environment", max_tool_calling_iterations=budget,
                                    max_completion_length=600, batch_size=len(rows), progress=False,
                                    engine=ScriptedPolicy(tokenizer, bench.scripted_player(n, budget, seed=3)))
    assert result.failure_frequency == 0.0 and max(result.calls) <= budget
    expected = bench.random_consistent_success(n, budget)
    sd = math.sqrt(expected * (1 - expected) / len(rows))
    assert abs(result.accuracy - expected) < 4 * sd, (result.accuracy, expected)
