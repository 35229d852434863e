"""PPO for language models: a value head, GAE, and the clipped policy and value losses.

Everything a lesson on PPO for RLHF points at, top to bottom:

1. :class:`PPOConfig`: value-loss weight and clipping, GAE's gamma and lambda, a separate
   value model or a head on the policy.
2. :class:`ValueHead`: the critic, one scalar per token.
3. :func:`gae`: Generalized Advantage Estimation (Schulman et al. 2016, eq. 16) on the
   per-token rewards of :func:`course_lib.algos.onpolicy.kl_penalized_rewards` (KL penalty
   on every token, the score on the last), and :func:`whiten`.
4. :func:`ppo_policy_loss` and :func:`value_loss`: the token-level clipped surrogate
   (Schulman et al. 2017, eq. 7) and the clipped value loss, as in "The N Implementation
   Details of RLHF with PPO" (Huang, Liu & von Werra 2023).
5. :class:`PPO`: the calls the trainer makes.

Metric names follow the PPO documentation: `policy/approxkl_avg`,
`policy/clipfrac_avg`, `loss/policy_avg`, `val/ratio`, `val/ratio_var`,
`loss/value_avg`, `val/clipfrac_avg`; the clip fraction also under the names GRPO and RLOO
log it with (`clip_ratio/low_mean`, `clip_ratio/high_mean`, `clip_ratio/region_mean`), so
that one vocabulary reads all three algorithms. Simplification: the old trainers averaged these
over PPO epochs and mini-batches; here each call reports the statistics of its own
batch, and the trainer averages calls. GAE assumes right padding.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from course_lib.algos.base import (
    Advantages,
    Algorithm,
    LossOutput,
    MicroBatch,
    PolicyOutputs,
    ScoredBatch,
    advantage_column,
    check_cliprange,
    entropy_metrics,
    reward_metrics,
)
from course_lib.algos.onpolicy import OnPolicyConfig, kl_penalized_rewards, penalize_missing_eos
from course_lib.config import fail
from course_lib.models import unwrap_peft
from course_lib.ops.masking import masked_mean, masked_sum, masked_var, masked_whiten

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------
# 1. Config
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """Proximal Policy Optimization with a value head and GAE (Schulman et al. 2017, 2016)."""

    algo: ClassVar[str] = "ppo"
    MIN_GENERATIONS: ClassVar[int] = 1

    num_generations: int = 1
    """Completions per prompt; PPO needs no group, its baseline is the value function."""
    vf_coef: float = 0.1
    """Weight of the value loss in the total loss."""
    cliprange_value: float = 0.2
    """Clip the new value to old value +- cliprange_value in the value loss."""
    gamma: float = 1.0
    """Discount factor of GAE; 1.0 for episodic text."""
    lam: float = 0.95
    """GAE lambda: 0 = one-step TD, 1 = Monte Carlo (Schulman et al. 2016)."""
    whiten_rewards: bool = False
    """Whiten the per-token rewards over the batch before GAE, keeping their mean ("The N+
    Implementation Details of RLHF with PPO", Huang et al. 2024). PPO's only: RLOO's one advantage
    per completion has no per-token rewards to whiten (TRL's RLOOConfig has no such field)."""
    use_separate_value_model: bool = False
    """Train the value function as its own model instead of a head on the policy."""
    value_learning_rate: float | None = None
    """Learning rate of the value head (or separate value model); None = `learning_rate`. Adam
    normalises each parameter's step, so `vf_coef` barely changes how fast a head that only the
    value loss trains can move: at a policy learning rate of 1e-5 to 1e-6 a zero-initialised head
    needs thousands of steps to reach the returns. A larger rate here lets the critic catch up
    (TRL's former PPOConfig had no such field: its separate value model shared the policy's rate)."""

    def _check_ranges(self) -> None:
        super()._check_ranges()
        if self.epsilon_high is not None:  # accepted and ignored would be worse than refused
            fail("epsilon_high", self.epsilon_high, "has no effect on PPO, whose loss clips the ratio to "
                 "[1 - epsilon, 1 + epsilon]", "leave epsilon_high unset (clip-higher is GRPO's and RLOO's)")
        if self.value_learning_rate is not None and self.value_learning_rate <= 0:
            fail("value_learning_rate", self.value_learning_rate, "must be None or positive",
                 "use None (the policy's learning_rate) or e.g. 1e-3")
        for name in ("vf_coef", "cliprange_value"):
            if getattr(self, name) < 0:
                fail(name, getattr(self, name), "must be non-negative", f"set {name} >= 0")
        for name in ("gamma", "lam"):
            if not 0 <= getattr(self, name) <= 1:
                fail(name, getattr(self, name), "must lie in [0, 1]", "use gamma=1.0, lam=0.95")


# ---------------------------------------------------------------------------------------
# 2. The critic
# ---------------------------------------------------------------------------------------
class ValueHead(nn.Module):
    """PPO's critic: a linear head giving one scalar per token from last hidden states.

    With ``backbone=None`` the head reads the *policy's* hidden states (a shared trunk: one
    forward pass, the critic's gradient also shapes the policy's features). With a
    backbone (a frozen-architecture copy of the policy's transformer body, trained on its
    own) the critic is a separate value model, as in the original RLHF setups: twice the
    memory, no interference between the two losses.

    The head starts at zero so the first value estimates add no noise to GAE.
    """

    def __init__(self, hidden_size: int, backbone: nn.Module | None = None):
        super().__init__()
        self.summary = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.summary.weight)
        nn.init.zeros_(self.summary.bias)
        self.backbone = backbone

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T)
        return self.summary(hidden.to(self.summary.weight.dtype)).squeeze(-1)

    def values_for(self, policy_hidden, input_ids, attention_mask, position_ids, start: int, width: int):
        """Values of the completion positions: from the policy's hidden states or its own body."""
        if self.backbone is None:
            return self(policy_hidden)
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False).last_hidden_state
        return self(hidden[:, start: start + width])


def make_value_head(policy, separate: bool) -> ValueHead:
    """A value head on the policy's trunk, or on a trainable copy of its transformer body."""
    causal_lm = unwrap_peft(policy)
    backbone = None
    if separate:
        backbone = copy.deepcopy(causal_lm.get_decoder())
        for parameter in backbone.parameters():
            parameter.requires_grad_(True)  # LoRA freezes the policy's base weights, not the critic's
    return ValueHead(causal_lm.config.hidden_size, backbone)


# ---------------------------------------------------------------------------------------
# 3. Advantages
# ---------------------------------------------------------------------------------------
def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, eq. 16), right to left.

    `delta_t = r_t + gamma * V_{t+1} - V_t`, `A_t = delta_t + gamma * lam * A_{t+1}`.
    The value after the last valid token is 0 (the episode ends there); rewards and
    values at padded positions are ignored.

    Args:
        rewards: `(B, T)` per-token rewards (e.g. -beta * KL per token plus the score on
            the last token).
        values: `(B, T)` value estimates V_t.
        mask: `(B, T)` 1 for real tokens, right-padded.
        gamma: discount; lam: GAE lambda.

    Returns:
        `(advantages, returns)`, both `(B, T)`, 0 at padded positions;
        `returns = advantages + values` are the value targets.
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask "
                         f"{tuple(mask.shape)} must share one (B, T) shape. Fix: align them per token.")
    valid = mask.bool()
    if (valid[:, 1:] & ~valid[:, :-1]).any():
        raise ValueError("mask has a valid token after a padded one; gae expects right padding "
                         "(ones then zeros in each row). Fix: pad completions on the right.")
    values = torch.where(valid, values, torch.zeros_like(values))
    rewards = torch.where(valid, rewards, torch.zeros_like(rewards))
    num_tokens = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])  # A_{t+1}, (B,)
    for t in reversed(range(num_tokens)):
        next_values = values[:, t + 1] if t + 1 < num_tokens else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * next_values - values[:, t]
        running = delta + gamma * lam * running
        advantages[:, t] = running
    advantages = torch.where(valid, advantages, torch.zeros_like(advantages))
    return advantages, advantages + values


def ppo_advantages(scores: Tensor, logps: Tensor, ref_logps: Tensor | None, values: Tensor, mask: Tensor,
                   is_eos: Tensor, config: PPOConfig) -> tuple[Tensor, Tensor, dict[str, float]]:
    """PPO for LLMs as the trainer computes it: KL-shaped per-token rewards, GAE, whitening.

    Per-token rewards are `-beta * k1` on every token plus the (EOS-penalised) score on
    the last one (:func:`course_lib.algos.onpolicy.kl_penalized_rewards`), optionally
    whitened keeping their mean; then :func:`gae` and advantage whitening over the valid
    tokens ("The N Implementation Details of RLHF with PPO").

    Returns:
        advantages (B, T) whitened, returns (B, T) value targets, metrics.
    """
    mask = mask.to(logps.dtype)
    scores = penalize_missing_eos(scores, is_eos, config.missing_eos_penalty)
    shaped = kl_penalized_rewards(scores, logps, ref_logps, mask, config.beta)
    token_rewards = shaped.token_rewards
    if config.whiten_rewards:
        token_rewards = masked_whiten(token_rewards, mask, shift_mean=False) * mask
    advantages, returns = gae(token_rewards, values, mask, gamma=config.gamma, lam=config.lam)
    advantages = masked_whiten(advantages, mask) * mask
    metrics = shaped.metrics(scores, logps, mask, is_eos)
    metrics["val/value_mean"] = masked_mean(values, mask).item()
    metrics["val/return_mean"] = masked_mean(returns, mask).item()  # what value_mean should approach
    return advantages, returns, metrics


def model_token_advantages(scores: Tensor, logps: Tensor, ref_logps: Tensor | None, values: Tensor, mask: Tensor,
                           is_eos: Tensor, config: PPOConfig) -> tuple[Tensor, Tensor, dict[str, float]]:
    """:func:`ppo_advantages` where ``mask`` may have holes: the tool-result tokens of a multi-turn
    rollout, which the model did not choose.

    The model's tokens are the actions; a tool result is part of the environment's answer, the
    transition from the last token of one turn to the first token of the next. So each row's
    model tokens are moved to the left in order (a stable sort on the mask), GAE runs over
    them as one right-padded sequence (the value of the next *model* token bootstraps across the
    result), and the outputs go back to their positions; tool positions get 0. A mask without
    holes is left as it is, so single-turn runs are unchanged.
    """
    valid = mask.bool()
    if not (valid[:, 1:] & ~valid[:, :-1]).any():
        return ppo_advantages(scores, logps, ref_logps, values, mask, is_eos, config)
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)  # model tokens first, in order
    take = lambda x: None if x is None else x.gather(1, order)  # noqa: E731
    advantages, returns, metrics = ppo_advantages(scores, take(logps), take(ref_logps), take(values), take(mask),
                                                  is_eos, config)
    back = lambda x: torch.zeros_like(x).scatter_(1, order, x)  # noqa: E731
    return back(advantages), back(returns), metrics


def whiten(x: Tensor, mask: Tensor | None = None, shift_mean: bool = True) -> Tensor:
    """Zero-mean, unit-variance `x` over the valid positions (PPO's advantage whitening).

    `shift_mean=False` keeps the mean (used to whiten rewards). See `course_lib.ops.masking.masked_whiten`.
    """
    return masked_whiten(x, torch.ones_like(x) if mask is None else mask, shift_mean=shift_mean)


# ---------------------------------------------------------------------------------------
# 4. Losses
# ---------------------------------------------------------------------------------------
def _token_mean(per_token: Tensor, mask: Tensor, num_tokens: float | None) -> Tensor:
    """Masked mean, or the masked sum over `num_tokens` (0 for an empty mask either way)."""
    if num_tokens is None:
        return masked_mean(per_token, mask)
    return masked_sum(per_token, mask) / max(float(num_tokens), 1.0)


def ppo_policy_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cliprange: float = 0.2,
    *,
    sampling_ratio: Tensor | None = None,
    num_tokens: float | None = None,
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
        sampling_ratio: `(B, T)` truncated importance weight between the trained policy and
            the engine that sampled the tokens (TIS, `course_lib.ops.importance`); None for none.
        num_tokens: what the summed loss is divided by; None = the valid tokens of `mask`
            (a masked mean). Data-parallel training passes the micro-step's tokens on all
            processes divided by their number, so that DDP's average equals the global mean.

    Returns:
        `LossOutput`; metrics `loss/policy_avg`, `policy/approxkl_avg`
        (`0.5 * masked_mean((log r)^2)`), `policy/clipfrac_avg`, `val/ratio`,
        `val/ratio_var` (over valid tokens), and the clip fraction again under GRPO's and
        RLOO's names: `clip_ratio/low_mean` (ratio below 1 - c, advantage negative),
        `clip_ratio/high_mean` (above 1 + c, advantage positive), `clip_ratio/region_mean`
        (either: equal to `policy/clipfrac_avg`). All 0 for an empty mask.
    """
    check_cliprange("cliprange", cliprange)
    mask = mask.to(logps.dtype)
    advantages = advantage_column(advantages.to(logps.dtype), logps.shape[0])
    log_ratio = logps - old_logps
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    pg_losses_clipped = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    per_token_loss = torch.max(pg_losses, pg_losses_clipped)
    if sampling_ratio is not None:
        per_token_loss = per_token_loss * sampling_ratio
    loss = _token_mean(per_token_loss, mask, num_tokens)

    with torch.no_grad():
        # The clip binds where the ratio left [1 - c, 1 + c] in the direction the advantage pushes:
        # TRL GRPO's clip_ratio/low_mean and high_mean; their union is PPO's clipfrac.
        is_low = ((ratio < 1 - cliprange) & (advantages < 0)).to(logps.dtype)
        is_high = ((ratio > 1 + cliprange) & (advantages > 0)).to(logps.dtype)
        clipfrac = masked_mean((pg_losses_clipped > pg_losses).to(logps.dtype), mask).item()
        metrics = {
            "loss/policy_avg": loss.item(),
            "policy/approxkl_avg": (0.5 * masked_mean(log_ratio.pow(2), mask)).item(),
            "policy/clipfrac_avg": clipfrac,
            "val/ratio": masked_mean(ratio, mask).item(),
            "val/ratio_var": masked_var(ratio, mask, unbiased=True).item(),
            "clip_ratio/low_mean": masked_mean(is_low, mask).item(),
            "clip_ratio/high_mean": masked_mean(is_high, mask).item(),
            "clip_ratio/region_mean": clipfrac,
        }
    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_token_loss)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    cliprange_value: float = 0.2,
    *,
    num_tokens: float | None = None,
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
        num_tokens: the mean's denominator, as in :func:`ppo_policy_loss`.

    Returns:
        `LossOutput`; metrics `loss/value_avg` and `val/clipfrac_avg` (fraction of
        valid tokens where the clipped error is the larger one). 0 for an empty mask.
    """
    check_cliprange("cliprange_value", cliprange_value)
    mask = mask.to(values.dtype)
    values_clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    errors = (values - returns) ** 2
    errors_clipped = (values_clipped - returns) ** 2
    per_token_loss = torch.max(errors, errors_clipped)
    loss = 0.5 * _token_mean(per_token_loss, mask, num_tokens)
    with torch.no_grad():
        metrics = {
            "loss/value_avg": loss.item(),
            "val/clipfrac_avg": masked_mean((errors_clipped > errors).to(values.dtype), mask).item(),
        }
    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_token_loss)


# ---------------------------------------------------------------------------------------
# 5. The algorithm, as the trainer calls it
# ---------------------------------------------------------------------------------------
class PPO(Algorithm):
    """PPO for the trainer: KL-shaped token rewards, GAE, clipped policy + value losses."""

    name = "ppo"
    config_class = PPOConfig
    always_needs_old_logps = True
    sampling_correction_level = "token"

    def make_value_head(self, policy, config: PPOConfig) -> ValueHead:
        return make_value_head(policy, separate=config.use_separate_value_model)

    def advantages(self, scored: ScoredBatch, config: PPOConfig) -> Advantages:
        scores = torch.nan_to_num(scored.rewards, nan=0.0)  # an unscorable completion scores 0
        advantages, returns, metrics = model_token_advantages(scores, scored.old_logps, scored.ref_logps,
                                                              scored.old_values, scored.mask, scored.is_eos, config)
        metrics.update(reward_metrics(scored.rewards, scored.num_generations, in_groups=False))
        return Advantages(advantages=advantages, metrics=metrics, returns=returns)

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config: PPOConfig,
             num_items_in_batch: int) -> LossOutput:
        mask = micro_batch.completion_mask
        # The mean over this micro-step's tokens on every process (one process: a masked mean).
        num_tokens = micro_batch.num_tokens_all_processes
        num_tokens = None if num_tokens is None else num_tokens / config.num_processes
        pg = ppo_policy_loss(outputs.logps, micro_batch.old_logps, micro_batch.advantages, mask,
                             cliprange=config.epsilon, sampling_ratio=micro_batch.sampling_ratio,
                             num_tokens=num_tokens)
        vf = value_loss(outputs.values, micro_batch.old_values, micro_batch.returns, mask,
                        cliprange_value=config.cliprange_value, num_tokens=num_tokens)
        loss = (pg.loss + config.vf_coef * vf.loss) / config.gradient_accumulation_steps
        metrics = {**pg.metrics, **vf.metrics,
                   **entropy_metrics(outputs.entropies, mask, "entropy", "policy/entropy_avg")}
        return LossOutput(loss=loss, metrics=metrics, per_token_loss=pg.per_token_loss)
