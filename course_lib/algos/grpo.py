"""GRPO: Group Relative Policy Optimization and the variants TRL ships with it.

Everything a lesson on GRPO points at, top to bottom:

1. :class:`GRPOConfig` (in :mod:`course_lib.algos.grpo_config`): the GRPO-only knobs on top
   of the shared :class:`course_lib.config.RLConfig`.
2. :func:`group_advantages`: the group-relative advantage (Shao et al. 2024,
   DeepSeekMath, eq. 3 of outcome supervision), `(r - mean_group) / (std + 1e-4)`, with
   the std of the group, of the whole batch, or none (Dr. GRPO, Liu et al. 2025). Same
   semantics as TRL 1.16: NaN rewards are ignored by the mean and the std, the std is
   Bessel-corrected, and an advantage that is still NaN becomes 0. With several reward
   functions, :func:`multi_objective_advantages` normalises each one first (GDPO).
3. :func:`clipped_surrogate`: PPO's `-min(r A, clip(r, 1 - eps, 1 + eps_high) A)` (Schulman
   et al. 2017, eq. 7) as GRPO uses it (Shao et al. 2024, eq. 3); `LOSSES`, one entry per
   `loss_type` (its surrogate, its averaging, its metrics; the other pieces in
   :mod:`course_lib.algos.grpo_losses`); and :func:`policy_loss`, the one entry point,
   computed as TRL 1.16's `_compute_loss`, with the ratio at token or sequence level (GSPO),
   the k3 KL to a reference (:mod:`course_lib.ops.kl`), the sampler correction and off-policy
   masking (:mod:`course_lib.ops.importance`) and the entropy mask and bonus
   (:mod:`course_lib.ops.entropy`).
4. :class:`GRPO`: the two calls the trainer makes.

Layout: prompt-major, the G completions of a prompt are contiguous, so
`rewards.view(-1, G)` has one row per prompt.

Simplifications vs TRL: with several processes the trainer gathers the rewards before
:func:`group_advantages`, as TRL does, but ``top_entropy_quantile``'s threshold is taken over
this process's micro-batch (TRL gathers every process's entropies first); no MoE auxiliary loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch

from course_lib.algos.base import (
    Advantages,
    Algorithm,
    LossOutput,
    MicroBatch,
    PolicyOutputs,
    ScoredBatch,
    advantage_column,
    check_groups,
    reward_metrics,
)
from course_lib.algos.grpo_config import GRPOConfig, declare_fields_read
from course_lib.algos.grpo_losses import (
    LossContext,
    check_arguments,
    cispo_metrics,
    cispo_surrogate,
    clip_metrics,
    constant_normaliser,
    global_token_mean,
    local_token_mean,
    no_metrics,
    sapo_surrogate,
    sequence_mean,
    sequence_sum,
    token_mean,
    vespo_metrics,
    vespo_surrogate,
)
from course_lib.ops.entropy import AdaptiveEntropyCoef, entropy_bonus, high_entropy_mask
from course_lib.ops.importance import off_policy_sequence_mask
from course_lib.ops.kl import kl_k3
from course_lib.ops.masking import masked_sum
from course_lib.ops.stats import STD_EPS, nanstd
from course_lib.config.validation import field_choices

Tensor = torch.Tensor

__all__ = ["GRPO", "GRPOConfig", "LOSSES", "LOSS_TYPES", "LossType", "clipped_surrogate", "group_advantages",
           "multi_objective_advantages", "policy_loss"]


# ---------------------------------------------------------------------------------------
# 2. Advantages
# ---------------------------------------------------------------------------------------
def _scale_mode(scale_rewards: str | bool) -> str:
    if isinstance(scale_rewards, bool):  # TRL: True means "group", False means "none"
        scale_rewards = "group" if scale_rewards else "none"
    if scale_rewards not in (modes := field_choices(GRPOConfig, "scale_rewards")):
        raise ValueError(f"scale_rewards={scale_rewards!r} is not known. Fix: use {', '.join(map(repr, modes))} "
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


def multi_objective_advantages(per_func: Tensor, weights: Tensor, num_generations: int) -> tuple[Tensor, GroupStats]:
    """Normalise-then-sum advantages for several rewards (GDPO, arXiv 2601.05242; TRL's
    `multi_objective_aggregation="normalize_then_sum"`).

    Each reward function's scores are centred and scaled within each group,
    `(r_k - mean_k) / (std_k + 1e-4)`, then weight-summed; the sum is normalised over the
    whole batch. A reward that spans 0..100 thus cannot drown one that spans 0..1.

    Args:
        per_func: `(B, K)` rewards, NaN where a function did not apply.
        weights: `(K,)` reward weights.
        num_generations: G.

    Returns:
        `(B,)` advantages (0 for completions no function scored) and their `GroupStats`.
    """
    check_groups(per_func[:, 0], num_generations)
    grouped = per_func.view(-1, num_generations, per_func.shape[1])  # (prompts, G, K)
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1).unsqueeze(1) if num_generations > 1 else torch.zeros_like(mean_k)
    normalised = ((grouped - mean_k) / (std_k + STD_EPS)).view_as(per_func)
    rewards = (normalised * weights.to(per_func.dtype)).nansum(dim=1)
    rewards[torch.isnan(per_func).all(dim=1)] = torch.nan  # unscorable: no signal
    std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    advantages = torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std + STD_EPS), nan=0.0)
    mean = torch.nanmean(rewards).expand_as(rewards)
    is_std_zero = torch.isclose(std, torch.zeros_like(std))
    return advantages, GroupStats(mean_grouped=mean, std_grouped=std, is_std_zero=is_std_zero)


# ---------------------------------------------------------------------------------------
# 3. Loss: PPO's clipped surrogate, then one table entry per loss type
# ---------------------------------------------------------------------------------------
def clipped_surrogate(ratio: Tensor, advantages: Tensor, epsilon: float = 0.2, epsilon_high: float | None = None,
                      delta: float | None = None) -> Tensor:
    """PPO's clipped surrogate as GRPO uses it: `-min(r A, clip(r, 1 - eps, 1 + eps_high) A)`.

    Schulman et al. 2017, eq. 7; Shao et al. 2024, eq. 3. `epsilon_high` (None: `epsilon`)
    is DAPO's clip-higher; `delta` caps the unclipped `r` too (two-sided, INTELLECT-2).
    `ratio` is `(B, T)` or `(B, 1)`, `advantages` `(B, 1)` or `(B, T)`; returns the per-token
    loss, to be averaged by the loss type's rule (`LOSSES`).
    """
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    if delta is not None:  # bounds the unclipped branch after the clipped one is formed
        ratio = torch.clamp(ratio, max=delta)
    return -torch.min(ratio * advantages, clipped * advantages)


def _clipped(ratio: Tensor, advantages: Tensor, c: LossContext) -> tuple[Tensor, Tensor]:
    return clipped_surrogate(ratio, advantages, c.epsilon, c.epsilon_high, c.delta), ratio


@dataclass(frozen=True)
class LossType:
    """One `loss_type`: its per-token objective, how it is averaged, what it logs."""

    surrogate: Callable[[Tensor, Tensor, LossContext], tuple[Tensor, Tensor]]
    """`(ratio, A, context) -> ((B, T) or (B, 1) loss, the tensor its metrics count)`."""
    aggregate: Callable[[Tensor, LossContext], tuple[Tensor, Tensor]]
    """`((B, T) loss, context) -> (loss to differentiate, the policy_loss TRL logs)`."""
    metrics: Callable[[Tensor, Tensor, LossContext], dict[str, float]]
    knobs: dict[str, float] = field(default_factory=dict)
    """Its shape parameters and their defaults (each also a `GRPOConfig` field)."""
    level: Literal["token", "sequence"] | None = None
    """The `importance_sampling_level` it is designed for; None: either."""
    own_sampling_correction: bool = False
    """It folds the sampler correction into its own weight instead of multiplying the loss."""
    reads: tuple[str, ...] = ()
    """The clip fields it reads (as TRL 1.16); `GRPOConfig` refuses a non-default value of the others."""


CLIP_FIELDS = ("epsilon", "epsilon_high", "delta")
"""The clipped surrogate's fields; CISPO's cap is `epsilon_high` (default `epsilon`); SAPO, VESPO read none."""


LOSSES: dict[str, LossType] = {
    "grpo": LossType(_clipped, sequence_mean, clip_metrics, reads=CLIP_FIELDS),  # Shao et al. 2024 (length-biased)
    "bnpo": LossType(_clipped, local_token_mean, clip_metrics, reads=CLIP_FIELDS),  # tokens of the local batch
    "dr_grpo": LossType(_clipped, constant_normaliser, clip_metrics, reads=CLIP_FIELDS),  # Dr. GRPO, Liu et al. 2025
    "dapo": LossType(_clipped, global_token_mean, clip_metrics, reads=CLIP_FIELDS),  # DAPO, Yu et al. 2025
    "luspo": LossType(_clipped, sequence_sum, clip_metrics, level="sequence", reads=CLIP_FIELDS),  # arXiv 2602.05261
    "cispo": LossType(cispo_surrogate, global_token_mean, cispo_metrics,  # MiniMax-M1, arXiv 2506.13585
                      reads=("epsilon", "epsilon_high")),
    "sapo": LossType(sapo_surrogate, sequence_mean, no_metrics,  # arXiv 2511.20347
                     knobs={"sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05}),
    "vespo": LossType(vespo_surrogate, global_token_mean, vespo_metrics, level="token",  # arXiv 2602.10693
                      own_sampling_correction=True,
                      knobs={"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0,
                             "vespo_lambda_neg": 2.0}),
}
"""Every loss type of the GRPO family; `GRPOConfig.loss_type`'s `Literal` lists these names."""
AGGREGATION_READS: dict[str, tuple[str, ...]] = {"sum_then_normalize": ("scale_rewards",), "normalize_then_sum": ()}
"""GDPO's normalisation (`multi_objective_advantages`) always divides by a std: no `scale_rewards`."""
declare_fields_read("loss_type", {name: spec.reads for name, spec in LOSSES.items()})
declare_fields_read("multi_objective_aggregation", AGGREGATION_READS)
LOSS_TYPES: tuple[str, ...] = tuple(LOSSES)
CLIPPED_LOSSES: tuple[str, ...] = tuple(name for name, spec in LOSSES.items() if spec.surrogate is _clipped)
KNOBS: dict[str, float] = {name: value for spec in LOSSES.values() for name, value in spec.knobs.items()}
CONFIG_LOSS_FIELDS: tuple[str, ...] = (
    "loss_type", "epsilon", "epsilon_high", "delta", "importance_sampling_level", "beta", "off_policy_mask_threshold",
    "max_completion_length", "gradient_accumulation_steps", "num_processes", "use_bias_correction_kl",
    "top_entropy_quantile", *KNOBS)
"""The `GRPOConfig` fields that `policy_loss` takes under the same name."""


def policy_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: str = "dapo",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: Literal["token", "sequence"] = "token",
    beta: float = 0.0,
    ref_logps: Tensor | None = None,
    sampling_ratio: Tensor | None = None,
    sampling_logps: Tensor | None = None,
    off_policy_mask_threshold: float | None = None,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | Tensor | None = None,
    gradient_accumulation_steps: int = 1,
    steps_per_generation: int | None = None,
    num_processes: int = 1,
    use_bias_correction_kl: bool = True,
    entropies: Tensor | None = None,
    top_entropy_quantile: float = 1.0,
    entropy_coef: float = 0.0,
    training: bool = True,
    **knobs: float,
) -> LossOutput:
    """The GRPO-family loss of one micro-batch, as TRL 1.16's `_compute_loss` computes it.

    Per token, with ratio `r = exp(logps - old_logps)` (or its GSPO sequence version) and
    the completion's advantage `A`:

        loss_t = surrogate_t(r, A) * m_off * m_ent * w_t + beta * k3_t [* r]

    `surrogate_t` is `LOSSES[loss_type].surrogate` (:func:`clipped_surrogate` for grpo, bnpo,
    dr_grpo, dapo and luspo), `m_off` the off-policy sequence mask, `m_ent` the high-entropy
    token mask, `w_t` the sampler correction (VESPO folds it into its own weight instead),
    `[* r]` the `use_bias_correction_kl` factor. The per-token losses are averaged by
    `LOSSES[loss_type].aggregate`, then `entropy_coef * mean entropy` is subtracted. Masked
    tokens never contribute, and the loss, its gradient and every metric are finite even
    when `mask` is all zeros.

    Mapping to TRL (train mode, one process): `old_logps` = `inputs["old_per_token_logps"]`,
    `ref_logps` = `inputs["ref_per_token_logps"]`, `sampling_ratio` =
    `inputs["importance_sampling_ratio"]` (passing it means `use_vllm and
    vllm_importance_sampling_correction`), `sampling_logps` =
    `inputs["sampling_per_token_logps"]`, `num_items_in_batch` = `inputs["num_items_in_batch"]`,
    `gradient_accumulation_steps` = `self.current_gradient_accumulation_steps`,
    `entropy_coef` = the coefficient applied this step (the adaptive controller's gated
    value); every other argument = the config field of the same name (`CONFIG_LOSS_FIELDS`).

    Args:
        logps: `(B, T)` current log-probs, differentiable.
        old_logps: `(B, T)` log-probs at sampling time, or None on-policy (`logps.detach()`).
        advantages: `(B,)` one per completion, or `(B, T)` one per token.
        mask: `(B, T)` 1 for completion tokens that count in the loss.
        loss_type: a key of `LOSSES`.
        epsilon, epsilon_high: clip range `[1 - epsilon, 1 + epsilon_high]`; for `cispo`,
            `epsilon_high` is the cap on the ratio itself (5.0 in ScaleRL).
        delta: optional upper bound on the unclipped ratio (INTELLECT-2).
        importance_sampling_level: "token" or "sequence" (GSPO).
        beta, ref_logps: KL coefficient and `(B, T)` reference log-probs (needed if beta != 0).
        sampling_ratio: `(B, T)` or `(B, 1)` correction weight from
            :func:`course_lib.ops.importance.sampling_correction`.
        sampling_logps, off_policy_mask_threshold: the sampler's `(B, T)` log-probs (the
            old ones when None) and the KL above which negative-advantage completions drop.
        max_completion_length: the normaliser of `dr_grpo` (required for it).
        num_items_in_batch: valid tokens of the whole generation batch (all processes);
            None counts this micro-batch's tokens.
        gradient_accumulation_steps, steps_per_generation, num_processes: the schedule.
        use_bias_correction_kl: multiply the KL term by the ratio (DeepSeek-V3.2).
        entropies: `(B, T)` exact per-token entropies; required by `top_entropy_quantile`
            < 1 and `entropy_coef` != 0 (differentiable for the latter), else only logged.
        top_entropy_quantile: keep only this top fraction of tokens by entropy, in (0, 1].
        entropy_coef: weight of the entropy bonus subtracted from the loss.
        training: TRL's train mode; False gives eval-mode scaling.
        **knobs: the loss types' shape parameters (`KNOBS`: SAPO's temperatures, VESPO's
            k and lambda); those of other loss types are ignored, missing ones default.

    Returns:
        `LossOutput`: `loss` and `metrics`: the loss type's statistics (`clip_ratio/*`,
        `cispo_clip_ratio` or `vespo/phi_seq_mean`), `policy_loss` (before the
        accumulation division and the entropy bonus), `kl` when `beta != 0`, `entropy`
        when `entropies` is given.
    """
    check_arguments(logps, old_logps, mask, loss_type=loss_type, importance_sampling_level=importance_sampling_level,
                    beta=beta, ref_logps=ref_logps, sampling_logps=sampling_logps,
                    max_completion_length=max_completion_length,
                    gradient_accumulation_steps=gradient_accumulation_steps, entropies=entropies,
                    top_entropy_quantile=top_entropy_quantile, entropy_coef=entropy_coef, knobs=knobs, losses=LOSSES)
    spec = LOSSES[loss_type]
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
    if sampling_ratio is not None and sampling_ratio.shape == valid.shape:  # per token; (B, 1) kept as is
        sampling_ratio = torch.where(valid, sampling_ratio, torch.ones_like(sampling_ratio))
    entropy_mask = None
    if top_entropy_quantile < 1.0:
        entropy_mask = high_entropy_mask(entropies, mask, top_entropy_quantile).to(logps.dtype)
    off_policy_mask = None
    if off_policy_mask_threshold is not None:
        reference = old_logps if sampling_logps is None else sampling_logps.masked_fill(~valid, 0.0)
        off_policy_mask = off_policy_sequence_mask(advantages, logps, reference, mask, off_policy_mask_threshold)

    log_ratio = logps - old_logps  # (B, T)
    if importance_sampling_level == "sequence":
        # GSPO: geometric mean of the token ratios of each completion, one weight per row.
        log_weights = (masked_sum(log_ratio, mask, dim=-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    else:
        log_weights = log_ratio
    ratio = torch.exp(log_weights)  # (B, T) or (B, 1)

    steps_per_generation = steps_per_generation or gradient_accumulation_steps
    context = LossContext(
        logps=logps, log_ratio=log_ratio, mask=mask, sampling_ratio=sampling_ratio, epsilon=epsilon,
        epsilon_high=epsilon if epsilon_high is None else epsilon_high, delta=delta,
        accumulation=gradient_accumulation_steps if training else 1, max_completion_length=max_completion_length,
        num_items=torch.as_tensor(mask.sum() if num_items_in_batch is None else num_items_in_batch,
                                  dtype=logps.dtype, device=logps.device),
        num_processes=num_processes,
        window_fraction=gradient_accumulation_steps / steps_per_generation if training else 1.0,
        knobs={name: knobs.get(name, default) for name, default in spec.knobs.items()})
    per_token_loss, counted = spec.surrogate(ratio, advantages, context)
    for factor in (off_policy_mask, entropy_mask, None if spec.own_sampling_correction else sampling_ratio):
        if factor is not None:
            per_token_loss = per_token_loss * factor
    if beta != 0.0:
        per_token_kl = kl_k3(logps, ref_logps)  # (B, T)
        if use_bias_correction_kl:
            per_token_kl = per_token_kl * ratio
        per_token_loss = per_token_loss + beta * per_token_kl
    per_token_loss = per_token_loss.expand(mask.shape)  # (B, T) even for sequence-level losses
    loss, unscaled = spec.aggregate(per_token_loss, context)
    if entropy_coef != 0.0:
        # The bonus acts on the tokens the policy term trains on; a plain token mean, so that
        # entropy_coef means the same for every loss type.
        effective = mask if entropy_mask is None else mask * entropy_mask
        loss = loss - entropy_coef * entropy_bonus(entropies, effective, context.accumulation)

    with torch.no_grad():
        metrics = spec.metrics(counted, advantages, context)
        metrics["policy_loss"] = unscaled.item()
        if beta != 0.0:
            metrics["kl"] = token_mean(per_token_kl, mask)
        if entropies is not None:
            metrics["entropy"] = token_mean(entropies.detach(), mask)
    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_token_loss)


# ---------------------------------------------------------------------------------------
# 4. The algorithm, as the trainer calls it
# ---------------------------------------------------------------------------------------
class GRPO(Algorithm):
    """GRPO for the trainer: group advantages, then :func:`policy_loss` with the config's knobs.

    One instance per run: it holds the entropy coefficient's controller, which counts the
    training micro-batches to know where each optimizer step ends.
    """

    name = "grpo"
    config_class = GRPOConfig
    always_needs_old_logps = False
    sampling_correction_level = "token"

    def __init__(self) -> None:
        self.entropy_control: AdaptiveEntropyCoef | None = None
        self._micro_batches = 0

    def advantages(self, scored: ScoredBatch, config: GRPOConfig) -> Advantages:
        rewards, G = scored.rewards, scored.num_generations
        if config.multi_objective_aggregation == "normalize_then_sum" and scored.rewards_per_func is not None:
            weights = torch.tensor(config.check_reward_weights(scored.rewards_per_func.shape[1]))
            advantages, stats = multi_objective_advantages(scored.rewards_per_func, weights, G)
        else:
            advantages, stats = group_advantages(rewards, G, config.scale_rewards, return_stats=True)
        # frac_reward_zero_std: the std the advantages divided by was 0 (group, batch or GDPO's, as TRL)
        metrics = {**reward_metrics(rewards, G), "frac_reward_zero_std": stats.is_std_zero.float().mean().item()}
        return Advantages(advantages=advantages, metrics=metrics)

    def _entropy_coef(self, config: GRPOConfig) -> AdaptiveEntropyCoef:
        if self.entropy_control is None:
            self.entropy_control = AdaptiveEntropyCoef(
                config.entropy_coef, config.use_adaptive_entropy, config.entropy_coef_min, config.entropy_coef_max,
                config.entropy_coef_delta, config.entropy_target)
        return self.entropy_control

    def state(self) -> dict:
        """What a checkpoint keeps: the adaptive entropy coefficient and its last measurement."""
        return {} if self.entropy_control is None else {"micro_batches": self._micro_batches,
                                                        **self.entropy_control.state()}

    def load_state(self, state: dict, config: GRPOConfig) -> None:
        if "entropy_coef" in state:
            self._entropy_coef(config).load_state(state)
            self._micro_batches = state["micro_batches"]

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config: GRPOConfig,
             num_items_in_batch: int) -> LossOutput:
        control = self._entropy_coef(config)
        out = policy_loss(
            outputs.logps, micro_batch.old_logps, micro_batch.advantages, micro_batch.completion_mask,
            **{name: getattr(config, name) for name in CONFIG_LOSS_FIELDS},
            ref_logps=micro_batch.ref_logps, sampling_ratio=micro_batch.sampling_ratio,
            sampling_logps=micro_batch.sampling_logps, num_items_in_batch=num_items_in_batch,
            steps_per_generation=config.effective_steps_per_generation, entropies=outputs.entropies,
            entropy_coef=control.coef_to_apply())
        if control.enabled and outputs.entropies is not None:
            self._micro_batches += 1
            end_of_step = self._micro_batches % config.gradient_accumulation_steps == 0
            mask = micro_batch.completion_mask
            if config.top_entropy_quantile < 1.0:
                mask = mask * high_entropy_mask(outputs.entropies, mask, config.top_entropy_quantile)
            control.observe(outputs.entropies, mask, end_of_step)
            if end_of_step:
                out.metrics["entropy_coef"] = control.coef
        return out
