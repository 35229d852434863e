"""Clipped policy-gradient losses of the GRPO family.

`policy_loss` implements the surrogate objective of PPO (Schulman et al. 2017, eq. 7)
as GRPO uses it for language models (Shao et al. 2024, eq. 3), with the variants that
TRL's `GRPOTrainer` exposes, computed the same way as TRL 1.16's `_compute_loss`:

- `epsilon` / `epsilon_high`: asymmetric clipping range `[1 - eps, 1 + eps_high]`
  ("clip-higher", DAPO, Yu et al. 2025).
- `delta`: an upper bound on the unclipped ratio, so that a negative advantage with a
  huge ratio cannot blow up the loss ("two-sided" clipping, INTELLECT-2, 2025).
- `importance_sampling_level="sequence"`: one ratio per completion, the exponential of
  the mean token log-ratio (GSPO, Zheng et al. 2025).
- `beta`: the k3 KL penalty to a reference model (see `course_lib.kl`).
- `sampling_ratio`: the truncated importance-sampling weight of the tokens that an
  inference engine sampled (TIS).
- `loss_type`: how the per-token losses are averaged (grpo, bnpo, dr_grpo, dapo).

Simplifications vs TRL: no entropy bonus, entropy-based token masking, off-policy
sequence masking, CISPO/SAPO/VESPO/LUSPO losses or MoE auxiliary loss; metrics are
computed for one process (TRL also reduces them across processes).

The RLOO and PPO losses live in `course_lib.ppo_losses`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from course_lib.kl import kl_k1, kl_k2, kl_k3, truncated_is_ratio  # noqa: F401  (re-exported)
from course_lib.masking import masked_sum

Tensor = torch.Tensor

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")


@dataclass
class LossOutput:
    """Result of a loss function.

    Attributes:
        loss: scalar to call `.backward()` on (already scaled for gradient accumulation
            where the loss type says so).
        metrics: detached numbers to log, named as TRL names them.
        per_token_loss: the per-token (or per-sequence) loss before aggregation, for
            inspection and plots; `None` where not meaningful.
    """

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    per_token_loss: Tensor | None = None


def _check_inputs(logps: Tensor, mask: Tensor, **others: Tensor | None) -> None:
    if logps.dim() != 2:
        raise ValueError(f"logps must be (B, T), got shape {tuple(logps.shape)}")
    if mask.shape != logps.shape:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)} but logps has {tuple(logps.shape)}; "
            "pass the (B, T) completion mask"
        )
    for name, tensor in others.items():
        if tensor is not None and tensor.shape != logps.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but logps has {tuple(logps.shape)}; "
                f"{name} must be per token, (B, T)"
            )


def _as_column(advantages: Tensor, batch_size: int) -> Tensor:
    """Advantages `(B,)` -> `(B, 1)` so they broadcast over tokens; `(B, T)` is kept."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    if advantages.dim() != 2 or advantages.shape[0] != batch_size:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}; pass one advantage per "
            f"completion, shape ({batch_size},), or per token, shape ({batch_size}, T)"
        )
    return advantages


def _seq_min_max(flags: Tensor, mask: Tensor, sequence_level: bool) -> tuple[float, float]:
    """Smallest and largest per-sequence mean of a 0/1 flag tensor, over non-empty rows.

    TRL logs `clip_ratio/low_min` and `clip_ratio/high_max` this way. TRL gives NaN when
    no row has a valid token; we give 0.0 so that an all-truncated batch logs finite
    numbers.
    """
    if sequence_level:  # one flag per sequence already, every row counts (as in TRL)
        per_seq = flags.squeeze(1)
    else:
        counts = mask.sum(-1)
        per_seq = masked_sum(flags, mask, dim=-1) / counts.clamp(min=1.0)
        per_seq = per_seq[counts > 0]
    if per_seq.numel() == 0:
        return 0.0, 0.0
    return per_seq.min().item(), per_seq.max().item()


def _token_mean(x: Tensor, mask: Tensor, sequence_level: bool) -> float:
    """Mean over valid tokens; for `(B, 1)` per-sequence values, mean over all rows (TRL)."""
    if sequence_level and x.shape[1] == 1:
        return (x.sum() / max(x.shape[0], 1)).item()
    return (masked_sum(x, mask) / mask.sum().clamp(min=1.0)).item()


def policy_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: LossType = "dapo",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: Literal["token", "sequence"] = "token",
    beta: float = 0.0,
    ref_logps: Tensor | None = None,
    sampling_ratio: Tensor | None = None,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | Tensor | None = None,
    gradient_accumulation_steps: int = 1,
    steps_per_generation: int | None = None,
    num_processes: int = 1,
    use_bias_correction_kl: bool = True,
    entropies: Tensor | None = None,
    training: bool = True,
) -> LossOutput:
    """Clipped surrogate loss of GRPO and its variants, as TRL 1.16 computes it.

    Per token, with ratio `r = exp(logps - old_logps)` (or its GSPO sequence version) and
    the completion's advantage `A`:

        loss_t = -min(min(r, delta) * A, clip(r, 1 - eps, 1 + eps_high) * A) * w_t
                 + beta * k3_t [* r]

    where `w_t` is `sampling_ratio` (1 without TIS) and `[* r]` is
    `use_bias_correction_kl`. The per-token losses are then averaged by `loss_type`:

    - `grpo`: mean over each sequence's valid tokens, then over sequences (GRPO
      paper; favours short answers when A > 0, Dr. GRPO's "length bias").
    - `bnpo`: sum over the local batch / number of valid tokens in the local batch.
    - `dr_grpo`: sum / (B * max_completion_length) (Dr. GRPO, Liu et al. 2025).
    - `dapo`: sum / (valid tokens of the whole generation batch, per process and per
      accumulation window) (DAPO, token-level normalisation).

    grpo, bnpo and dr_grpo are divided by `gradient_accumulation_steps`; dapo's
    normaliser already spans the accumulation window. Masked tokens never contribute, and
    the loss, its gradient and every metric are finite even when `mask` is all zeros.

    Mapping to TRL (`GRPOTrainer._compute_loss`, train mode, one process):
    `logps` = what `_get_per_token_logps_and_entropies` returns, `old_logps` =
    `inputs["old_per_token_logps"]`, `ref_logps` = `inputs["ref_per_token_logps"]`,
    `sampling_ratio` = `inputs["importance_sampling_ratio"]` (passing it means
    `use_vllm and vllm_importance_sampling_correction`), `num_items_in_batch` =
    `inputs["num_items_in_batch"]`, `gradient_accumulation_steps` =
    `self.current_gradient_accumulation_steps`, `steps_per_generation` =
    `args.steps_per_generation`, `num_processes` = `accelerator.num_processes`,
    `max_completion_length` = `args.max_completion_length`, `epsilon` /
    `epsilon_high` / `delta` / `beta` / `use_bias_correction_kl` = the config fields of
    the same names.

    Args:
        logps: `(B, T)` log-probs of the completion tokens under the current policy;
            the loss is differentiable with respect to it.
        old_logps: `(B, T)` log-probs under the policy that generated the batch, or
            `None` for on-policy (`logps.detach()` is used, so the ratio is 1 with the
            gradient of `log pi`).
        advantages: `(B,)` one per completion, or `(B, T)` one per token.
        mask: `(B, T)` 1 for completion tokens that count in the loss.
        loss_type: "grpo", "bnpo", "dr_grpo" or "dapo".
        epsilon: lower clipping range (and upper one when `epsilon_high` is None).
        epsilon_high: upper clipping range; DAPO recommends 0.28.
        delta: optional upper bound on the unclipped ratio; recommended > 1 + epsilon.
        importance_sampling_level: "token" (one ratio per token) or "sequence" (GSPO).
        beta: KL coefficient; 0 disables the KL term and the need for `ref_logps`.
        ref_logps: `(B, T)` reference-model log-probs; required when `beta != 0`.
        sampling_ratio: `(B, T)` or `(B, 1)` TIS weight, already truncated
            (`course_lib.kl.truncated_is_ratio`), multiplied into the per-token loss.
        max_completion_length: the normaliser of `dr_grpo` (required for it).
        num_items_in_batch: valid tokens of the whole generation batch, summed over
            processes (TRL's `num_items_in_batch`); `None` counts this batch's tokens
            (`mask.sum()`), right when this micro-batch is the whole generation batch.
        gradient_accumulation_steps: micro-batches per optimizer step.
        steps_per_generation: micro-batches per generation batch; defaults to
            `gradient_accumulation_steps` (TRL's default).
        num_processes: data-parallel processes.
        use_bias_correction_kl: multiply the KL term by the (unclipped) ratio, TRL
            1.16's default (DeepSeek-V3.2). On-policy the ratio is 1, so the value is
            unchanged, but its gradient adds `beta * k3` per token.
        entropies: optional `(B, T)` per-token entropies, only logged (`entropy`).
        training: TRL's train mode; `False` gives eval-mode scaling (no division by
            the accumulation steps).

    Returns:
        `LossOutput` with `loss` (scalar) and `metrics`: `clip_ratio/low_mean`,
        `clip_ratio/low_min`, `clip_ratio/high_mean`, `clip_ratio/high_max`,
        `clip_ratio/region_mean`, `policy_loss` (the loss before the division by
        `gradient_accumulation_steps`; for dapo the loss itself, as TRL logs it),
        `kl` when `beta != 0`, `entropy` when `entropies` is given.
    """
    _check_inputs(logps, mask, old_logps=old_logps, ref_logps=ref_logps)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type={loss_type!r} is unknown; use one of {LOSS_TYPES}")
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError(
            f"importance_sampling_level={importance_sampling_level!r}; use 'token' or 'sequence'"
        )
    if beta != 0.0 and ref_logps is None:
        raise ValueError(f"beta={beta} needs ref_logps (the reference model's log-probs); "
                         "pass ref_logps or set beta=0.0")
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("loss_type='dr_grpo' needs max_completion_length (its normaliser)")
    if gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps={gradient_accumulation_steps} must be >= 1")

    epsilon_low = epsilon
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    steps_per_generation = steps_per_generation or gradient_accumulation_steps
    sequence_level = importance_sampling_level == "sequence"
    valid = mask != 0
    mask = mask.to(logps.dtype)
    advantages = _as_column(advantages.to(logps.dtype), logps.shape[0])  # (B, 1) or (B, T)
    if old_logps is None:  # on-policy: ratio 1, gradient of log pi
        old_logps = logps.detach()
    # Padded positions may hold anything (-inf, NaN, stale values). Zero them before any
    # exponential so that no inf * 0 = NaN can reach the loss, its gradient or a metric.
    logps = logps.masked_fill(~valid, 0.0)
    old_logps = old_logps.masked_fill(~valid, 0.0)
    if ref_logps is not None:
        ref_logps = ref_logps.masked_fill(~valid, 0.0)
    if sampling_ratio is not None:
        sampling_ratio = torch.where(valid, sampling_ratio, torch.ones_like(sampling_ratio))

    log_ratio = logps - old_logps  # (B, T)
    if sequence_level:
        # GSPO: geometric mean of the token ratios of each completion, one weight per row.
        token_counts = mask.sum(-1).clamp(min=1.0)
        log_weights = (masked_sum(log_ratio, mask, dim=-1) / token_counts).unsqueeze(-1)  # (B, 1)
    else:
        log_weights = log_ratio  # (B, T)
    ratio = torch.exp(log_weights)

    if beta != 0.0:
        per_token_kl = kl_k3(logps, ref_logps)  # (B, T)
        if use_bias_correction_kl:
            per_token_kl = per_token_kl * ratio

    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:
        # Two-sided clipping bounds the unclipped branch too; it is applied after the
        # clipped branch is formed, and the clip metrics below see the bounded ratio.
        ratio = torch.clamp(ratio, max=delta)
    per_token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
    if sampling_ratio is not None:
        per_token_loss = per_token_loss * sampling_ratio
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    per_token_loss = per_token_loss.expand(mask.shape)  # (B, T) even for GSPO

    accumulation = gradient_accumulation_steps if training else 1
    if loss_type == "grpo":
        per_sequence = masked_sum(per_token_loss, mask, dim=-1) / mask.sum(-1).clamp(min=1.0)
        unscaled = per_sequence.mean()
        loss = unscaled / accumulation
    elif loss_type == "bnpo":
        unscaled = masked_sum(per_token_loss, mask) / mask.sum().clamp(min=1.0)
        loss = unscaled / accumulation
    elif loss_type == "dr_grpo":
        unscaled = masked_sum(per_token_loss, mask) / (mask.shape[0] * max_completion_length)
        loss = unscaled / accumulation
    else:  # dapo
        if num_items_in_batch is None:
            num_items_in_batch = mask.sum()
        num_items = torch.as_tensor(num_items_in_batch, dtype=logps.dtype, device=logps.device)
        # num_items spans the generation batch on all processes: rescale to the tokens of
        # one process and one accumulation window.
        normaliser = num_items.clamp(min=1.0) / num_processes
        if training:
            normaliser = normaliser * gradient_accumulation_steps / steps_per_generation
        loss = masked_sum(per_token_loss, mask) / normaliser
        unscaled = loss

    with torch.no_grad():
        # Clip statistics: a token counts as clipped only where clipping changes the
        # gradient, i.e. the ratio left the range in the direction the advantage pushes.
        is_low = ((ratio < 1 - epsilon_low) & (advantages < 0)).to(logps.dtype)
        is_high = ((ratio > 1 + epsilon_high) & (advantages > 0)).to(logps.dtype)
        is_region = torch.maximum(is_low, is_high)
        low_min, _ = _seq_min_max(is_low, mask, sequence_level)
        _, high_max = _seq_min_max(is_high, mask, sequence_level)
        metrics: dict[str, float] = {
            "clip_ratio/low_mean": _token_mean(is_low, mask, sequence_level),
            "clip_ratio/low_min": low_min,
            "clip_ratio/high_mean": _token_mean(is_high, mask, sequence_level),
            "clip_ratio/high_max": high_max,
            "clip_ratio/region_mean": _token_mean(is_region, mask, sequence_level),
            "policy_loss": unscaled.item(),
        }
        if beta != 0.0:
            metrics["kl"] = _token_mean(per_token_kl, mask, sequence_level=False)
        if entropies is not None:
            metrics["entropy"] = _token_mean(entropies, mask, sequence_level=False)

    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_token_loss)


def __getattr__(name: str):
    # The RLOO / PPO / value losses live in `ppo_losses` (which imports this module);
    # resolve them lazily so `from course_lib.losses import rloo_policy_loss` works too.
    if name in ("rloo_policy_loss", "ppo_policy_loss", "value_loss"):
        from course_lib import ppo_losses

        return getattr(ppo_losses, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
