"""What RLOO and PPO share: the on-policy config of TRL's older trainers and KL in the reward.

Both algorithms come from TRL's older "on-policy" trainers (RLOOTrainer, PPOTrainer) and
differ from GRPO in one idea: the KL to the reference model is not a loss term but a
penalty folded into the reward (Ziegler et al. 2019; Stiennon et al. 2020),

    r_t = -beta * (log pi(y_t) - log ref(y_t))   per token,   + score on the last token,

so the advantage estimator (leave-one-out for RLOO, GAE for PPO) sees it like any other
reward. :func:`kl_penalized_rewards` builds those per-token rewards once for both.

TRL's older on-policy trainers name four existing concepts differently; here each is stored
once and the older name is an alias, accepted by `make_config` / `apply_overrides` /
`from_dict` and readable as a property:

    kl_coef -> beta, num_ppo_epochs -> num_iterations, cliprange -> epsilon
    (and rloo_k -> num_generations for RLOO).

`num_mini_batches` (optimizer steps per generation batch) is expressed through the
shared batch arithmetic: it sets `steps_per_generation = num_mini_batches *
gradient_accumulation_steps`. Defaults follow those older trainers (KL coefficient 0.05,
4 PPO epochs, temperature 0.7), which PPO keeps (they were the defaults of TRL's former
PPOConfig; TRL 1.16 has no PPOTrainer, see lesson 04); RLOO
takes TRL 1.16's rewritten `RLOOConfig` defaults instead (1 pass, temperature 1.0, the same
beta 0.05), with the older ones as the preset `older_trl_rloo` (see lesson 08).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from course_lib.config import RLConfig, fail
from course_lib.ops.kl import kl_k1

Tensor = torch.Tensor


def _alias(target: str, doc: str) -> property:
    return property(lambda self: getattr(self, target), doc=doc)


@dataclass(frozen=True)
class OnPolicyConfig(RLConfig):
    """Fields shared by RLOO and PPO, which follow TRL's older on-policy trainers."""

    ALIASES: ClassVar[dict[str, str]] = {
        "kl_coef": "beta",
        "num_ppo_epochs": "num_iterations",
        "cliprange": "epsilon",
    }

    beta: float = 0.05
    """KL coefficient (`kl_coef` in TRL's former PPOTrainer and older RLOOTrainer): subtracted from the reward as beta * KL(pi ||
    pi_ref) (Ziegler et al. 2019), not added to the loss as in GRPO."""
    num_iterations: int = 4
    """PPO epochs over each generation batch (`num_ppo_epochs`, default 4); 1 with one mini-batch
    gives REINFORCE / A2C ("A2C is a special case of PPO", Huang et al. 2022)."""
    temperature: float = 0.7
    """Sampling temperature (TRL's on-policy default 0.7)."""
    num_mini_batches: int | None = None
    """Optimizer steps per generation batch; sets steps_per_generation = num_mini_batches *
    gradient_accumulation_steps. None means 1 (the default of TRL's former PPOConfig)."""
    missing_eos_penalty: float | None = None
    """The "EOS trick": subtract this from the score of completions that never emit EOS; None
    disables (Huang et al. 2024 use 1.0)."""

    kl_coef = _alias("beta", "The name TRL's former PPOConfig gave `beta`.")
    num_ppo_epochs = _alias("num_iterations", "The name TRL's former PPOConfig gave `num_iterations`.")
    cliprange = _alias("epsilon", "The name TRL's former PPOConfig gave `epsilon`.")

    def _requested_steps_per_generation(self) -> int | None:
        if self.num_mini_batches is None:
            return self.steps_per_generation
        if self.num_mini_batches < 1:
            fail("num_mini_batches", self.num_mini_batches, "must be None or at least 1", "use 1")
        if self.steps_per_generation is not None:
            fail("num_mini_batches", self.num_mini_batches, f"is set together with steps_per_generation="
                  f"{self.steps_per_generation}; each determines the other", "set only one of the two")
        return self.num_mini_batches * self.gradient_accumulation_steps


def last_token_index(mask: Tensor) -> Tensor:
    """Index of each row's last valid token; 0 for an empty row.  (B, T) -> (B,)"""
    return (mask.long().sum(-1) - 1).clamp(min=0)


def penalize_missing_eos(scores: Tensor, is_eos: Tensor, penalty: float | None) -> Tensor:
    """The "EOS trick": subtract `penalty` from the score of completions that never ended.  (B,) -> (B,)"""
    if penalty is None:
        return scores
    return scores - penalty * (~is_eos).to(scores.dtype)


@dataclass
class KLPenalizedRewards:
    """Per-token rewards with the KL penalty folded in, and the parts they are made of."""

    token_rewards: Tensor
    """(B, T) `-beta * k1` per valid token, plus the score on each row's last valid token."""
    kl: Tensor
    """(B, T) k1 estimate per valid token (0 elsewhere, and everywhere without a reference)."""
    non_score_reward: Tensor
    """(B,) `-beta * sum_t k1`: the reward the KL penalty adds to each completion."""
    has_reference: bool = True
    """False when no reference was loaded (beta = 0): there is no KL to report."""

    def metrics(self, scores: Tensor, logps: Tensor, mask: Tensor, is_eos: Tensor) -> dict[str, float]:
        """The `objective/*` metrics of the on-policy trainers' docs, and `kl` as GRPO and TRL 1.16's
        RLOO name it: the k1 estimate averaged over the batch's valid tokens (only with a reference)."""
        shared = {"kl": (self.kl.sum() / mask.sum().clamp(min=1.0)).item()} if self.has_reference else {}
        return {**shared,
            "objective/kl": self.kl.sum(1).mean().item(),
            "objective/entropy": (-(logps * mask).sum(1)).mean().item(),
            "objective/non_score_reward": self.non_score_reward.mean().item(),
            "objective/rlhf_reward": (scores + self.non_score_reward).mean().item(),
            "objective/scores": scores.mean().item(),
            "val/num_eos_tokens": int(is_eos.sum().item()),
        }


def kl_penalized_rewards(scores: Tensor, logps: Tensor, ref_logps: Tensor | None, mask: Tensor,
                         beta: float) -> KLPenalizedRewards:
    """Fold `beta * KL(pi || ref)` into the reward, per token (Ziegler et al. 2019).

    Args:
        scores: (B,) scores of the reward functions.
        logps, ref_logps: (B, T) sampling-time policy and reference log-probs of the
            sampled tokens; `ref_logps=None` (beta = 0, no reference loaded) means no penalty.
        mask: (B, T) completion mask, right-padded.
        beta: the KL coefficient (`kl_coef`).
    """
    mask = mask.to(logps.dtype)
    kl = kl_k1(logps, ref_logps) * mask if ref_logps is not None else torch.zeros_like(logps)
    token_rewards = -beta * kl
    non_score_reward = token_rewards.sum(1)
    token_rewards = token_rewards.clone()
    token_rewards[torch.arange(len(scores)), last_token_index(mask)] += scores
    return KLPenalizedRewards(token_rewards=token_rewards, kl=kl, non_score_reward=non_score_reward,
                              has_reference=ref_logps is not None)
