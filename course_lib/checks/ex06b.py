"""Checks for lesson 06b (the TRL 1.16 family): CISPO's per-token loss, the high-entropy token mask.

Expected values are hand-worked numbers, `course_lib.algos.grpo.policy_loss` on the same
inputs, and TRL 1.16's rule for the entropy mask recomputed with numpy; typical mistakes
are reproduced to name them in the hint.
"""

import math

import numpy as np
import torch

from ..algos.grpo import policy_loss
from ..feedback import Hint, assert_close

F64 = torch.float64


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


# ---------------------------------------------------------------------------- cispo_per_token_loss
def _cispo_value_and_grad(fn, logps, old, advantages, epsilon_max):
    leaf = logps.clone().requires_grad_(True)
    loss = fn(leaf, old, advantages, epsilon_max)
    if not isinstance(loss, torch.Tensor) or loss.shape != logps.shape:
        raise Hint(f"return the (B, T) per-token losses, got {getattr(loss, 'shape', type(loss))}.")
    if not loss.requires_grad:
        raise Hint("the loss carries no gradient: only the clipped weight is detached, logps must stay in the graph.")
    (grad,) = torch.autograd.grad(loss.sum(), leaf)
    return loss.detach(), grad


def check_cispo_per_token_loss(fn) -> None:
    # Valid probabilities: 0.05 -> 0.4 (r = 8, capped at 5) and 0.5 -> 0.25 (r = 0.5, no lower bound).
    logps, old, advantages = _t([[math.log(0.4), math.log(0.25)]]), _t([[math.log(0.05), math.log(0.5)]]), _t([1.0])
    loss, grad = _cispo_value_and_grad(fn, logps, old, advantages, 5.0)
    with_floor = lambda floor: [[-5 * math.log(0.4), -floor * math.log(0.25)]]  # noqa: E731
    assert_close(loss, [[-5 * math.log(0.4), -0.5 * math.log(0.25)]], name="the docstring's example (r = 8 and 0.5)",
                 hints={"clipped the ratio from below as well (at 1): CISPO only caps it at epsilon_max.":
                        with_floor(1.0),
                        "clipped the ratio from below (at 1 - epsilon = 0.8, as PPO's clip): CISPO has no lower bound, "
                        "only the cap min(r, epsilon_max).": with_floor(0.8),
                        "did not clip the weight: min(r, epsilon_max).": [[-8 * math.log(0.4), -0.5 * math.log(0.25)]],
                        "returned PPO's -r * A instead of -sg(w) * A * logps.": [[-5.0, -0.5]]})

    generator = torch.Generator().manual_seed(13)
    logps = -torch.rand(6, 9, generator=generator, dtype=F64) * 3
    old = logps + torch.randn(6, 9, generator=generator, dtype=F64) * 1.2
    advantages = torch.randn(6, generator=generator, dtype=F64)
    for epsilon_max in (5.0, 1.5):
        leaf = logps.clone().requires_grad_(True)
        expected = policy_loss(leaf, old, advantages, torch.ones_like(logps), loss_type="cispo",
                               epsilon_high=epsilon_max).per_token_loss
        (expected_grad,) = torch.autograd.grad(expected.sum(), leaf)
        loss, grad = _cispo_value_and_grad(fn, logps, old, advantages, epsilon_max)
        assert_close(loss, expected.detach(), name=f"per-token losses (epsilon_max={epsilon_max})")
        ratio = torch.exp(logps - old)
        undetached = -(torch.clamp(ratio, max=epsilon_max) * (1 + logps) * (ratio < epsilon_max)
                       + torch.clamp(ratio, max=epsilon_max) * (ratio >= epsilon_max)) * advantages.unsqueeze(1)
        assert_close(grad, expected_grad, name=f"gradient with respect to logps (epsilon_max={epsilon_max})", hints={
            "the clipped weight was not detached: its own gradient leaks in (use .detach() on min(r, epsilon_max)).":
                undetached})


# ---------------------------------------------------------------------------- high_entropy_token_mask
def _numpy_entropy_mask(entropies, mask, quantile, *, over_all=False, strict=False, keep_padding=False,
                        use_quantile_itself=False) -> torch.Tensor:
    """TRL 1.16's `get_high_entropy_mask` on one process, recomputed with numpy (and its usual mistakes)."""
    e, m = entropies.double().numpy(), mask.numpy() != 0
    values = e.ravel() if over_all else e[m]
    if values.size == 0:
        return torch.zeros_like(mask, dtype=torch.bool)
    cut = np.quantile(values, quantile if use_quantile_itself else 1.0 - quantile)  # linear interpolation
    kept = (e > cut) if strict else (e >= cut)
    return torch.from_numpy(kept if keep_padding else kept & m)


def _as_bool(result, shape) -> torch.Tensor:
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != tuple(shape):
        raise Hint(f"return a (B, T) tensor like `entropies`, got {getattr(result, 'shape', type(result))}.")
    return result.bool()


def check_high_entropy_token_mask(fn) -> None:
    entropies, mask = _t([[0.1, 0.9, 0.5, 0.2]]), _t([[1, 1, 1, 0]])
    got = _as_bool(fn(entropies, mask, 0.5), entropies.shape)
    expected = torch.tensor([[False, True, True, False]])
    if not torch.equal(got, expected):
        cases = {"the quantile was taken over every position, padding included: use entropies[mask.bool()].":
                 _numpy_entropy_mask(entropies, mask, 0.5, over_all=True),
                 "a padded token was kept: combine the comparison with the mask.":
                 _numpy_entropy_mask(entropies, mask, 0.5, keep_padding=True),
                 "ties at the cut were dropped: keep entropy >= cut, not > cut.":
                 _numpy_entropy_mask(entropies, mask, 0.5, strict=True)}
        named = [text for text, wrong in cases.items() if torch.equal(got, wrong)]
        raise Hint(f"the docstring's example: expected {expected.tolist()}, got {got.tolist()}. "
                   + (named[0] if named else "The cut is torch.quantile(valid entropies, 1 - quantile)."))

    generator = torch.Generator().manual_seed(6)
    entropies = torch.rand(5, 12, generator=generator, dtype=F64) * 3
    entropies[1, 3] = entropies[2, 5] = entropies[0, 0]  # ties
    lengths = torch.tensor([12, 3, 8, 1, 10])
    mask = (torch.arange(12).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)
    entropies[3, 4:] = 10.0  # padded positions with large values: must not move the cut
    for quantile in (1.0, 0.5, 0.2, 0.05):
        got = _as_bool(fn(entropies, mask, quantile), entropies.shape)
        expected = _numpy_entropy_mask(entropies, mask, quantile)
        if torch.equal(got, expected):
            continue
        mistakes = {
            "the quantile was taken over every position, padding included: use entropies[mask.bool()].":
                _numpy_entropy_mask(entropies, mask, quantile, over_all=True),
            "ties at the cut were dropped: keep entropy >= cut, not > cut.":
                _numpy_entropy_mask(entropies, mask, quantile, strict=True),
            "padded tokens were kept: combine the comparison with the mask.":
                _numpy_entropy_mask(entropies, mask, quantile, keep_padding=True),
            "you cut at the `quantile` quantile: to keep the top fraction, cut at 1 - quantile.":
                _numpy_entropy_mask(entropies, mask, quantile, use_quantile_itself=True),
        }
        named = [text for text, wrong in mistakes.items() if torch.equal(got, wrong)]
        raise Hint(f"quantile={quantile}: kept {int(got.sum())} tokens, expected {int(expected.sum())}. "
                   + (named[0] if named else "Compare entropies with torch.quantile(valid entropies, 1 - quantile)."))
    empty = _as_bool(fn(entropies, torch.zeros_like(mask), 0.2), entropies.shape)
    if empty.any():
        raise Hint("with every position padded, no token may be kept (return an all-False mask).")
