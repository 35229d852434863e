"""The pieces by which the GRPO family's loss types differ: their surrogates, averagings and metrics.

The table that joins them, one entry per `loss_type`, is `LOSSES` in
:mod:`course_lib.algos.grpo`, beside PPO's clipped surrogate that most entries use. With `r`
the importance ratio (per token, or one per completion under GSPO's sequence level) and `A`
the advantage:

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

Averagings: per sequence then over sequences (`sequence_mean`: grpo, sapo); over the local
batch's tokens (`local_token_mean`: bnpo); over `B * max_completion_length`
(`constant_normaliser`: dr_grpo); over the tokens of the whole generation batch
(`global_token_mean`: dapo, cispo, vespo); each sequence's sum, averaged over sequences
(`sequence_sum`: luspo, Length-Unbiased Sequence Policy Optimization, arXiv 2602.05261:
GSPO's sequence loss scaled by the sequence's length).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from course_lib.algos.base import check_per_token, clip_flags
from course_lib.algos.grpo_config import GRPOConfig
from course_lib.ops.masking import masked_normalize, masked_sum
from course_lib.config.validation import field_choices

Tensor = torch.Tensor

# exp(-18.42) = 1e-8: the floor of VESPO's log-weights (the weight of a vanishing ratio).
_LOG_FLOOR = math.log(1e-8)


@dataclass(frozen=True)
class LossContext:
    """What a loss type's surrogate, averaging and metrics may read besides `(ratio, A)`.

    Tensors: `logps`, `log_ratio` and `mask` are `(B, T)`; `sampling_ratio` is `(B, T)`,
    `(B, 1)` or None; `num_items` is a 0-d tensor (valid tokens of the generation batch,
    all processes). `knobs` holds the loss types' shape parameters by name.
    """

    logps: Tensor
    log_ratio: Tensor
    mask: Tensor
    sampling_ratio: Tensor | None
    epsilon: float
    epsilon_high: float
    delta: float | None
    accumulation: int
    max_completion_length: int | None
    num_items: Tensor
    num_processes: int
    window_fraction: float
    knobs: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Surrogates: (ratio, advantages, context) -> (per-token loss, what the metrics count)
# ---------------------------------------------------------------------------------------
def cispo_surrogate(ratio: Tensor, advantages: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    """CISPO: the ratio capped at `epsilon_high` and detached, times `A * log pi`."""
    weight = torch.clamp(ratio, max=c.epsilon_high).detach()
    return -weight * advantages * c.logps, ratio


def sapo_surrogate(ratio: Tensor, advantages: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    """SAPO: `-sigmoid(tau (r - 1)) * 4 / tau * A`, tau_pos where A > 0, else tau_neg."""
    tau = torch.where(advantages > 0, c.knobs["sapo_temperature_pos"], c.knobs["sapo_temperature_neg"])
    return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * advantages, ratio


def vespo_surrogate(ratio: Tensor, advantages: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    """VESPO: `-phi(w) * A * log pi`; the metrics count `phi`, `(B, 1)`."""
    k = c.knobs
    gamma = vespo_weights(advantages, c.log_ratio, c.mask, c.sampling_ratio, k_pos=k["vespo_k_pos"],
                          lambda_pos=k["vespo_lambda_pos"], k_neg=k["vespo_k_neg"],
                          lambda_neg=k["vespo_lambda_neg"])
    return -gamma * advantages * c.logps, gamma


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


# ---------------------------------------------------------------------------------------
# Averagings: (B, T) per-token losses -> (loss to differentiate, `policy_loss` as TRL logs it)
# ---------------------------------------------------------------------------------------
# `accumulation` divides the per-sequence and per-batch means (1 outside training); the
# global-token mean divides by `num_items / num_processes * window_fraction` instead.
def sequence_mean(per_token_loss: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    unscaled = (masked_sum(per_token_loss, c.mask, dim=-1) / c.mask.sum(-1).clamp(min=1.0)).mean()
    return unscaled / c.accumulation, unscaled


def local_token_mean(per_token_loss: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    unscaled = masked_sum(per_token_loss, c.mask) / c.mask.sum().clamp(min=1.0)
    return unscaled / c.accumulation, unscaled


def constant_normaliser(per_token_loss: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    """Dr. GRPO: divide by `B * max_completion_length`, whatever the lengths."""
    unscaled = masked_normalize(per_token_loss, c.mask, c.mask.shape[0] * c.max_completion_length)
    return unscaled / c.accumulation, unscaled


def sequence_sum(per_token_loss: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    unscaled = masked_sum(per_token_loss, c.mask, dim=-1).mean()
    return unscaled / c.accumulation, unscaled


def global_token_mean(per_token_loss: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    # num_items spans the generation batch on all processes: rescale to one process and window.
    loss = masked_sum(per_token_loss, c.mask) / (c.num_items.clamp(min=1.0) / c.num_processes * c.window_fraction)
    return loss, loss


# ---------------------------------------------------------------------------------------
# Metrics: the statistics each loss type logs, under TRL's names
# ---------------------------------------------------------------------------------------
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


def clip_metrics(ratio: Tensor, advantages: Tensor, c: LossContext) -> dict[str, float]:
    """A token counts as clipped only where clipping changes the gradient: the ratio (after
    `delta`'s cap) left the range in the direction the advantage pushes."""
    if c.delta is not None:
        ratio = torch.clamp(ratio, max=c.delta)
    mask = c.mask
    is_low, is_high = clip_flags(ratio, advantages, c.epsilon, c.epsilon_high, mask.dtype)
    low_min, _ = _seq_min_max(is_low, mask)
    _, high_max = _seq_min_max(is_high, mask)
    return {"clip_ratio/low_mean": token_mean(is_low, mask), "clip_ratio/low_min": low_min,
            "clip_ratio/high_mean": token_mean(is_high, mask), "clip_ratio/high_max": high_max,
            "clip_ratio/region_mean": token_mean(torch.maximum(is_low, is_high), mask)}


def cispo_metrics(ratio: Tensor, advantages: Tensor, c: LossContext) -> dict[str, float]:
    clipped = ((ratio > c.epsilon_high) & (advantages > 0)).to(c.mask.dtype)
    return {"cispo_clip_ratio": token_mean(clipped, c.mask)}


def vespo_metrics(gamma: Tensor, advantages: Tensor, c: LossContext) -> dict[str, float]:
    return {"vespo/phi_seq_mean": token_mean(gamma, c.mask)}


def no_metrics(stat: Tensor, advantages: Tensor, c: LossContext) -> dict[str, float]:
    """SAPO has no clip and logs none."""
    return {}


# ---------------------------------------------------------------------------------------
# policy_loss's argument checks
# ---------------------------------------------------------------------------------------
def check_arguments(logps, old_logps, mask, *, loss_type, importance_sampling_level, beta, ref_logps,
                    sampling_logps, max_completion_length, gradient_accumulation_steps, entropies,
                    top_entropy_quantile, entropy_coef, knobs, losses) -> None:
    """Refuse `policy_loss`'s bad arguments, naming the argument and the fix (`losses`: the
    loss-type table of :mod:`course_lib.algos.grpo`)."""
    check_per_token(logps, mask, old_logps=old_logps, ref_logps=ref_logps, sampling_logps=sampling_logps,
                    entropies=entropies)
    if loss_type not in losses:
        raise ValueError(f"loss_type={loss_type!r} is unknown; use one of {', '.join(losses)}")
    known = {name for spec in losses.values() for name in spec.knobs}
    if unknown := sorted(set(knobs) - known):
        raise ValueError(f"policy_loss got unknown argument(s) {', '.join(unknown)}; the loss types' shape "
                         f"parameters are {', '.join(sorted(known))}")
    if importance_sampling_level not in (levels := field_choices(GRPOConfig, "importance_sampling_level")):
        raise ValueError(f"importance_sampling_level={importance_sampling_level!r}; use one of {', '.join(levels)}")
    if beta != 0.0 and ref_logps is None:
        raise ValueError(f"beta={beta} needs ref_logps (the reference model's log-probs); "
                         "pass ref_logps or set beta=0.0")
    if losses[loss_type].aggregate is constant_normaliser and max_completion_length is None:
        raise ValueError(f"loss_type={loss_type!r} needs max_completion_length (its normaliser)")
    if gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps={gradient_accumulation_steps} must be >= 1")
    if entropies is None and (top_entropy_quantile < 1.0 or entropy_coef != 0.0):
        raise ValueError("top_entropy_quantile < 1 and entropy_coef != 0 need entropies: pass the policy's "
                         "(B, T) entropies (completion_forward(..., with_entropy=True))")
