"""Masked reductions: hand-worked values, empty masks, and agreement with plain torch."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.ops.masking import masked_mean, masked_normalize, masked_sum, masked_var, masked_whiten

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1, 1, 0], [1, 0, 0]])


def test_masked_sum_and_mean_by_hand():
    assert masked_sum(X, M).item() == 1 + 2 + 4
    assert masked_mean(X, M).item() == pytest.approx(7 / 3)
    torch.testing.assert_close(masked_sum(X, M, dim=1), torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(masked_mean(X, M, dim=1), torch.tensor([1.5, 4.0]))
    torch.testing.assert_close(masked_mean(X, M, dim=0), torch.tensor([2.5, 2.0, 0.0]))


def test_masked_var_by_hand():
    # valid values 1, 2, 4: mean 7/3, squared deviations 16/9, 1/9, 25/9 -> sum 42/9
    assert masked_var(X, M, unbiased=True).item() == pytest.approx(42 / 9 / 2)
    assert masked_var(X, M, unbiased=False).item() == pytest.approx(42 / 9 / 3)
    # per row: row 0 has values 1, 2 (unbiased var 0.5); row 1 a single value (var 0)
    torch.testing.assert_close(masked_var(X, M, dim=1), torch.tensor([0.5, 0.0]))


def test_masked_whiten_by_hand():
    out = masked_whiten(X, M)
    valid = torch.tensor([1.0, 2.0, 4.0])
    expected = (valid - valid.mean()) / valid.var(unbiased=True).sqrt()
    torch.testing.assert_close(out[M.bool()], expected, rtol=1e-5, atol=1e-6)
    assert (out[~M.bool()] == 0).all()
    kept = masked_whiten(X, M, shift_mean=False)
    torch.testing.assert_close(kept[M.bool()], expected + valid.mean(), rtol=1e-5, atol=1e-6)


def test_masked_normalize_divides_by_the_constant():
    assert masked_normalize(X, M, constant=10).item() == pytest.approx(0.7)
    with pytest.raises(ValueError, match="constant"):
        masked_normalize(X, M, constant=0)


def test_empty_mask_gives_documented_finite_values():
    empty = torch.zeros_like(M)
    assert masked_sum(X, empty).item() == 0.0
    assert masked_mean(X, empty).item() == 0.0
    assert masked_var(X, empty).item() == 0.0
    assert masked_var(X, torch.tensor([[1, 0, 0], [0, 0, 0]])).item() == 0.0  # one value, unbiased
    assert (masked_whiten(X, empty) == 0).all()
    torch.testing.assert_close(masked_mean(X, empty, dim=1), torch.zeros(2))


def test_garbage_under_the_mask_does_not_leak():
    garbage = X.clone()
    garbage[0, 2] = float("inf")
    garbage[1, 1] = float("nan")
    assert masked_sum(garbage, M).item() == 7.0
    assert masked_mean(garbage, M).item() == pytest.approx(7 / 3)
    assert math.isfinite(masked_var(garbage, M).item())


def test_gradient_flows_only_to_valid_positions():
    x = X.clone().requires_grad_(True)
    masked_mean(x, M).backward()
    torch.testing.assert_close(x.grad, M.float() / 3)


def test_mask_shape_error_names_the_problem():
    with pytest.raises(ValueError, match="mask has shape"):
        masked_mean(X, torch.ones(3, 2))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(1, 6),
    seed=st.integers(0, 10_000),
)
def test_matches_selecting_the_valid_entries(rows, cols, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    mask = torch.rand(rows, cols, generator=gen) < 0.6
    valid = x[mask]
    assert masked_sum(x, mask).item() == pytest.approx(valid.sum().item(), abs=1e-12)
    if valid.numel() > 0:
        assert masked_mean(x, mask).item() == pytest.approx(valid.mean().item(), abs=1e-12)
    if valid.numel() > 1:
        assert masked_var(x, mask).item() == pytest.approx(valid.var().item(), abs=1e-10)
        assert masked_var(x, mask, unbiased=False).item() == pytest.approx(
            valid.var(unbiased=False).item(), abs=1e-10
        )
