"""From sampled completions to what the loss needs: rewards, advantages, reference terms.

One function per algorithm turns a generation batch into per-completion (GRPO, RLOO) or
per-token (PPO) advantages, plus the metrics each algorithm logs under TRL's names:

- :func:`grpo_advantages`: weighted reward sum, group z-scores (GRPO, Shao et al. 2024).
- :func:`rloo_advantages_with_kl`: KL to the reference folded into the reward, Reinforce++
  options, leave-one-out baseline (Ahmadian et al. 2024, "Back to Basics").
- :func:`ppo_advantages`: per-token KL shaping with the score at the last token, GAE,
  advantage whitening ("The N Implementation Details of RLHF with PPO").

The trainer calls them; they do no I/O and hold no state.
"""

from __future__ import annotations

import torch

from .advantages import (
    clip_rewards,
    gae,
    group_advantages,
    nanstd,
    normalize_advantages,
    normalize_rewards,
    rloo_advantages,
)
from .masking import masked_mean, masked_whiten


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last valid token; 0 for an empty row.  (B, T) -> (B,)"""
    return (mask.long().sum(-1) - 1).clamp(min=0)


def grpo_advantages(rewards: torch.Tensor, num_generations: int, scale_rewards) -> tuple[torch.Tensor, dict]:
    """Group-relative advantages and GRPO's reward metrics.  rewards: (B,) combined."""
    advantages, stats = group_advantages(rewards, num_generations, scale_rewards, return_stats=True)
    grouped = rewards.view(-1, num_generations)
    metrics = {
        "reward": torch.nanmean(rewards).item(),
        # TRL's reward_std: the std of each group, averaged (what the advantages divide by).
        "reward_std": torch.nanmean(nanstd(grouped, dim=1).nan_to_num(0.0)).item(),
        "frac_reward_zero_std": stats.is_std_zero.float().mean().item(),
    }
    return advantages, metrics


def rloo_advantages_with_kl(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor | None,
                            mask: torch.Tensor, is_eos: torch.Tensor, config) -> tuple[torch.Tensor, dict]:
    """RLOO with the KL in the reward (the seed's RLOOTrainer semantics).

    Args:
        scores: (B,) environment/reward-function scores, prompt-major, K per prompt.
        logps, ref_logps: (B, T) sampling-time policy and reference log-probs.
        mask: (B, T) completion mask; is_eos: (B,).
    Returns:
        advantages (B,), metrics (objective/*).
    """
    scores = scores.clone()
    if config.missing_eos_penalty is not None:
        scores[~is_eos] -= config.missing_eos_penalty  # the "EOS trick"
    if config.normalize_reward:  # Reinforce++: standardise, then clip
        scores = clip_rewards(normalize_rewards(scores), config.reward_clip_range)
    kl = (logps - ref_logps) * mask if ref_logps is not None else torch.zeros_like(logps)  # k1 per token
    if config.token_level_kl:
        token_rewards = -config.beta * kl
        token_rewards[torch.arange(len(scores)), last_token_index(mask)] += scores
        non_score_reward = (-config.beta * kl).sum(1)
        rlhf_reward = token_rewards.sum(1)
    else:
        non_score_reward = -config.beta * kl.sum(1)
        rlhf_reward = scores + non_score_reward
    advantages = rloo_advantages(rlhf_reward, config.num_generations)
    if config.normalize_advantage:
        advantages = normalize_advantages(advantages)
    metrics = {
        "objective/kl": kl.sum(1).mean().item(),
        "objective/entropy": (-(logps * mask).sum(1)).mean().item(),
        "objective/non_score_reward": non_score_reward.mean().item(),
        "objective/rlhf_reward": rlhf_reward.mean().item(),
        "objective/scores": scores.mean().item(),
        "val/num_eos_tokens": int(is_eos.sum().item()),
    }
    return advantages, metrics


def ppo_advantages(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor | None, values: torch.Tensor,
                   mask: torch.Tensor, is_eos: torch.Tensor, config) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """PPO for LLMs: per-token rewards = -beta * KL, plus the score on the last token; GAE.

    Returns:
        advantages (B, T) whitened over valid tokens, returns (B, T), metrics.
    """
    scores = scores.clone()
    if config.missing_eos_penalty is not None:
        scores[~is_eos] -= config.missing_eos_penalty
    kl = (logps - ref_logps) * mask if ref_logps is not None else torch.zeros_like(logps)
    token_rewards = -config.beta * kl
    non_score_reward = token_rewards.sum(1)
    token_rewards[torch.arange(len(scores)), last_token_index(mask)] += scores
    if config.whiten_rewards:
        token_rewards = masked_whiten(token_rewards, mask, shift_mean=False) * mask
    advantages, returns = gae(token_rewards, values, mask, gamma=config.gamma, lam=config.lam)
    advantages = masked_whiten(advantages, mask) * mask
    metrics = {
        "objective/kl": kl.sum(1).mean().item(),
        "objective/entropy": (-(logps * mask).sum(1)).mean().item(),
        "objective/non_score_reward": non_score_reward.mean().item(),
        "objective/rlhf_reward": (scores + non_score_reward).mean().item(),
        "objective/scores": scores.mean().item(),
        "val/num_eos_tokens": int(is_eos.sum().item()),
        "val/value_mean": masked_mean(values, mask).item(),
    }
    return advantages, returns, metrics


def completion_metrics(completion_mask: torch.Tensor, is_eos: torch.Tensor) -> dict:
    """TRL's completion-length metrics for one generation batch."""
    lengths = completion_mask.sum(1).float()
    terminated = lengths[is_eos]
    return {
        "completions/mean_length": lengths.mean().item(),
        "completions/min_length": lengths.min().item(),
        "completions/max_length": lengths.max().item(),
        "completions/clipped_ratio": (~is_eos).float().mean().item(),
        "completions/mean_terminated_length": terminated.mean().item() if len(terminated) else 0.0,
    }
