"""Tests for course_lib.toy.length_bias: the stop-when policy that isolates GRPO's length bias.

Expected values are worked out by hand in the comments (geometric sums, the gradient of
log-sigmoid, group advantages of a two-completion group).
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.toy.length_bias import (
    CORRECT,
    WRONG,
    expected_length,
    length_logit_gradient,
    sample_batch,
    token_logps,
    train_length_policy,
)


def test_expected_length_closed_forms():
    assert expected_length(1.0, 128) == pytest.approx(2.0)  # answer + EOS, always
    assert expected_length(0.3, 2) == pytest.approx(2.0)  # no room for a filler: truncated or EOS, 2 tokens
    # Without truncation E[n + 2] = (1 - p) / p + 2 = 1 / p + 1.
    assert expected_length(1 / 16, 10_000) == pytest.approx(17.0, rel=1e-9)
    # M = 3, p = 1/2: L = 2 w.p. 1/2, else 3 (n = 1 with EOS, or truncated): 2.5.
    assert expected_length(0.5, 3) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        expected_length(0.0, 16)


def test_token_logps_by_hand():
    theta = torch.zeros(2, dtype=torch.float64)  # p = 1/2 for both answers
    batch = {"answers": torch.tensor([WRONG, CORRECT]), "lengths": torch.tensor([4, 4]),
             "truncated": torch.tensor([False, True])}
    logps, mask = token_logps(theta, batch, 6)
    half = math.log(0.5)
    # Row 0: answer, 2 fillers, EOS, padding. Row 1: truncated: answer and 3 fillers, no EOS.
    assert mask.tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0]]
    assert logps.flatten().tolist() == pytest.approx(([half] * 4 + [0, 0]) * 2)
    theta = torch.tensor([math.log(1 / 3), 0.0], dtype=torch.float64)  # p_wrong = 1/4
    logps, _ = token_logps(theta, batch, 6)
    assert logps[0].tolist() == pytest.approx([half, math.log(0.75), math.log(0.75), math.log(0.25), 0, 0])


def test_sample_batch_is_geometric():
    theta = torch.tensor([math.log(1 / 7), math.log(1 / 3)], dtype=torch.float64)  # p = 1/8 and 1/4
    batch = sample_batch(theta, 500, 8, 10_000, torch.Generator().manual_seed(0))
    for answer, p in ((WRONG, 1 / 8), (CORRECT, 1 / 4)):
        fillers = batch["fillers"][batch["answers"] == answer].double()
        assert fillers.mean().item() == pytest.approx((1 - p) / p, rel=0.06)  # mean of Geometric(p) failures
    assert torch.equal(batch["lengths"], batch["fillers"] + 2)
    assert torch.equal(batch["rewards"], batch["answers"].float())


@pytest.mark.parametrize("loss_type, expected", [
    # One group: correct with n = 0 (L = 2), wrong with n = 2 (L = 4); theta = 0 so p = 1/2.
    # Sum over a completion's tokens of d log pi / d theta_a = 1 - (n + 1) p: +1/2 and -1/2.
    # A = +-0.5 / (std + 1e-4), std of [1, 0] (Bessel) = sqrt(1/2).
    ("grpo", lambda a: [-(1 / 2) * (-a) * (-0.5) / 4, -(1 / 2) * a * 0.5 / 2]),  # -(1/B) A (sum) / L
    ("dr_grpo", lambda a: [-(-a) * (-0.5) / (2 * 8), -a * 0.5 / (2 * 8)]),  # -(A (sum)) / (B M), M = 8
    ("dapo", lambda a: [-(-a) * (-0.5) / 6, -a * 0.5 / 6]),  # -(A (sum)) / (6 tokens)
])
def test_length_logit_gradient_by_hand(loss_type, expected):
    batch = {"answers": torch.tensor([CORRECT, WRONG]), "fillers": torch.tensor([0, 2]),
             "truncated": torch.tensor([False, False]), "lengths": torch.tensor([2, 4]),
             "rewards": torch.tensor([1.0, 0.0])}
    advantage = 0.5 / (math.sqrt(0.5) + 1e-4)
    grad = length_logit_gradient(torch.zeros(2, dtype=torch.float64), batch, loss_type, 8, 2)
    assert grad.tolist() == pytest.approx(expected(advantage), rel=1e-6)


def test_only_grpo_pulls_on_the_length_in_expectation():
    """E[1 - (n + 1) p] = 0 for n ~ Geometric(p): equal token weights give no expected pull."""
    theta = torch.full((2,), math.log(1 / 15), dtype=torch.float64)  # p = 1/16
    generator = torch.Generator().manual_seed(0)
    means = {}
    for loss_type in ("grpo", "dr_grpo"):
        grads = torch.stack([length_logit_gradient(theta, sample_batch(theta, 8, 8, 128, generator), loss_type, 128, 8)
                             for _ in range(300)])
        means[loss_type] = (grads.mean(0), grads.std(0) / math.sqrt(len(grads)))
    mean, stderr = means["grpo"]
    assert mean[WRONG] > 10 * stderr[WRONG]  # positive: SGD lowers the wrong answers' EOS logit
    assert mean[CORRECT] < -10 * stderr[CORRECT]
    mean, stderr = means["dr_grpo"]
    assert (mean.abs() < 4 * stderr).all()


def test_grpo_lengthens_wrong_answers_and_dr_grpo_does_not():
    grpo = train_length_policy("grpo", steps=60, learning_rate=0.5, seed=1)
    dr = train_length_policy("dr_grpo", steps=60, learning_rate=0.5 * 128 / 17, seed=1)
    start = expected_length(1 / 16, 128)
    assert grpo.wrong_length[0] == pytest.approx(start)
    assert grpo.wrong_length[-1] > 1.5 * start and grpo.correct_length[-1] < 0.6 * start
    assert abs(dr.wrong_length[-1] - start) < 0.2 * start and abs(dr.correct_length[-1] - start) < 0.2 * start
    assert len(grpo.wrong_length) == 61
