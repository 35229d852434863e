"""RLOO: REINFORCE Leave-One-Out, with the Reinforce++ options.

Everything a lesson on RLOO points at, top to bottom:

1. :class:`RLOOConfig`: K completions per prompt (`rloo_k`), the KL penalty in the reward
   (`kl_coef`), PPO epochs, and the Reinforce++ switches (Hu 2025).
2. :func:`rloo_advantages`: the baseline of a completion is the mean reward of the *other*
   K - 1 completions of its prompt (Kool et al. 2019; Ahmadian et al. 2024, "Back to
   Basics"); the Reinforce++ helpers :func:`normalize_rewards`, :func:`clip_rewards`,
   :func:`normalize_advantages`; the layout translation of TRL's old docs
   (generation-major) to ours (prompt-major).
3. :func:`rloo_policy_loss`: the whole completion is one action; PPO's clipped surrogate
   (Schulman et al. 2017, eq. 7) on the sequence ratio, as TRL 1.16's RLOOTrainer.
4. :class:`RLOO`: the two calls the trainer makes. The KL to the reference is folded into
   the reward by :func:`course_lib.algos.onpolicy.kl_penalized_rewards`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from course_lib.algos.base import (
    Advantages,
    Algorithm,
    LossOutput,
    MicroBatch,
    PolicyOutputs,
    ScoredBatch,
    check_cliprange,
    check_groups,
    clip_flags,
    entropy_metrics,
    reward_metrics,
)
from course_lib.algos.onpolicy import OnPolicyConfig, _alias, kl_penalized_rewards, penalize_missing_eos
from course_lib.config import fail
from course_lib.ops.masking import masked_sum, masked_var
from course_lib.ops.stats import standardize

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------
# 1. Config
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RLOOConfig(OnPolicyConfig):
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics") with the Reinforce++ options
    (Hu 2025)."""

    algo: ClassVar[str] = "rloo"
    ALIASES: ClassVar[dict[str, str]] = {**OnPolicyConfig.ALIASES, "rloo_k": "num_generations",
                                         "normalize_advantages": "normalize_advantage"}

    num_generations: int = 2
    """Completions per prompt, K of RLOO (`rloo_k`, default 2); the baseline of each is the mean of
    the other K - 1."""
    num_iterations: int = 1
    """Passes over each generation batch (`num_ppo_epochs`): 1, TRL 1.16's RLOOConfig default, so that
    RLOO is on-policy REINFORCE with a leave-one-out baseline like GRPO's default. The older
    RLOOTrainer's 4 is the preset `older_trl_rloo` (`course_lib.presets.NAMED`)."""
    temperature: float = 1.0
    """Sampling temperature: 1.0, TRL 1.16's RLOOConfig default (the older trainer's 0.7 is in the
    preset `older_trl_rloo`)."""
    token_level_kl: bool = False
    """Reinforce++ (Hu 2025, eq. 1): KL penalty per token instead of summed per sequence. Only False
    is accepted: RLOO gives one advantage per completion, the sum of its token rewards, which is the
    same number either way (True matters only with a per-token return, as PPO's). False as in the
    older RLOOTrainer's code signature; its parameter list says True, which contradicts it."""
    normalize_reward: bool = False
    """Reinforce++: standardise the scores over the batch, then clip them to +-reward_clip_range."""
    reward_clip_range: float = 10.0
    """Reinforce++: clip range applied to the normalised scores, only with normalize_reward (the older
    RLOOTrainer's meaning). TRL 1.16's field of the same name is a `(min, max)` pair on the raw rewards,
    default None; that form is refused here with a message that says so."""
    normalize_advantage: bool = False
    """Reinforce++: standardise the advantages over the batch to mean 0, std 1."""

    rloo_k = _alias("num_generations", "The older RLOOConfig's name of `num_generations`.")

    def __post_init__(self) -> None:
        if isinstance(self.reward_clip_range, (tuple, list)):  # before the type check, which would only say "not float"
            fail("reward_clip_range", self.reward_clip_range,
                 "is TRL 1.16's spelling, a (min, max) clip of the raw rewards; course_lib's RLOO keeps the older "
                 "RLOOTrainer's meaning, one number c that clips the normalized scores to +-c, and only with "
                 "normalize_reward=True",
                 "to bound the raw rewards, clip them in your reward function (e.g. min(max(r, low), high)); for the "
                 "older meaning pass normalize_reward=True with a single number, e.g. reward_clip_range=10.0")
        super().__post_init__()

    def _check_ranges(self) -> None:
        super()._check_ranges()
        if self.token_level_kl:  # accepted and ignored would be worse than refused
            fail("token_level_kl", self.token_level_kl, "has no effect on RLOO, whose advantage is one number per "
                 "completion: the per-token KL penalties sum to the same reward as the summed penalty",
                 "leave token_level_kl=False (a per-token KL matters with a per-token return: use PPO)")
        if not self.reward_clip_range > 0:
            fail("reward_clip_range", self.reward_clip_range, "must be > 0", "use 10.0 (the older RLOOConfig's default)")


# ---------------------------------------------------------------------------------------
# 2. Advantages
# ---------------------------------------------------------------------------------------
def rloo_advantages(rewards: Tensor, num_generations: int) -> Tensor:
    """Leave-one-out advantages `r_i - mean_{j != i} r_j` within each prompt's group.

    Identity: `adv_i = K / (K - 1) * (r_i - mean(r_group))`, the group-mean baseline
    rescaled to be unbiased (the completion's own reward is not in its baseline).

    Args:
        rewards: `(B,)` prompt-major; NaN = unscorable, excluded from the baselines.
        num_generations: K >= 2.

    Returns:
        `(B,)`; 0 for unscorable completions and for groups with fewer than two
        scorable completions (same as TRL 1.16's RLOOTrainer).
    """
    check_groups(rewards, num_generations)
    if num_generations < 2:
        raise ValueError(f"num_generations={num_generations}: a leave-one-out baseline needs K >= 2. "
                         "Fix: sample at least two completions per prompt.")
    grouped = rewards.view(-1, num_generations)  # (P, K)
    scorable = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)  # (P, 1)
    total = torch.nansum(grouped, dim=1, keepdim=True)  # (P, 1)
    baseline = (total - grouped) / (scorable - 1)  # mean of the others; 0/0 -> NaN
    return torch.nan_to_num((grouped - baseline).view(-1), nan=0.0, posinf=0.0, neginf=0.0)


def rloo_advantages_with_kl(scores: Tensor, logps: Tensor, ref_logps: Tensor | None, mask: Tensor,
                            is_eos: Tensor, config: RLOOConfig) -> tuple[Tensor, dict[str, float]]:
    """RLOO with the KL in the reward, as TRL's older RLOOTrainer computes it.

    The EOS penalty, then Reinforce++'s normalise-and-clip of the scores, then the KL
    penalty folded in (:func:`course_lib.algos.onpolicy.kl_penalized_rewards`), summed per
    completion, then the leave-one-out baseline and optional advantage normalisation.
    The KL is summed per completion (`token_level_kl=True`, which would change no advantage
    here, is refused by :class:`RLOOConfig`).

    Args:
        scores: (B,) reward-function scores, prompt-major, K per prompt.
        logps, ref_logps: (B, T) sampling-time policy and reference log-probs (ref None: no KL).
        mask: (B, T) completion mask; is_eos: (B,).
        config: an :class:`RLOOConfig`.
    Returns:
        advantages (B,), metrics (objective/*).
    """
    scores = penalize_missing_eos(scores, is_eos, config.missing_eos_penalty)
    if config.normalize_reward:  # Reinforce++: standardise, then clip
        scores = clip_rewards(normalize_rewards(scores), config.reward_clip_range)
    shaped = kl_penalized_rewards(scores, logps, ref_logps, mask, config.beta)
    rlhf_reward = shaped.token_rewards.sum(1)  # score + KL penalty, one number per completion
    advantages = rloo_advantages(rlhf_reward, config.num_generations)
    if config.normalize_advantage:
        advantages = normalize_advantages(advantages)
    return advantages, shaped.metrics(scores, logps, mask.to(scores.dtype), is_eos)


def normalize_rewards(rewards: Tensor, eps: float = 1e-8) -> Tensor:
    """Standardise a batch of scores: `(r - mean) / (std + eps)`, NaN-aware.

    Reinforce++'s reward normalisation, as in TRL's on-policy RLOO (which then clips the
    result with `clip_rewards(r, reward_clip_range)`). With fewer than two finite
    values the spread is undefined and the result is `r - mean` (0 for one value).
    """
    return standardize(rewards, eps=eps)


def normalize_advantages(advantages: Tensor, eps: float = 1e-8) -> Tensor:
    """Standardise advantages over the batch (Reinforce++ / RLOO `normalize_advantage`).

    Same formula as `normalize_rewards`; TRL 1.16 uses eps=1e-4 here, its older RLOO 1e-8.
    """
    return standardize(advantages, eps=eps)


def clip_rewards(rewards: Tensor, clip_range: float | tuple[float, float]) -> Tensor:
    """Clamp rewards to `[-c, c]` (a number) or `[low, high]` (a pair); NaN stays NaN.

    Reinforce++ (Hu 2025) clips rewards to keep extreme scores from dominating a batch.
    """
    if isinstance(clip_range, (int, float)):
        if not clip_range > 0:
            raise ValueError(f"clip_range={clip_range!r} must be > 0. Fix: use e.g. 10.0.")
        low, high = -float(clip_range), float(clip_range)
    else:
        low, high = (float(v) for v in clip_range)
        if not low < high:
            raise ValueError(f"clip_range={clip_range!r} needs low < high. Fix: pass (low, high).")
    return rewards.clamp(min=low, max=high)


def generation_major_to_prompt_major(x: Tensor, num_generations: int) -> Tensor:
    """Reorder `(K * P, ...)` with index `k * P + p` into index `p * K + k`."""
    rest = x.shape[1:]
    return x.reshape(num_generations, -1, *rest).transpose(0, 1).reshape(x.shape)


def prompt_major_to_generation_major(x: Tensor, num_generations: int) -> Tensor:
    """Inverse of `generation_major_to_prompt_major`."""
    rest = x.shape[1:]
    return x.reshape(-1, num_generations, *rest).transpose(0, 1).reshape(x.shape)


# ---------------------------------------------------------------------------------------
# 3. Loss
# ---------------------------------------------------------------------------------------
def rloo_policy_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    cliprange: float = 0.2,
    *,
    cliprange_high: float | None = None,
    sampling_ratio: Tensor | None = None,
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
        advantages: `(B,)` leave-one-out advantages (:func:`rloo_advantages`).
        mask: `(B, T)` completion mask (padding and tokens after EOS are 0).
        cliprange: PPO clip range c (RLOOConfig.cliprange / GRPO's epsilon).
        cliprange_high: upper clip range; defaults to `cliprange`.
        sampling_ratio: `(B,)` or `(B, 1)` importance weight of each completion between the
            trained policy and the engine that sampled it (sequence-level TIS,
            `course_lib.ops.importance`), multiplied into its loss; None for no correction.

    Returns:
        `LossOutput`; metrics `loss/policy_avg`, `policy/approxkl_avg`
        (`0.5 * mean((log r)^2)`), `policy/clipfrac_avg` (fraction of completions where
        the clipped branch is the larger loss), `val/ratio` and `val/ratio_var`
        (mean and unbiased variance of r over completions; 0 for one completion),
        and TRL 1.16's `clip_ratio/low_mean`, `clip_ratio/high_mean`,
        `clip_ratio/region_mean`. A fully masked row has log-prob 0, ratio 1.
    """
    check_cliprange("cliprange", cliprange)
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
    if sampling_ratio is not None:
        per_sequence_loss = per_sequence_loss * sampling_ratio.to(per_sequence_loss.dtype).reshape(-1)
    loss = per_sequence_loss.mean()

    with torch.no_grad():
        ones = torch.ones_like(ratio)
        is_low, is_high = clip_flags(ratio, advantages, cliprange, high, ratio.dtype)
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


# ---------------------------------------------------------------------------------------
# 4. The algorithm, as the trainer calls it
# ---------------------------------------------------------------------------------------
class RLOO(Algorithm):
    """RLOO for the trainer: KL in the reward, leave-one-out advantages, sequence-level PPO clip."""

    name = "rloo"
    config_class = RLOOConfig
    always_needs_old_logps = True
    sampling_correction_level = "sequence"

    def advantages(self, scored: ScoredBatch, config: RLOOConfig) -> Advantages:
        scores = torch.nan_to_num(scored.rewards, nan=0.0)  # an unscorable completion scores 0
        advantages, metrics = rloo_advantages_with_kl(scores, scored.old_logps, scored.ref_logps, scored.mask,
                                                      scored.is_eos, config)
        metrics.update(reward_metrics(scored.rewards, scored.num_generations))
        return Advantages(advantages=advantages, metrics=metrics)

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config: RLOOConfig,
             num_items_in_batch: int) -> LossOutput:
        mask = micro_batch.completion_mask
        out = rloo_policy_loss(outputs.logps, micro_batch.old_logps, micro_batch.advantages, mask,
                               cliprange=config.epsilon, cliprange_high=config.epsilon_high,
                               sampling_ratio=micro_batch.sampling_ratio)
        out.metrics.update(entropy_metrics(outputs.entropies, mask, "entropy", "policy/entropy_avg"))
        # TRL's RLOO returns the mean over completions; the HF Trainer divides it by the accumulation.
        out.loss = out.loss / config.gradient_accumulation_steps
        return out
