"""Confidence intervals for held-out accuracy, against hand-worked values."""

import math

import pytest

from course_lib.evaluation import format_accuracy, lift_interval, wilson_interval


@pytest.mark.parametrize("k, n, low, high", [
    # Wilson 95% bounds worked by hand from the closed form (z = 1.959964)
    (5, 10, 0.236593, 0.763407),
    (0, 10, 0.0, 0.277533),
    (10, 10, 0.722467, 1.0),
    (107, 200, 0.465866, 0.602814),
])
def test_wilson_interval_matches_hand_worked_bounds(k, n, low, high):
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=1e-5)


def test_wilson_interval_is_symmetric_and_narrows_with_n():
    low, high = wilson_interval(3, 10)
    mirrored = wilson_interval(7, 10)
    assert (1 - high, 1 - low) == pytest.approx(mirrored)
    assert (wilson_interval(30, 100)[1] - wilson_interval(30, 100)[0]) < (high - low)


def test_lift_interval_is_the_paired_mean_difference():
    before = [True, False, False, True]
    after = [True, True, True, False]
    lift, low, high = lift_interval(before, after)
    # differences 0, 1, 1, -1: mean 0.25, sample sd sqrt(11/12), half-width 1.959964 * sd / 2
    half = 1.959964 * math.sqrt(11 / 12) / 2
    assert (lift, low, high) == pytest.approx((0.25, 0.25 - half, 0.25 + half), abs=1e-6)


def test_lift_of_identical_results_has_zero_width():
    assert lift_interval([True, False] * 5, [True, False] * 5) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("call", [lambda: wilson_interval(1, 0), lambda: wilson_interval(5, 4),
                                  lambda: lift_interval([True], [True]), lambda: lift_interval([True], [True, False])])
def test_bad_counts_are_refused(call):
    with pytest.raises(ValueError):
        call()


def test_format_accuracy():
    assert format_accuracy(107, 200) == "53.5% [46.6, 60.3] (107/200)"
