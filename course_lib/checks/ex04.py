"""Checks for lesson 04 (RLHF with PPO): per-token rewards, whitening, the clipped value loss,
the Bradley-Terry loss of the reward model.

Expected values are hand-worked numbers, explicit per-row loops written here, and the
library (`ops.masking.masked_whiten`, `algos.ppo.value_loss`); each typical mistake is
reproduced to name it in the hint.
"""

from __future__ import annotations

import math

import torch

from ..ops.masking import masked_whiten
from ..reward_model import bradley_terry_loss as library_bradley_terry_loss
from ..algos.ppo import value_loss as library_value_loss
from ..feedback import Hint, assert_close


def _tensor(values, dtype=torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _right_padded_mask(lengths: list[int], width: int) -> torch.Tensor:
    return (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(torch.float64)


# ----------------------------------------------------------------------------- per-token rewards
def _loop_rewards(scores, logps, ref_logps, mask, beta, is_eos=None, penalty=None, *, last_column=False,
                  kl_sign=1.0, mask_kl=True, penalty_everywhere=False, penalty_sign=-1.0,
                  penalty_on_eos_rows=False) -> torch.Tensor:
    """Per-token rewards by explicit loops; the keyword flags reproduce typical mistakes."""
    batch, width = logps.shape
    out = torch.zeros(batch, width, dtype=torch.float64)
    for b in range(batch):
        score = float(scores[b])
        penalised = bool(is_eos[b]) if penalty_on_eos_rows else not bool(is_eos[b]) if is_eos is not None else False
        if penalty is not None and is_eos is not None and (penalty_everywhere or penalised):
            score += penalty_sign * penalty
        length = int(mask[b].sum())
        for t in range(width):
            if mask[b, t] or not mask_kl:
                out[b, t] = -beta * kl_sign * float(logps[b, t] - ref_logps[b, t])
        out[b, width - 1 if last_column else max(length - 1, 0)] += score
    return out


def _reward_mistakes(scores, logps, ref_logps, mask, beta, is_eos=None, penalty=None) -> dict[str, torch.Tensor]:
    args = (scores, logps, ref_logps, mask, beta, is_eos, penalty)
    mistakes = {
        "the score sits in the last column; it belongs on each row's last VALID token (index mask.sum(1) - 1): "
        "a short completion is right-padded, and its last column is padding.": _loop_rewards(*args, last_column=True),
        "the KL sign is flipped: the shaping is -beta * (logps - ref_logps), so a token the policy makes more "
        "likely than the reference does is penalised.": _loop_rewards(*args, kl_sign=-1.0),
        "padded positions carry a KL term; multiply the KL by the mask so padding gets reward 0.":
            _loop_rewards(*args, mask_kl=False),
        "the KL is missing: every valid token pays -beta * (logps - ref_logps).": _loop_rewards(*args) -
            _loop_rewards(scores * 0, logps, ref_logps, mask, beta),
    }
    if penalty is not None:
        mistakes["the missing-EOS penalty hit every completion; only those with is_eos == False pay it."] = \
            _loop_rewards(*args, penalty_everywhere=True)
        mistakes["the missing-EOS penalty hit the rows that DID end with EOS; it is for the completions with "
                 "is_eos == False (cut off before EOS): scores[~is_eos] -= penalty."] = \
            _loop_rewards(*args, penalty_on_eos_rows=True)
        mistakes["the missing-EOS penalty was added; it is subtracted from the score."] = \
            _loop_rewards(*args, penalty_sign=1.0)
        mistakes["the missing-EOS penalty is ignored: lower the score of completions without EOS."] = \
            _loop_rewards(scores, logps, ref_logps, mask, beta)
    return mistakes


def _reward_case(seed: int):
    generator = torch.Generator().manual_seed(seed)
    lengths = [5, 2, 4, 1]
    width = 5
    logps = -torch.rand(len(lengths), width, generator=generator, dtype=torch.float64) * 2
    ref_logps = logps + (torch.rand(len(lengths), width, generator=generator, dtype=torch.float64) - 0.5)
    scores = torch.randn(len(lengths), generator=generator, dtype=torch.float64)
    is_eos = torch.tensor([False, True, True, False])
    return scores, logps, ref_logps, _right_padded_mask(lengths, width), is_eos


def check_per_token_rewards(fn) -> None:
    # Hand-worked (the docstring's example): KL per token [1, 0], score 2 on token 1.
    scores, logps, ref_logps = _tensor([2.0]), _tensor([[-1.0, -1.0, 0.0]]), _tensor([[-2.0, -1.0, 0.0]])
    mask = _tensor([[1.0, 1.0, 0.0]])
    got = fn(scores, logps, ref_logps, mask, 0.5)
    if not isinstance(got, torch.Tensor) or got.shape != logps.shape:
        raise Hint(f"return a (B, T) tensor of per-token rewards, shape {tuple(logps.shape)}; got {got!r}.")
    assert_close(got, [[-0.5, 2.0, 0.0]], name="hand-worked rewards (beta=0.5, score 2, two valid tokens)",
                 hints=_reward_mistakes(scores, logps, ref_logps, mask, 0.5))

    for seed, beta in ((0, 0.05), (1, 0.2)):
        scores, logps, ref_logps, mask, is_eos = _reward_case(seed)
        got = fn(scores.clone(), logps, ref_logps, mask, beta)
        assert_close(got, _loop_rewards(scores, logps, ref_logps, mask, beta),
                     name=f"rewards of a padded batch (beta={beta}, lengths 5, 2, 4, 1)",
                     hints=_reward_mistakes(scores, logps, ref_logps, mask, beta))
        # The sum over tokens is the RLHF reward: score - beta * KL(sequence).
        kl_sum = ((logps - ref_logps) * mask).sum(1)
        assert_close(got.sum(1), scores - beta * kl_sum, name="sum over tokens (must be score - beta * sum KL)")

    # The EOS trick.
    scores, logps, ref_logps, mask, is_eos = _reward_case(2)
    original = scores.clone()
    got = fn(scores, logps, ref_logps, mask, 0.1, is_eos=is_eos, missing_eos_penalty=1.0)
    if not torch.equal(scores, original):
        raise Hint("your function changed `scores` in place (the missing-EOS penalty); work on a copy "
                   "(scores.clone()).")
    assert_close(got, _loop_rewards(original, logps, ref_logps, mask, 0.1, is_eos, 1.0),
                 name="rewards with missing_eos_penalty=1.0 (rows 0 and 3 have no EOS)",
                 hints=_reward_mistakes(original, logps, ref_logps, mask, 0.1, is_eos, 1.0))
    # No penalty asked for: is_eos alone changes nothing.
    got = fn(original.clone(), logps, ref_logps, mask, 0.1, is_eos=is_eos, missing_eos_penalty=None)
    assert_close(got, _loop_rewards(original, logps, ref_logps, mask, 0.1),
                 name="rewards with is_eos given but missing_eos_penalty=None (no penalty)")


# ----------------------------------------------------------------------------- whitening
def _whiten_mistakes(x, mask, shift_mean) -> dict[str, torch.Tensor]:
    valid = x[mask.bool()]
    mean, var = valid.mean(), valid.var()
    per_row_mean = (x * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
    base = (x - mean) * torch.rsqrt(var + 1e-8)
    return {
        "the padded entries entered the statistics; take the mean and the variance over mask == 1 only.":
            masked_whiten(x, torch.ones_like(x), shift_mean=shift_mean) * mask,
        "used the population variance (divide by n); PPO's whiten uses the unbiased one (divide by n - 1).":
            ((x - mean) * torch.rsqrt(valid.var(unbiased=False) + 1e-8) + (0 if shift_mean else mean)) * mask,
        "the padded positions are not 0; multiply the result by the mask.": base + (0 if shift_mean else mean),
        "with shift_mean=False the mean must be added back after scaling (the batch keeps its mean).":
            base * mask,
        "with shift_mean=True the result must have mean 0: do not add the mean back.": (base + mean) * mask,
        "whitened each row on its own; the statistics are taken over the whole batch.":
            ((x - per_row_mean) * mask),
    }


def _per_row_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool) -> torch.Tensor:
    """Each row whitened with its own mean and unbiased std (NaN in rows with fewer than 2 values)."""
    out = torch.full_like(x, float("nan"))
    for b in range(x.shape[0]):
        valid = x[b][mask[b].bool()]
        if valid.numel() < 2:
            continue
        row = (x[b] - valid.mean()) * torch.rsqrt(valid.var() + 1e-8) + (0 if shift_mean else valid.mean())
        out[b] = row * mask[b]
    return out


def _check_not_per_row(got: torch.Tensor, x: torch.Tensor, mask: torch.Tensor, shift_mean: bool) -> None:
    """Name the per-row mistake: rows of 2+ valid values match a row-by-row whitening."""
    per_row = _per_row_whiten(x, mask, shift_mean)
    rows = mask.sum(1) >= 2
    if torch.allclose(got[rows].to(torch.float64), per_row[rows], atol=1e-5) and \
            not torch.allclose(per_row[rows], masked_whiten(x, mask, shift_mean=shift_mean)[rows], atol=1e-5):
        raise Hint("whitened each row on its own (its own mean and std); the statistics are taken over every "
                   "valid token of the whole batch, so the scale of the advantages is shared across completions.")


def check_whiten(fn) -> None:
    x, mask = _tensor([[1.0, 2.0, 9.0], [3.0, 0.0, 0.0]]), _tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    got = fn(x, mask)
    if not isinstance(got, torch.Tensor) or got.shape != x.shape:
        raise Hint(f"return a tensor shaped like x, {tuple(x.shape)}; got {got!r}.")
    if got[mask == 0].abs().max() > 0:
        raise Hint("the padded positions (mask == 0) must come out as 0; multiply the result by the mask.")
    scale = (1 + 1e-8) ** -0.5
    _check_not_per_row(got, x, mask, True)
    assert_close(got, [[-scale, 0.0, 0.0], [scale, 0.0, 0.0]], name="hand-worked whiten (valid values 1, 2, 3)",
                 hints=_whiten_mistakes(x, mask, True))
    got = fn(x, mask, shift_mean=False)
    assert_close(got, [[-scale + 2, 2.0, 0.0], [scale + 2, 0.0, 0.0]],
                 name="hand-worked whiten with shift_mean=False (the mean 2 is added back)",
                 hints=_whiten_mistakes(x, mask, False))

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=generator, dtype=torch.float64) * 3 + 1
    mask = _right_padded_mask([6, 3, 1, 4], 6)
    for shift_mean in (True, False):
        got = fn(x.clone(), mask, shift_mean=shift_mean)
        if isinstance(got, torch.Tensor) and got.shape == x.shape:
            _check_not_per_row(got, x, mask, shift_mean)
        assert_close(got, masked_whiten(x, mask, shift_mean=shift_mean),
                     name=f"whiten of a padded (4, 6) batch, shift_mean={shift_mean}",
                     hints=_whiten_mistakes(x, mask, shift_mean))
    got = fn(x.clone(), mask)
    valid = got[mask.bool()]
    assert_close(valid.mean(), 0.0, name="mean of the whitened valid entries", atol=1e-6)
    assert_close(valid.std(), 1.0, name="unbiased std of the whitened valid entries", atol=1e-6)


# ----------------------------------------------------------------------------- value loss
def _value_mistakes(values, old_values, returns, mask, c) -> dict[str, torch.Tensor]:
    clipped = torch.clamp(values, old_values - c, old_values + c)
    unclipped_err, clipped_err = (values - returns) ** 2, (clipped - returns) ** 2
    masked_mean = lambda e: (e * mask).sum() / mask.sum()  # noqa: E731
    around_returns = (torch.clamp(values, returns - c, returns + c) - returns) ** 2
    return {
        "took the min of the two errors; the clipped value loss keeps the max (the pessimistic one).":
            0.5 * masked_mean(torch.min(unclipped_err, clipped_err)),
        "forgot the 0.5 factor: loss = 0.5 * mean(max(...)).": masked_mean(torch.max(unclipped_err, clipped_err)),
        "the clipped branch never wins: either the value is not clipped, or the clip is centred on the returns "
        "(clamping toward the returns can only shrink the error, so the max ignores it). The clip is centred on "
        "old_values, the critic at rollout time: clamp(values, old_values - c, old_values + c).":
            0.5 * masked_mean(unclipped_err),
        "used only the clipped error; take the max with the unclipped one.": 0.5 * masked_mean(clipped_err),
        "padding counted in the mean; average over mask == 1 only.":
            0.5 * torch.max(unclipped_err, clipped_err).mean(),
        "took the min, and clipped around the returns; the clip is centred on old_values (the critic at "
        "rollout time) and the max keeps the worse error.": 0.5 * masked_mean(torch.min(unclipped_err, around_returns)),
    }


def _value_case(seed: int):
    generator = torch.Generator().manual_seed(seed)
    lengths, width = [4, 2, 3], 4
    old_values = torch.randn(3, width, generator=generator, dtype=torch.float64)
    values = old_values + (torch.rand(3, width, generator=generator, dtype=torch.float64) - 0.5)  # moves up to 0.5
    returns = old_values + torch.randn(3, width, generator=generator, dtype=torch.float64)
    return values, old_values, returns, _right_padded_mask(lengths, width)


def check_value_loss(fn) -> None:
    ones = _tensor([[1.0]])
    hand = got = fn(_tensor([[1.0]]), _tensor([[0.0]]), _tensor([[1.0]]), ones, 0.2)
    if not isinstance(got, torch.Tensor) or got.dim() != 0:
        raise Hint(f"return a scalar tensor (0-dimensional); got {got!r}.")
    # The value moved toward a far target but stayed inside the band: both errors agree.
    assert_close(fn(_tensor([[0.1]]), _tensor([[0.0]]), _tensor([[2.0]]), ones, 0.2), 0.5 * 1.9 ** 2,
                 name="value inside the clip band (values 0.1, old 0, return 2)")

    for seed, c in ((0, 0.2), (1, 0.1)):
        values, old_values, returns, mask = _value_case(seed)
        got = fn(values, old_values, returns, mask, c)
        expected = library_value_loss(values, old_values, returns, mask, cliprange_value=c).loss
        assert_close(got, expected, name=f"value loss on a padded batch (cliprange_value={c})",
                     hints=_value_mistakes(values, old_values, returns, mask, c))

    # After the batches (whose tokens tell the mistakes apart): on one token where the clip
    # matters, no clipping, the min and a clip centred on the returns all give 0.
    assert_close(hand, 0.32, name="hand-worked loss (values 1, old 0, return 1, c=0.2: 0.5 * 0.8^2)",
                 hints=_value_mistakes(_tensor([[1.0]]), _tensor([[0.0]]), _tensor([[1.0]]), ones, 0.2))

    # Gradient: flows into values only, and is zero where the clipped (constant) branch wins.
    values, old_values, returns, mask = _value_case(2)
    reference = values.clone().requires_grad_(True)
    library_value_loss(reference, old_values, returns, mask, cliprange_value=0.2).loss.backward()
    current = values.clone().requires_grad_(True)
    loss = fn(current, old_values, returns, mask, 0.2)
    if not loss.requires_grad:
        raise Hint("the loss has no gradient with respect to values; build it from `values` with torch "
                   "operations (no .item(), no .detach() of values).")
    loss.backward()
    assert_close(current.grad, reference.grad, name="gradient of the value loss w.r.t. values", atol=1e-7)


# ----------------------------------------------------------------------------- Bradley-Terry loss
def _bt_mistakes(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, torch.Tensor]:
    gap = chosen - rejected
    return {
        "chosen and rejected are swapped: the loss is -log sigmoid(chosen - rejected), small when the "
        "preferred completion scores higher.": -torch.nn.functional.logsigmoid(-gap).mean(),
        "the sign is flipped: return minus the mean log-likelihood (a loss to minimise).":
            torch.nn.functional.logsigmoid(gap).mean(),
        "summed over the pairs; take the mean, so the loss does not grow with the batch size.":
            -torch.nn.functional.logsigmoid(gap).sum(),
        "forgot the log: the likelihood of a pair is sigmoid(gap), its negative log is the loss.":
            -torch.sigmoid(gap).mean(),
        "compared the two scores with a hinge or a squared error; Bradley-Terry's loss is -log sigmoid(gap).":
            torch.clamp(1 - gap, min=0).mean(),
    }


def check_bradley_terry_loss(fn) -> None:
    chosen, rejected = _tensor([0.0, 3.0]), _tensor([0.0, 1.0])
    got = fn(chosen, rejected)
    if not isinstance(got, torch.Tensor) or got.dim() != 0:
        raise Hint(f"return a scalar tensor (0-dimensional); got {got!r}.")
    assert_close(got, (math.log(2) + math.log(1 + math.exp(-2))) / 2,
                 name="hand-worked loss (pairs tied at 0, and 3 against 1)", hints=_bt_mistakes(chosen, rejected))

    generator = torch.Generator().manual_seed(0)
    chosen, rejected = torch.randn(9, generator=generator, dtype=torch.float64), \
        torch.randn(9, generator=generator, dtype=torch.float64)
    assert_close(fn(chosen, rejected), library_bradley_terry_loss(chosen, rejected),
                 name="loss on 9 random pairs", hints=_bt_mistakes(chosen, rejected))
    assert_close(fn(chosen + 5.0, rejected + 5.0), library_bradley_terry_loss(chosen, rejected),
                 name="loss with both scores shifted by +5 (only the difference matters)")

    huge = fn(_tensor([-1000.0]), _tensor([1000.0]))
    if not torch.isfinite(huge):
        raise Hint("a pair whose preferred completion scores 2000 lower gave an infinite loss: log(sigmoid(x)) "
                   "underflows; use torch.nn.functional.logsigmoid(x).")
    assert_close(huge, 2000.0, name="loss of a pair lost by 2000 (-log sigmoid(-2000) = 2000)", atol=1e-6)

    current_chosen = chosen.clone().requires_grad_(True)
    current_rejected = rejected.clone().requires_grad_(True)
    loss = fn(current_chosen, current_rejected)
    if not loss.requires_grad:
        raise Hint("the loss has no gradient; build it from the scores with torch operations (no .item()).")
    loss.backward()
    expected = -torch.sigmoid(rejected - chosen) / len(chosen)  # d loss / d chosen, per pair
    assert_close(current_chosen.grad, expected, name="gradient w.r.t. the chosen scores", atol=1e-9)
    assert_close(current_rejected.grad, -expected, name="gradient w.r.t. the rejected scores", atol=1e-9)
