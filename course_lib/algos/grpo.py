"""GRPO: Group Relative Policy Optimization and the variants TRL ships with it.

Everything a lesson on GRPO points at, top to bottom:

1. :class:`GRPOConfig`: the GRPO-only knobs (loss aggregation, reward scaling, two-sided
   clipping, sequence-level ratios, the KL bias correction) on top of the shared
   :class:`course_lib.config.RLConfig`.
2. :func:`group_advantages`: the group-relative advantage (Shao et al. 2024,
   DeepSeekMath, eq. 3 of outcome supervision), `(r - mean_group) / (std + 1e-4)`, with
   the std of the group, of the whole batch, or none (Dr. GRPO, Liu et al. 2025). Same
   semantics as TRL 1.16: NaN rewards are ignored by the mean and the std, the std is
   Bessel-corrected, and an advantage that is still NaN becomes 0.
3. :func:`policy_loss`: the clipped surrogate of PPO (Schulman et al. 2017, eq. 7) as GRPO
   uses it for language models (Shao et al. 2024, eq. 3), computed as TRL 1.16's
   `_compute_loss`, with:

   - `epsilon` / `epsilon_high`: asymmetric clipping `[1 - eps, 1 + eps_high]`
     ("clip-higher", DAPO, Yu et al. 2025);
   - `delta`: an upper bound on the unclipped ratio (two-sided clipping, INTELLECT-2);
   - `importance_sampling_level="sequence"`: one ratio per completion, the exponential of
     the mean token log-ratio (GSPO, Zheng et al. 2025);
   - `beta`: the k3 KL penalty to a reference model (:mod:`course_lib.ops.kl`), times the
     ratio with `use_bias_correction_kl` (DeepSeek-V3.2);
   - `sampling_ratio`: the truncated importance-sampling weight of tokens a separate
     engine sampled (TIS, :mod:`course_lib.ops.importance`);
   - `loss_type`: how per-token losses are averaged (grpo, bnpo, dr_grpo, dapo).
4. :class:`GRPO`: the two calls the trainer makes.

Layout: prompt-major, the G completions of a prompt are contiguous, so
`rewards.view(-1, G)` has one row per prompt.

Simplifications vs TRL: single process (TRL gathers rewards across processes before the
same computation); no entropy bonus, entropy-based token masking, off-policy sequence
masking, CISPO/SAPO/VESPO/LUSPO losses or MoE auxiliary loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from course_lib.algos.base import (
    Advantages,
    LossOutput,
    PolicyOutputs,
    ScoredBatch,
    WithoutCritic,
    advantage_column,
    check_groups,
    check_per_token,
)
from course_lib.config import RLConfig, fail, warn
from course_lib.config_tools import to_trl_grpo_config
from course_lib.ops.kl import kl_k3
from course_lib.ops.masking import masked_sum
from course_lib.ops.stats import STD_EPS, nanstd

Tensor = torch.Tensor

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = ("token", "sequence")
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")


# ---------------------------------------------------------------------------------------
# 1. Config
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GRPOConfig(RLConfig):
    """Group Relative Policy Optimization (Shao et al. 2024) and its variants (DAPO, Dr. GRPO,
    GSPO, two-sided clipping)."""

    algo: ClassVar[str] = "grpo"

    delta: float | None = None
    """Two-sided GRPO: cap the ratio at delta also for negative advantages (INTELLECT-2, Prime
    Intellect 2025); use > 1 + epsilon; None disables."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """One ratio per token, or one per sequence (geometric mean of the token ratios, GSPO, Zheng et
    al. 2025)."""
    scale_rewards: Literal["group", "batch", "none"] | bool = "group"
    """Divide advantages by the std of the group (`group`/True, GRPO), of the whole batch (`batch`,
    PPO-Lite / Tricks or Traps, Liu et al. 2025) or not at all (`none`/False, Dr. GRPO, Liu et
    al. 2025: std scaling biases toward too-easy and too-hard prompts)."""
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    """Token aggregation: `grpo` per-sequence mean (length bias, not advised), `bnpo` tokens of the
    local batch, `dr_grpo` constant max_completion_length (Dr. GRPO), `dapo` tokens of the whole
    accumulated batch (DAPO)."""
    use_bias_correction_kl: bool = True
    """Multiply the KL term by the importance ratio so that its gradient is the unbiased
    reverse-KL gradient (DeepSeek-V3.2; TRL 1.16's default). On-policy the value is unchanged
    but the gradient gains `beta * k3` per token."""

    def _normalize(self) -> None:
        super()._normalize()
        if isinstance(self.scale_rewards, bool):  # TRL: True == "group", False == "none"
            self._set("scale_rewards", "group" if self.scale_rewards else "none")

    def _check_choices(self) -> None:
        super()._check_choices()
        for name, allowed in (("loss_type", LOSS_TYPES), ("importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS),
                              ("scale_rewards", SCALE_REWARDS)):
            if getattr(self, name) not in allowed:
                fail(name, getattr(self, name), "is not a known choice", f"use one of {', '.join(allowed)}")

    def _check_ranges(self) -> None:
        super()._check_ranges()
        if self.delta is not None and self.delta <= 1.0:
            fail("delta", self.delta, "caps the ratio at or below 1, so even on-policy tokens with a negative "
                 "advantage would get no gradient", "use delta > 1 + epsilon (INTELLECT-2) or None")

    def _warn_risky(self) -> None:
        super()._warn_risky()
        if self.importance_sampling_level == "sequence" and self.loss_type in ("bnpo", "dr_grpo", "dapo"):
            # Same condition as TRL's GRPOTrainer warning.
            warn(f"importance_sampling_level='sequence' with loss_type={self.loss_type!r} sums per-token terms, "
                 "so each sequence weighs as much as its length; GSPO's objective is loss_type='grpo'.")
        if self.delta is not None and self.delta <= 1 + self.epsilon:
            warn(f"delta={self.delta} <= 1 + epsilon = {1 + self.epsilon}: INTELLECT-2 recommends delta > 1 + "
                 "epsilon, otherwise the upper cap clips tokens the ordinary PPO clip would keep.")

    def to_trl_grpo_config(self, **extra):
        """The equivalent `trl.GRPOConfig` (single process), for parity checks."""
        return to_trl_grpo_config(self, **extra)


# ---------------------------------------------------------------------------------------
# 2. Advantages
# ---------------------------------------------------------------------------------------
def _scale_mode(scale_rewards: str | bool) -> str:
    if isinstance(scale_rewards, bool):  # TRL: True means "group", False means "none"
        scale_rewards = "group" if scale_rewards else "none"
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards={scale_rewards!r} is not known. Fix: use 'group', 'batch' or 'none' "
                         "(True means 'group', False means 'none').")
    return scale_rewards


@dataclass(frozen=True)
class GroupStats:
    """Per-completion statistics behind the advantages, shape (B,) each (for logging)."""

    mean_grouped: Tensor
    """Mean reward of the completion's group."""
    std_grouped: Tensor
    """The std used for scaling: the group's, or the batch's for `scale_rewards="batch"`."""
    is_std_zero: Tensor
    """True where that std is 0 (all rewards equal): such groups give no learning signal.
    `is_std_zero.float().mean()` is TRL's `frac_reward_zero_std`."""


def group_advantages(
    rewards: Tensor,
    num_generations: int,
    scale_rewards: str | bool = "group",
    return_stats: bool = False,
) -> Tensor | tuple[Tensor, GroupStats]:
    """GRPO advantages `(r_i - mean(r_group)) / (std + 1e-4)`.

    Args:
        rewards: `(B,)` combined reward per completion, prompt-major; NaN = unscorable.
        num_generations: completions per prompt G; B must be a multiple.
        scale_rewards: `"group"` (or True): std of each group (GRPO); `"batch"`: one std
            over all B rewards, the mean stays per group; `"none"` (or False): no
            division (Dr. GRPO).
        return_stats: also return a `GroupStats`.

    Returns:
        `(B,)` advantages; completions whose advantage is undefined (NaN reward, or a
        group with a single scorable completion under std scaling) get 0.
    """
    check_groups(rewards, num_generations)
    mode = _scale_mode(scale_rewards)
    grouped = rewards.view(-1, num_generations)  # (num_prompts, G)
    mean_grouped = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)  # (B,)
    if mode == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    elif num_generations > 1:  # "group", and "none" (std only reported)
        std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
    else:
        std = torch.zeros_like(rewards)
    advantages = rewards - mean_grouped
    if mode != "none":
        advantages = advantages / (std + STD_EPS)
    advantages = torch.nan_to_num(advantages, nan=0.0)
    if not return_stats:
        return advantages
    stats = GroupStats(mean_grouped=mean_grouped, std_grouped=std,
                       is_std_zero=torch.isclose(std, torch.zeros_like(std)))
    return advantages, stats


# ---------------------------------------------------------------------------------------
# 3. Loss
# ---------------------------------------------------------------------------------------
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
            (`course_lib.ops.importance.truncated_is_ratio`), multiplied into the per-token loss.
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
    check_per_token(logps, mask, old_logps=old_logps, ref_logps=ref_logps)
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
    advantages = advantage_column(advantages.to(logps.dtype), logps.shape[0])  # (B, 1) or (B, T)
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


# ---------------------------------------------------------------------------------------
# 4. The algorithm, as the trainer calls it
# ---------------------------------------------------------------------------------------
class GRPO(WithoutCritic):
    """GRPO for the trainer: group advantages, then :func:`policy_loss` with the config's knobs."""

    name = "grpo"
    config_class = GRPOConfig
    always_needs_old_logps = False
    sampling_correction_level = "token"

    def advantages(self, scored: ScoredBatch, config: GRPOConfig) -> Advantages:
        rewards, G = scored.rewards, scored.num_generations
        advantages, stats = group_advantages(rewards, G, config.scale_rewards, return_stats=True)
        metrics = {
            "reward": torch.nanmean(rewards).item(),
            # TRL's reward_std: the std of each group, averaged (what the advantages divide by).
            "reward_std": torch.nanmean(nanstd(rewards.view(-1, G), dim=1).nan_to_num(0.0)).item(),
            "frac_reward_zero_std": stats.is_std_zero.float().mean().item(),
        }
        return Advantages(advantages=advantages, metrics=metrics)

    def loss(self, micro_batch: dict, outputs: PolicyOutputs, config: GRPOConfig,
             num_items_in_batch: int) -> LossOutput:
        return policy_loss(
            outputs.logps, micro_batch["old_logps"], micro_batch["advantages"], micro_batch["completion_mask"],
            loss_type=config.loss_type, epsilon=config.epsilon, epsilon_high=config.epsilon_high,
            delta=config.delta, importance_sampling_level=config.importance_sampling_level, beta=config.beta,
            ref_logps=micro_batch["ref_logps"], sampling_ratio=micro_batch["sampling_ratio"],
            max_completion_length=config.max_completion_length, num_items_in_batch=num_items_in_batch,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            steps_per_generation=config.effective_steps_per_generation, num_processes=config.num_processes,
            use_bias_correction_kl=config.use_bias_correction_kl, entropies=outputs.entropies)
