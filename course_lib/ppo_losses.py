"""PPO-style losses with a sequence-level action (RLOO) or token-level actions (PPO).

- `rloo_policy_loss`: REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics")
  as TRL's RLOO trainer implements it: the whole completion is one action, its
  log-probability is the sum of its token log-probs, and the PPO clipped surrogate
  (Schulman et al. 2017, eq. 7) is applied to the sequence ratio. With one PPO epoch
  and one mini-batch the ratio is 1 and this is plain REINFORCE with a baseline.
- `ppo_policy_loss`: the token-level clipped surrogate of PPO for RLHF (Ziegler et al.
  2019; "The N Implementation Details of RLHF with PPO", Huang, Liu & von Werra 2023).
- `value_loss`: the clipped value loss of the same implementations,
  `0.5 * mean(max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2))`.

Metric names follow the RLOO/PPO documentation: `policy/approxkl_avg`,
`policy/clipfrac_avg`, `loss/policy_avg`, `val/ratio`, `val/ratio_var`,
`loss/value_avg`, `val/clipfrac_avg`. Simplification: the old trainers averaged these
over PPO epochs and mini-batches (and `val/ratio_var` was the variance of the
mini-batch means); here each call reports the statistics of its own batch, and the
trainer averages calls. `val/ratio` is the mean ratio the loss uses (per sequence for
RLOO, per valid token for PPO), where the old RLOO trainer averaged per-token ratios
with padding counted as 1.
"""

from __future__ import annotations

import torch

from course_lib.losses import LossOutput, _as_column
from course_lib.masking import masked_mean, masked_sum, masked_var

Tensor = torch.Tensor


def _check_cliprange(name: str, value: float) -> None:
    if not 0 <= value:
        raise ValueError(f"{name}={value!r} must be >= 0 (PPO uses 0.2)")


def rloo_policy_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    cliprange: float = 0.2,
    *,
    cliprange_high: float | None = None,
) -> LossOutput:
    """Sequence-level PPO-clip loss of RLOO: the completion is a single action.

    `log pi(y|x) = sum_t logps[t] * mask[t]`, `r = exp(log pi(y|x) - log pi_old(y|x))`,
    `loss = mean_b max(-A_b r_b, -A_b clip(r_b, 1 - c, 1 + c_high))`, the average
    over completions that TRL 1.16's `RLOOTrainer._compute_loss` returns (before the
    Trainer's division by gradient accumulation).

    Args:
        logps: `(B, T)` token log-probs under the current policy (differentiable).
        old_logps: `(B, T)` token log-probs or `(B,)` sequence log-probs under the
            policy that sampled the batch; `None` for on-policy.
        advantages: `(B,)` leave-one-out advantages (`course_lib.advantages`).
        mask: `(B, T)` completion mask (padding and tokens after EOS are 0).
        cliprange: PPO clip range c (RLOOConfig.cliprange / GRPO's epsilon).
        cliprange_high: upper clip range; defaults to `cliprange`.

    Returns:
        `LossOutput`; metrics `loss/policy_avg`, `policy/approxkl_avg`
        (`0.5 * mean((log r)^2)`), `policy/clipfrac_avg` (fraction of completions where
        the clipped branch is the larger loss), `val/ratio` and `val/ratio_var`
        (mean and unbiased variance of r over completions; 0 for one completion),
        and TRL 1.16's `clip_ratio/low_mean`, `clip_ratio/high_mean`,
        `clip_ratio/region_mean`. A fully masked row has log-prob 0, ratio 1.
    """
    _check_cliprange("cliprange", cliprange)
    high = cliprange if cliprange_high is None else cliprange_high
    mask = mask.to(logps.dtype)
    seq_logps = masked_sum(logps, mask, dim=-1)  # (B,)
    if old_logps is None:
        old_seq_logps = seq_logps.detach()
    elif old_logps.dim() == 2:
        old_seq_logps = masked_sum(old_logps, mask, dim=-1)
    else:
        old_seq_logps = old_logps
    advantages = advantages.to(logps.dtype).reshape(-1)
    if advantages.shape != seq_logps.shape:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}; RLOO needs one per completion, "
            f"shape ({seq_logps.shape[0]},)"
        )

    log_ratio = seq_logps - old_seq_logps  # (B,)
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    pg_losses_clipped = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + high)
    per_sequence_loss = torch.max(pg_losses, pg_losses_clipped)
    loss = per_sequence_loss.mean()

    with torch.no_grad():
        ones = torch.ones_like(ratio)
        is_low = ((ratio < 1 - cliprange) & (advantages < 0)).to(ratio.dtype)
        is_high = ((ratio > 1 + high) & (advantages > 0)).to(ratio.dtype)
        metrics = {
            "loss/policy_avg": loss.item(),
            "policy/approxkl_avg": (0.5 * log_ratio.pow(2).mean()).item(),
            "policy/clipfrac_avg": (pg_losses_clipped > pg_losses).to(ratio.dtype).mean().item(),
            "val/ratio": ratio.mean().item(),
            "val/ratio_var": masked_var(ratio, ones, unbiased=True).item(),
            "clip_ratio/low_mean": is_low.mean().item(),
            "clip_ratio/high_mean": is_high.mean().item(),
            "clip_ratio/region_mean": torch.maximum(is_low, is_high).mean().item(),
        }
    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_sequence_loss)


def ppo_policy_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cliprange: float = 0.2,
) -> LossOutput:
    """Token-level PPO clipped surrogate, averaged over valid tokens.

    `r_t = exp(logps_t - old_logps_t)`,
    `loss = masked_mean(max(-A_t r_t, -A_t clip(r_t, 1 - c, 1 + c)))`.

    Args:
        logps: `(B, T)` current log-probs (differentiable).
        old_logps: `(B, T)` log-probs at rollout time.
        advantages: `(B, T)` per-token advantages (e.g. GAE), or `(B,)` broadcast.
        mask: `(B, T)` completion mask.
        cliprange: c.

    Returns:
        `LossOutput`; metrics `loss/policy_avg`, `policy/approxkl_avg`
        (`0.5 * masked_mean((log r)^2)`), `policy/clipfrac_avg`, `val/ratio`,
        `val/ratio_var` (over valid tokens). All 0 for an empty mask.
    """
    _check_cliprange("cliprange", cliprange)
    mask = mask.to(logps.dtype)
    advantages = _as_column(advantages.to(logps.dtype), logps.shape[0])
    log_ratio = logps - old_logps
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    pg_losses_clipped = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    per_token_loss = torch.max(pg_losses, pg_losses_clipped)
    loss = masked_mean(per_token_loss, mask)

    with torch.no_grad():
        metrics = {
            "loss/policy_avg": loss.item(),
            "policy/approxkl_avg": (0.5 * masked_mean(log_ratio.pow(2), mask)).item(),
            "policy/clipfrac_avg": masked_mean(
                (pg_losses_clipped > pg_losses).to(logps.dtype), mask
            ).item(),
            "val/ratio": masked_mean(ratio, mask).item(),
            "val/ratio_var": masked_var(ratio, mask, unbiased=True).item(),
        }
    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_token_loss)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    cliprange_value: float = 0.2,
) -> LossOutput:
    """Clipped value-function loss of PPO for RLHF.

    `V_clip = clip(values, old_values - c, old_values + c)`,
    `loss = 0.5 * masked_mean(max((values - returns)^2, (V_clip - returns)^2))`.
    The max makes the clipping pessimistic: a step that moves V far from `old_values`
    cannot lower the loss below the clipped one.

    Args:
        values: `(B, T)` current value predictions (differentiable).
        old_values: `(B, T)` predictions at rollout time.
        returns: `(B, T)` regression targets (advantages + old values with GAE).
        mask: `(B, T)` completion mask.
        cliprange_value: c.

    Returns:
        `LossOutput`; metrics `loss/value_avg` and `val/clipfrac_avg` (fraction of
        valid tokens where the clipped error is the larger one). 0 for an empty mask.
    """
    _check_cliprange("cliprange_value", cliprange_value)
    mask = mask.to(values.dtype)
    values_clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    errors = (values - returns) ** 2
    errors_clipped = (values_clipped - returns) ** 2
    per_token_loss = torch.max(errors, errors_clipped)
    loss = 0.5 * masked_mean(per_token_loss, mask)
    with torch.no_grad():
        metrics = {
            "loss/value_avg": loss.item(),
            "val/clipfrac_avg": masked_mean((errors_clipped > errors).to(values.dtype), mask).item(),
        }
    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_token_loss)
