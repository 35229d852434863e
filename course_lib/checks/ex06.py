"""Checks for lesson 06 (GRPO variants): loss aggregation, GSPO's sequence ratio, two-sided clipping.

Expected values are hand-worked numbers and `course_lib.algos.grpo.policy_loss` on the same
inputs; typical mistakes are reproduced to name them in the hint.
"""

import math

import torch

from ..algos.grpo import policy_loss
from ..feedback import Hint, assert_close

F64 = torch.float64


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


# ---------------------------------------------------------------------------- aggregate_loss
def _aggregation_mistakes(loss, mask, loss_type, max_len, num_items) -> dict[str, torch.Tensor]:
    masked = loss * mask
    total = masked.sum()
    per_seq_mean = (masked.sum(1) / mask.sum(1).clamp(min=1)).mean()
    batch, width = loss.shape
    if loss_type == "grpo":
        mistakes = {
            "averaged all valid tokens at once (that is bnpo/dapo); grpo averages each completion over its own "
            "tokens first, then averages the completions.": total / mask.sum(),
            "divided each completion's sum by the padded width T instead of its own number of valid tokens.":
                (masked.sum(1) / width).mean(),
            "summed padded positions too: multiply by the mask (or use torch.where) before summing.":
                (loss.sum(1) / mask.sum(1).clamp(min=1)).mean(),
        }
    elif loss_type == "bnpo":
        mistakes = {
            "averaged per completion first (that is grpo); bnpo divides the batch's sum by its number of valid "
            "tokens.": per_seq_mean,
            "counted padded tokens: divide by mask.sum(), not by B * T.": total / loss.numel(),
            "summed padded positions too: multiply by the mask (or use torch.where) before summing.":
                loss.sum() / mask.sum(),
        }
    elif loss_type == "dr_grpo":
        mistakes = {
            "divided by max_completion_length only; Dr. GRPO's constant is B * max_completion_length.":
                total / max_len,
            "divided by B times the padded width T; the constant is max_completion_length, which does not "
            "depend on the batch.": total / (batch * width),
            "divided by the number of valid tokens (that is bnpo).": total / mask.sum(),
            "summed padded positions too: multiply by the mask (or use torch.where) before summing.":
                loss.sum() / (batch * max_len),
        }
    else:  # dapo
        count = mask.sum() if num_items is None else num_items
        mistakes = {
            "divided by this batch's valid tokens; dapo divides by num_items, the valid tokens of the whole "
            "accumulated batch.": total / mask.sum(),
            "averaged per completion (that is grpo).": per_seq_mean,
            "summed padded positions too: multiply by the mask (or use torch.where) before summing.":
                loss.sum() / count,
        }
    return mistakes


def _library_loss(per_token, mask, loss_type, max_len, num_items):
    # policy_loss's per-token loss at ratio 1 with advantage -x is x: feed the values through it.
    batch, width = per_token.shape
    logps = torch.zeros(batch, width, dtype=F64)
    out = policy_loss(logps, None, -per_token, mask, loss_type=loss_type, max_completion_length=max_len,
                      num_items_in_batch=num_items)
    return out.loss


def check_aggregate_loss(fn) -> None:
    loss = _t([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
    mask = _t([[1, 1, 1, 0], [1, 0, 0, 0]])
    hand = {"grpo": (3.0, None, None), "bnpo": (2.5, None, None), "dr_grpo": (1.25, 4, None),
            "dapo": (1.25, None, 8)}
    for loss_type, (expected, max_len, num_items) in hand.items():
        got = fn(loss.clone(), mask, loss_type, max_completion_length=max_len, num_items=num_items)
        if not isinstance(got, torch.Tensor) or got.dim() != 0:
            raise Hint(f"loss_type={loss_type!r}: return a scalar tensor, got {got!r}.")
        assert_close(got, expected, name=f"hand-worked example, loss_type={loss_type!r}",
                     hints=_aggregation_mistakes(loss, mask, loss_type, max_len, num_items))
    assert_close(fn(loss, mask, "dapo"), 2.5, name="dapo with num_items=None (this batch is the whole batch)",
                 hints={"num_items=None means 'count this batch's valid tokens' (mask.sum())": 10.0})

    # A padded batch whose padded positions hold garbage, against course_lib's policy_loss.
    generator = torch.Generator().manual_seed(0)
    per_token = torch.randn(6, 7, generator=generator, dtype=F64)
    lengths = torch.tensor([7, 1, 3, 5, 2, 6])
    mask = (torch.arange(7).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)
    per_token = torch.where(mask.bool(), per_token, torch.full_like(per_token, 9.0))
    for loss_type, max_len, num_items in (("grpo", None, None), ("bnpo", None, None), ("dr_grpo", 16, None),
                                          ("dapo", None, 60)):
        expected = _library_loss(per_token, mask, loss_type, max_len, num_items)
        got = fn(per_token.clone(), mask, loss_type, max_completion_length=max_len, num_items=num_items)
        assert_close(got, expected, name=f"padded batch, loss_type={loss_type!r}",
                     hints=_aggregation_mistakes(per_token, mask, loss_type, max_len, num_items))

    # An all-masked row (a truncated completion under mask_truncated_completions) must not give NaN.
    mask_with_empty = mask.clone()
    mask_with_empty[1] = 0
    for loss_type in ("grpo", "bnpo"):
        got = fn(per_token.clone(), mask_with_empty, loss_type)
        if torch.isnan(torch.as_tensor(got)).any():
            raise Hint(f"loss_type={loss_type!r}: a completion with no valid token gives NaN (0 / 0). Clamp the "
                       "token counts to at least 1 so that it contributes 0.")
        assert_close(got, _library_loss(per_token, mask_with_empty, loss_type, None, None),
                     name=f"batch with an all-masked completion, loss_type={loss_type!r}",
                     hints={"dropped the empty completion from grpo's mean over completions; it still counts as "
                            "one of the B sequences (contributing 0), as in TRL.":
                            ((per_token * mask_with_empty).sum(1)[mask_with_empty.sum(1) > 0]
                             / mask_with_empty.sum(1)[mask_with_empty.sum(1) > 0]).mean()})
    empty = fn(per_token.clone(), torch.zeros_like(mask), "bnpo")
    if torch.isnan(torch.as_tensor(empty)).any():
        raise Hint("loss_type='bnpo' with an all-zero mask gives NaN: clamp the token count to at least 1.")


# ---------------------------------------------------------------------------- sequence_level_ratio
def _library_sequence_ratio(logps, old_logps, mask) -> torch.Tensor:
    # GSPO in policy_loss: with A = 1 and a clip range too wide to bind, the per-token loss is -s_i.
    out = policy_loss(logps, old_logps, torch.ones(logps.shape[0], dtype=F64), mask, loss_type="grpo",
                      epsilon=1.0 - 1e-12, epsilon_high=1e12, importance_sampling_level="sequence")
    return -out.per_token_loss[:, 0]


def _ratio_mistakes(logps, old_logps, mask) -> dict[str, torch.Tensor]:
    log_ratio = (logps - old_logps) * mask
    counts = mask.sum(1).clamp(min=1)
    return {
        "summed the token log-ratios (the product of the token ratios); GSPO averages them, so long and "
        "short completions get ratios of the same scale.": torch.exp(log_ratio.sum(1)),
        "took the arithmetic mean of the token ratios; GSPO's ratio is their geometric mean, "
        "exp(mean of the log-ratios).": (torch.exp(logps - old_logps) * mask).sum(1) / counts,
        "averaged over all T positions: divide by each row's number of valid tokens.":
            torch.exp(log_ratio.sum(1) / logps.shape[1]),
        "averaged over all T positions, padding included: mask the log-ratios and divide by each row's "
        "number of valid tokens.": torch.exp((logps - old_logps).mean(1)),
        "included the padded positions' log-ratios: multiply by the mask before summing.":
            torch.exp((logps - old_logps).sum(1) / counts),
        "used old_logps - logps; the ratio is pi / pi_old, so the log-ratio is logps - old_logps.":
            torch.exp(-log_ratio.sum(1) / counts),
        "that is the mean log-ratio; exponentiate it: s = exp(mean_t (logps - old_logps)), which is 1 (not 0) "
        "when the policy has not moved.": log_ratio.sum(1) / counts,
    }


def check_sequence_level_ratio(fn) -> None:
    logps = _t([[math.log(2.0), 0.0, 5.0]])
    old = torch.zeros_like(logps)
    mask = _t([[1, 1, 0]])
    got = fn(logps, old, mask)
    if isinstance(got, torch.Tensor) and got.dim() == 2:
        raise Hint("return one ratio per completion, shape (B,), not (B, 1) or (B, T).")
    assert_close(got, [math.sqrt(2.0)], name="token ratios 2 and 1 (a third, padded position)",
                 hints=_ratio_mistakes(logps, old, mask))

    generator = torch.Generator().manual_seed(3)
    logps = -torch.rand(5, 8, generator=generator, dtype=F64) * 2
    old = logps + (torch.rand(5, 8, generator=generator, dtype=F64) - 0.5)
    lengths = torch.tensor([8, 3, 1, 5, 6])
    mask = (torch.arange(8).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)
    assert_close(fn(logps, old, mask), _library_sequence_ratio(logps, old, mask),
                 name="sequence ratios of a padded batch", hints=_ratio_mistakes(logps, old, mask))
    empty = mask.clone()
    empty[2] = 0
    got = fn(logps, old, empty)
    if torch.isnan(torch.as_tensor(got)).any():
        raise Hint("a completion with no valid token gives NaN (0 / 0): clamp its token count to at least 1 "
                   "(its ratio is then exp(0) = 1).")


# ---------------------------------------------------------------------------- two_sided_clip_objective
def _library_objective(ratio, advantages, epsilon, epsilon_high, delta) -> torch.Tensor:
    out = policy_loss(ratio.log(), torch.zeros_like(ratio), advantages, torch.ones_like(ratio), loss_type="grpo",
                      epsilon=epsilon, epsilon_high=epsilon_high, delta=delta)
    return -out.per_token_loss


def _clip_mistakes(ratio, advantages, epsilon, epsilon_high, delta) -> dict[str, torch.Tensor]:
    high = epsilon if epsilon_high is None else epsilon_high
    adv = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + high)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    mistakes = {
        "ignored delta: the unclipped term uses min(r, delta) (two-sided clipping).":
            torch.min(ratio * adv, clipped * adv),
        "ignored epsilon_high: the upper clip bound is 1 + epsilon_high (clip-higher), the lower 1 - epsilon.":
            torch.min(capped * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv),
        "returned the loss; return the objective (the loss is its negative).": -torch.min(capped * adv, clipped * adv),
        "used max instead of min: the clipped objective is the pessimistic (smaller) of the two terms.":
            torch.max(capped * adv, clipped * adv),
        "applied delta to the clipped term instead of the unclipped one.":
            torch.min(ratio * adv, torch.clamp(clipped, max=delta if delta is not None else float("inf")) * adv),
        "took the max for negative advantages: the pessimistic term is the MIN for both signs. For A < 0, "
        "min(r * A, clip(r) * A) keeps r * A when r > 1 + epsilon_high (capped by delta) and clips when "
        "r < 1 - epsilon.": torch.where(adv > 0, torch.min(capped * adv, clipped * adv),
                                        torch.max(capped * adv, clipped * adv)),
        "swapped epsilon and epsilon_high: the range is [1 - epsilon, 1 + epsilon_high], the higher bound is "
        "the one clip-higher raises.": torch.min(capped * adv, torch.clamp(ratio, 1 - high, 1 + epsilon) * adv),
    }
    return mistakes


def check_two_sided_clip_objective(fn) -> None:
    ratio = _t([[0.5, 1.0, 1.3, 2.0, 3.0], [0.5, 1.0, 1.3, 2.0, 3.0]])
    advantages = _t([1.0, -1.0])
    hand = _t([[0.5, 1.0, 1.28, 1.28, 1.28], [-0.8, -1.0, -1.3, -1.5, -1.5]])
    got = fn(ratio, advantages, 0.2, 0.28, 1.5)
    assert_close(got, hand, name="epsilon=0.2, epsilon_high=0.28, delta=1.5 (rows: A=+1, A=-1)",
                 hints=_clip_mistakes(ratio, advantages, 0.2, 0.28, 1.5))
    standard = _t([[0.5, 1.0, 1.2, 1.2, 1.2], [-0.8, -1.0, -1.3, -2.0, -3.0]])
    assert_close(fn(ratio, advantages, 0.2), standard, name="defaults (epsilon_high=None, delta=None)",
                 hints=_clip_mistakes(ratio, advantages, 0.2, None, None))

    generator = torch.Generator().manual_seed(11)
    ratio = torch.exp(torch.randn(6, 9, generator=generator, dtype=F64) * 0.6)
    advantages = torch.randn(6, generator=generator, dtype=F64)
    for epsilon, epsilon_high, delta in ((0.2, 0.28, 1.5), (0.1, None, 2.0), (0.2, 0.28, None)):
        assert_close(fn(ratio, advantages, epsilon, epsilon_high, delta),
                     _library_objective(ratio, advantages, epsilon, epsilon_high, delta),
                     name=f"random ratios, epsilon={epsilon}, epsilon_high={epsilon_high}, delta={delta}",
                     hints=_clip_mistakes(ratio, advantages, epsilon, epsilon_high, delta))
