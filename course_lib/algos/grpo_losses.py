"""The per-token objectives of the GRPO family and how each is averaged.

:func:`course_lib.algos.grpo.policy_loss` is the one entry point; this module holds the
pieces by which its `loss_type`s differ. With `r` the importance ratio (per token, or one
per completion under GSPO's sequence level) and `A` the advantage:

- `grpo`, `bnpo`, `dr_grpo`, `dapo`, `luspo`: PPO's clipped surrogate
  `-min(r A, clip(r, 1 - eps, 1 + eps_high) A)` (Schulman et al. 2017), differing only in
  the averaging (below).
- `cispo`: `-sg(min(r, eps_max)) * A * log pi`: the weight is clipped and detached, but the
  token keeps its gradient, so no token is silenced by the clip (MiniMax-M1, arXiv 2506.13585;
  `eps_max` is `epsilon_high`, 5.0 in ScaleRL, arXiv 2510.13786).
- `sapo`: `-sigmoid(tau (r - 1)) * 4 / tau * A`, a smooth gate instead of a hard clip, with
  `tau` depending on the sign of A (Soft Adaptive Policy Optimization, arXiv 2511.20347). At
  r = 1 its gradient equals the unclipped ratio's. The gate `4 sigma (1 - sigma)` fades on both
  sides, but the weight `4 sigma (1 - sigma) r` rises above r = 1 (about 1.57 near r = 2 with
  tau = 1) and only falls below 1 past r ~ 3.4.
- `vespo`: `-phi(w) * A * log pi` with `phi(w) = exp(lambda + k log w - lambda w)` a gamma-shaped
  weight of the sequence ratio `w` (product of the token ratios, times the sampler
  correction), `phi(1) = 1`, detached (Variational Sequence-Level Soft Policy
  Optimization, arXiv 2602.10693; `k` and `lambda` depend on the sign of A).

Averaging (`aggregate`): `grpo`/`sapo` mean per sequence then over sequences; `bnpo` over
the local batch's tokens; `dr_grpo` over `B * max_completion_length`; `dapo`/`cispo`/`vespo`
over the tokens of the whole generation batch; `luspo` sums each sequence's tokens then
averages over sequences (Length-Unbiased Sequence Policy Optimization, arXiv 2602.05261: GSPO's
sequence loss scaled by the sequence's length).
"""

from __future__ import annotations

import math

import torch

from course_lib.ops.masking import masked_normalize, masked_sum

Tensor = torch.Tensor

CLIPPED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
LOSS_TYPES: tuple[str, ...] = (*CLIPPED_LOSSES, "cispo", "sapo", "vespo")
SEQUENCE_MEAN_LOSSES = ("grpo", "sapo")
GLOBAL_TOKEN_LOSSES = ("dapo", "cispo", "vespo")
# exp(-18.42) = 1e-8: the floor of VESPO's log-weights (the weight of a vanishing ratio).
_LOG_FLOOR = math.log(1e-8)


def vespo_weights(advantages: Tensor, log_ratio: Tensor, mask: Tensor, sampling_ratio: Tensor | None, *,
                  k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float) -> Tensor:
    """`(B, 1)` detached gamma weights `phi(w) = exp(lambda + k log w - lambda w)` of VESPO.

    `log w` is the sum over the completion's valid tokens of `log_ratio` (each clamped to
    [-20, 20]), plus the sum of the sampler correction's log-weights when given, clamped
    to [log 1e-8, 20]. Non-negative advantages use `(k_pos, lambda_pos)`, negative ones
    `(k_neg, lambda_neg)`; lambda is floored at 1e-4. Overflow gives weight 0.
    """
    with torch.no_grad():
        log_w = (log_ratio.clamp(-20.0, 20.0) * mask).sum(-1, keepdim=True)  # (B, 1)
        if sampling_ratio is not None:
            log_w = log_w + sampling_ratio.log().clamp(_LOG_FLOOR, 20.0).sum(-1, keepdim=True)
        log_w = log_w.clamp(_LOG_FLOOR, 20.0)
        non_negative = advantages >= 0
        k = torch.where(non_negative, k_pos, k_neg)
        lam = torch.where(non_negative, lambda_pos, lambda_neg).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * log_w.exp())
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def surrogate(loss_type: str, ratio: Tensor, advantages: Tensor, logps: Tensor, *, epsilon_low: float,
              epsilon_high: float, delta: float | None, sapo_temperatures: tuple[float, float],
              gamma: Tensor | None) -> tuple[Tensor, Tensor]:
    """Per-token (or per-sequence) loss before masks, corrections and KL.

    Args:
        ratio: `(B, T)` or `(B, 1)` importance ratio, differentiable.
        advantages: `(B, 1)` or `(B, T)`.
        logps: `(B, T)` current log-probs (CISPO and VESPO differentiate them directly).
        sapo_temperatures: `(tau_pos, tau_neg)`, tau_pos for A > 0.
        gamma: VESPO's weights from :func:`vespo_weights` (None otherwise).

    Returns:
        `(per_token_loss, ratio_for_metrics)`: the second is the ratio after `delta`'s cap
        for the clipped losses (what the clip statistics count), else `ratio`.
    """
    if loss_type in CLIPPED_LOSSES:
        clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
        if delta is not None:
            # Two-sided clipping bounds the unclipped branch too, after the clipped branch is formed.
            ratio = torch.clamp(ratio, max=delta)
        return -torch.min(ratio * advantages, clipped * advantages), ratio
    if loss_type == "cispo":
        weight = torch.clamp(ratio, max=epsilon_high).detach()
        return -weight * advantages * logps, ratio
    if loss_type == "sapo":
        tau = torch.where(advantages > 0, sapo_temperatures[0], sapo_temperatures[1])
        return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * advantages, ratio
    if loss_type == "vespo":
        return -gamma * advantages * logps, ratio
    raise ValueError(f"loss_type={loss_type!r} is unknown; use one of {', '.join(LOSS_TYPES)}")


def aggregate(loss_type: str, per_token_loss: Tensor, mask: Tensor, *, accumulation: int,
              max_completion_length: int | None, num_items: Tensor, num_processes: int,
              window_fraction: float) -> tuple[Tensor, Tensor]:
    """Average `(B, T)` per-token losses over `mask` as `loss_type` says.

    `accumulation` divides the per-sequence and per-batch means (1 outside training);
    the global-token losses divide by `num_items / num_processes * window_fraction`
    instead (`window_fraction` = accumulation / steps_per_generation in training, else 1).

    Returns:
        `(loss, unscaled)`: the loss to differentiate and the one TRL logs as `policy_loss`.
    """
    if loss_type in SEQUENCE_MEAN_LOSSES:
        unscaled = (masked_sum(per_token_loss, mask, dim=-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        unscaled = masked_sum(per_token_loss, mask) / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        unscaled = masked_normalize(per_token_loss, mask, mask.shape[0] * max_completion_length)  # Dr. GRPO
    elif loss_type == "luspo":
        unscaled = masked_sum(per_token_loss, mask, dim=-1).mean()
    elif loss_type in GLOBAL_TOKEN_LOSSES:
        # num_items spans the generation batch on all processes: rescale to one process and window.
        loss = masked_sum(per_token_loss, mask) / (num_items.clamp(min=1.0) / num_processes * window_fraction)
        return loss, loss
    else:
        raise ValueError(f"loss_type={loss_type!r} is unknown; use one of {', '.join(LOSS_TYPES)}")
    return unscaled / accumulation, unscaled


def _seq_min_max(flags: Tensor, mask: Tensor) -> tuple[float, float]:
    """Smallest and largest per-sequence mean of a 0/1 flag tensor, over non-empty rows.

    TRL gives NaN when no row has a valid token; we give 0.0 so that an all-truncated
    batch logs finite numbers.
    """
    if flags.shape[1] == 1:  # one flag per sequence already, every row counts (as in TRL)
        per_seq = flags.squeeze(1)
    else:
        counts = mask.sum(-1)
        per_seq = (masked_sum(flags, mask, dim=-1) / counts.clamp(min=1.0))[counts > 0]
    if per_seq.numel() == 0:
        return 0.0, 0.0
    return per_seq.min().item(), per_seq.max().item()


def token_mean(x: Tensor, mask: Tensor) -> float:
    """Mean over valid tokens; for `(B, 1)` per-sequence values, mean over all rows (TRL)."""
    if x.shape[1] == 1:
        return (x.sum() / max(x.shape[0], 1)).item()
    return (masked_sum(x, mask) / mask.sum().clamp(min=1.0)).item()


@torch.no_grad()
def ratio_metrics(loss_type: str, ratio: Tensor, advantages: Tensor, mask: Tensor, *, epsilon_low: float,
                  epsilon_high: float, gamma: Tensor | None) -> dict[str, float]:
    """The clip statistics each loss type logs, under TRL's names.

    A token counts as clipped only where clipping changes the gradient: the ratio left the
    range in the direction the advantage pushes. SAPO has no clip and logs none.
    """
    if loss_type in CLIPPED_LOSSES:
        is_low = ((ratio < 1 - epsilon_low) & (advantages < 0)).to(mask.dtype)
        is_high = ((ratio > 1 + epsilon_high) & (advantages > 0)).to(mask.dtype)
        low_min, _ = _seq_min_max(is_low, mask)
        _, high_max = _seq_min_max(is_high, mask)
        return {"clip_ratio/low_mean": token_mean(is_low, mask), "clip_ratio/low_min": low_min,
                "clip_ratio/high_mean": token_mean(is_high, mask), "clip_ratio/high_max": high_max,
                "clip_ratio/region_mean": token_mean(torch.maximum(is_low, is_high), mask)}
    if loss_type == "cispo":
        return {"cispo_clip_ratio": token_mean(((ratio > epsilon_high) & (advantages > 0)).to(mask.dtype), mask)}
    if loss_type == "vespo":
        return {"vespo/phi_seq_mean": token_mean(gamma, mask)}
    return {}
