"""What every algorithm of the course gives the trainer: advantages, then a loss.

The trainer (``course_lib/trainer.py``) is the same loop for GRPO, RLOO and PPO; what
differs is two functions, gathered in an object that follows :class:`Algorithm`:

1. ``advantages(scored, config)``: from one scored generation batch (:class:`ScoredBatch`:
   rewards, masks, sampling-time and reference log-probs, values) to per-completion or
   per-token advantages (:class:`Advantages`), with the metrics the algorithm logs;
2. ``loss(micro_batch, outputs, config, num_items_in_batch)``: from one micro-batch
   (:class:`MicroBatch`) and the policy's fresh log-probs / values / entropies
   (:class:`PolicyOutputs`) to the scalar to differentiate (:class:`LossOutput`), already
   scaled for gradient accumulation.

Four facts about each algorithm (``name``, ``config_class``, ``always_needs_old_logps``,
``sampling_correction_level``) tell the trainer what to compute, and some members have
defaults in :class:`Algorithm` that an algorithm overrides when it needs them:
``batches`` (where a batch
comes from: sampled and scored by default, the dataset's rows for SFT and DPO), ``setup``
(e.g. distillation's teacher), ``make_value_head`` (PPO's critic), ``state`` /
``load_state`` (what a checkpoint keeps, e.g. GRPO's adaptive entropy coefficient).

Shared helpers for the loss functions live here too (input checks, the advantage column).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

Tensor = torch.Tensor


@dataclass
class LossOutput:
    """Result of a loss function.

    Attributes:
        loss: scalar to call `.backward()` on (already scaled for gradient accumulation
            where the loss says so).
        metrics: detached numbers to log, named as TRL names them.
        per_token_loss: the per-token (or per-sequence) loss before aggregation, for
            inspection and plots; `None` where not meaningful.
    """

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    per_token_loss: Tensor | None = None


@dataclass
class ScoredBatch:
    """One generation batch after the rewards, as the advantage functions read it.  B = prompts x G."""

    rewards: Tensor
    """(B,) weighted sum of the reward functions; NaN where no function applied."""
    mask: Tensor
    """(B, T) completion tokens that count in the loss."""
    is_eos: Tensor
    """(B,) True where the completion ended with EOS (not truncated)."""
    num_generations: int
    """Completions per prompt G, contiguous (prompt-major)."""
    old_logps: Tensor | None = None
    """(B, T) log-probs under the policy at sampling time, when computed."""
    ref_logps: Tensor | None = None
    """(B, T) log-probs under the reference policy, when beta != 0."""
    old_values: Tensor | None = None
    """(B, T) value estimates at sampling time (PPO)."""
    rewards_per_func: Tensor | None = None
    """(B, K) each reward function's score (NaN where it did not apply), for multi-objective
    aggregation."""


@dataclass
class Advantages:
    """What ``Algorithm.advantages`` returns."""

    advantages: Tensor
    """(B,) per completion or (B, T) per token."""
    metrics: dict[str, float]
    """Reward and advantage metrics under TRL's names."""
    returns: Tensor | None = None
    """(B, T) value targets (PPO), else None."""
    num_items_in_batch: int | None = None
    """The token count the losses divide by when it is not the batch's completion tokens (rejection
    sampling: the kept ones); None: every completion token of the batch."""


@dataclass
class MicroBatch:
    """The rows of one micro-step, as ``Algorithm.loss`` reads them.  B = rows of the micro-batch."""

    completion_mask: Tensor
    """(B, T) completion tokens that count in the loss."""
    advantages: Tensor
    """(B,) per completion (GRPO, RLOO) or (B, T) per token (PPO)."""
    old_logps: Tensor | None = None
    """(B, T) log-probs under the policy at sampling time; None on-policy (the loss then
    uses the detached fresh log-probs, ratio 1)."""
    ref_logps: Tensor | None = None
    """(B, T) log-probs under the reference policy, when beta != 0."""
    sampling_ratio: Tensor | None = None
    """(B, T) or (B, 1) sampler/trainer mismatch weight (no gradient), when a correction is on."""
    sampling_logps: Tensor | None = None
    """(B, T) the sampler's own log-probs, when recorded (off-policy sequence masking)."""
    old_values: Tensor | None = None
    """(B, T) value estimates at sampling time (PPO)."""
    returns: Tensor | None = None
    """(B, T) value targets (PPO)."""
    num_tokens_all_processes: float | None = None
    """Valid completion tokens of this micro-step summed over every process; a token-mean
    loss divides by it so that N processes average like one (PPO). None: this micro-batch's own."""
    prompt_ids: Tensor | None = None
    """(B, P) left-padded prompt tokens (the trainer's forward reads them; losses do not)."""
    prompt_mask: Tensor | None = None
    """(B, P)."""
    completion_ids: Tensor | None = None
    """(B, T) right-padded completion tokens."""
    attention_mask: Tensor | None = None
    """(B, T) what the forward attends to when it is more than ``completion_mask``: multi-turn
    rollouts read their tool results but do not train on them. None: ``completion_mask``."""
    segment_ids: Tensor | None = None
    """(B, P + T) packed rows only (SFT's ``packing``): the example of each token, 0 on padding."""
    rows: list[int] = field(default_factory=list)
    """The dataset row of each completion."""


@dataclass
class PolicyOutputs:
    """The policy's forward pass on one micro-batch."""

    logps: Tensor
    """(B, T) log-probs of the completion tokens, differentiable."""
    entropies: Tensor | None = None
    """(B, T) exact entropies of the next-token distributions (differentiable on the fused
    paths, for an entropy bonus)."""
    values: Tensor | None = None
    """(B, T) value estimates, differentiable (PPO)."""
    top1: Tensor | None = None
    """(B, T) bool: the token is the argmax of its logits (TRL's ``is_top1``), when the algorithm
    asks for it (``Algorithm.logs_token_accuracy``)."""


class Algorithm(Protocol):
    """Two functions, four facts and four members with defaults: how GRPO, RLOO and PPO differ in the trainer.

    The algorithms subclass it, so the defaults below apply where they do not override them.
    """

    name: str
    """Registry key: "grpo", "rloo", "ppo"."""
    config_class: type
    """The algorithm's config dataclass."""
    always_needs_old_logps: bool
    """True when the advantages read the sampling-time log-probs even on-policy (RLOO and PPO
    fold the KL into the reward); GRPO needs them only off-policy or for the correction."""
    sampling_correction_level: Literal["token", "sequence"]
    """Where the sampler/trainer mismatch weight applies: per token, or once per completion
    when the completion is the action (RLOO)."""
    batches: Literal["sampled", "sft", "pairs"] = "sampled"
    """Where the trainer's batches come from: sampled from the policy and scored (RL, the default;
    ``course_lib.run.sampled_batches``), or the dataset's demonstrations ("sft") or preference
    pairs ("pairs"; ``course_lib.run.dataset_batches``)."""
    logs_token_accuracy: bool = False
    """True: the forward also returns ``PolicyOutputs.top1`` (a gradient-free argmax pass of the LM
    head, ``course_lib.ops.top1``) for TRL's ``mean_token_accuracy`` (SFT)."""

    def advantages(self, scored: ScoredBatch, config) -> Advantages:
        """Advantages of one scored generation batch."""
        ...

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config, num_items_in_batch: int) -> LossOutput:
        """The micro-batch's loss, divided for gradient accumulation, with metrics."""
        ...

    def setup(self, trainer, **options) -> None:
        """Called once by the trainer after it built the policy: e.g. load a teacher (distillation).

        ``options`` are the trainer's algorithm-specific arguments (``teacher_model``); an
        algorithm that reads none refuses any that is set.
        """
        given = sorted(name for name, value in options.items() if value is not None)
        if given:
            raise ValueError(f"{', '.join(given)} given to a {self.name} run, which does not read it. "
                             "Fix: leave it out, or use the algorithm that reads it (teacher_model: algo='distill').")

    def make_value_head(self, policy, config) -> torch.nn.Module | None:
        """A critic to train beside the policy (PPO); None by default."""
        return None

    def state(self) -> dict:
        """What a checkpoint keeps of the algorithm between steps (JSON-safe); empty by default."""
        return {}

    def load_state(self, state: dict, config) -> None:
        """Restore what :meth:`state` returned; nothing to restore by default."""


# ---------------------------------------------------------------------------------------
# Helpers shared by the loss functions
# ---------------------------------------------------------------------------------------
def check_per_token(logps: Tensor, mask: Tensor, **others: Tensor | None) -> None:
    """Raise unless `logps` is (B, T) and `mask` and every other given tensor match it."""
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


def advantage_column(advantages: Tensor, batch_size: int) -> Tensor:
    """Advantages `(B,)` -> `(B, 1)` so they broadcast over tokens; `(B, T)` is kept."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    if advantages.dim() != 2 or advantages.shape[0] != batch_size:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}; pass one advantage per "
            f"completion, shape ({batch_size},), or per token, shape ({batch_size}, T)"
        )
    return advantages


def check_groups(rewards: Tensor, num_generations: int) -> None:
    """Raise unless `rewards` is (B,) with B a multiple of `num_generations` (whole groups)."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards has shape {tuple(rewards.shape)}; expected one reward per completion (B,). "
                         "Fix: combine reward functions first with combine_rewards.")
    if num_generations < 1 or rewards.numel() % num_generations != 0:
        raise ValueError(f"num_generations={num_generations} does not divide the {rewards.numel()} rewards. "
                         "Fix: pass whole groups, B = num_prompts * num_generations, prompt-major.")


def group_spread(rewards: Tensor, num_generations: int) -> Tensor:
    """(B / G,) the std of each group's rewards, NaN (unscorable) rewards left out; 0 for a
    group with fewer than two scored rewards. ``rewards`` is (B,) prompt-major."""
    from course_lib.ops.stats import nanstd

    return nanstd(rewards.view(-1, num_generations), dim=1).nan_to_num(0.0)


def mean_group_spread(rewards: Tensor, num_generations: int) -> float:
    """``reward_std_in_groups``: :func:`group_spread` averaged, what group advantages divide by."""
    return torch.nanmean(group_spread(rewards, num_generations)).item()


def frac_reward_zero_std(rewards: Tensor, num_generations: int) -> float:
    """TRL's ``frac_reward_zero_std``: the fraction of prompts whose completions all got the same reward.

    Such a group gives every completion a zero advantage under a group baseline (GRPO's mean,
    RLOO's leave-one-out mean): it teaches nothing. NaN (unscorable) rewards are left out of
    their group's spread. ``rewards`` is (B,) prompt-major; with one completion per prompt
    (PPO's default) there is no group and the value is NaN (logged as null).
    """
    if num_generations < 2:
        return float("nan")
    spread = group_spread(rewards, num_generations)
    return torch.isclose(spread, torch.zeros_like(spread)).float().mean().item()


def reward_metrics(rewards: Tensor, num_generations: int, *, in_groups: bool = True,
                   zero_std: bool = True) -> dict[str, float]:
    """TRL 1.16's reward metrics of a (B,) prompt-major batch, NaN (unscorable) rewards left out.

    ``reward`` is the mean; ``reward_std`` is the std over the whole batch (TRL's meaning, the same
    for every algorithm); ``reward_std_in_groups`` the spread inside each group, averaged (what
    group advantages divide by); ``frac_reward_zero_std`` the groups that teach nothing.
    """
    from course_lib.ops.stats import nanstd

    metrics = {"reward": torch.nanmean(rewards).item(), "reward_std": nanstd(rewards).nan_to_num(0.0).item()}
    if in_groups:
        metrics["reward_std_in_groups"] = mean_group_spread(rewards, num_generations)
    if zero_std:
        metrics["frac_reward_zero_std"] = frac_reward_zero_std(rewards, num_generations)
    return metrics


def clip_flags(ratio: Tensor, advantages: Tensor, low: float, high: float,
               dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Where a PPO clip changes the gradient, as 0/1 flags of ``ratio``'s shape: the ratio below
    ``1 - low`` with a negative advantage, and above ``1 + high`` with a positive one (TRL's
    ``clip_ratio/low_*`` and ``clip_ratio/high_*``)."""
    return (((ratio < 1 - low) & (advantages < 0)).to(dtype), ((ratio > 1 + high) & (advantages > 0)).to(dtype))


def check_cliprange(name: str, value: float) -> None:
    """Raise unless a clip range is >= 0."""
    if not 0 <= value:
        raise ValueError(f"{name}={value!r} must be >= 0 (PPO uses 0.2)")


def entropy_metrics(entropies: Tensor | None, mask: Tensor, *names: str) -> dict[str, float]:
    """Mean entropy over the valid tokens, under each of `names` (empty when not computed)."""
    if entropies is None:
        return {}
    weights = mask.to(entropies.dtype)
    value = ((entropies * weights).sum() / weights.sum().clamp(min=1.0)).item()
    return {name: value for name in names}
