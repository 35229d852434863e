"""Advantages: how much better a completion (or a token) did than a baseline.

- `group_advantages`: GRPO's group-relative advantage (Shao et al. 2024, DeepSeekMath,
  eq. 3 of the outcome-supervision variant), `(r - mean_group) / (std + 1e-4)`, with
  the std of the group, of the whole batch, or no scaling (Dr. GRPO, Liu et al. 2025).
  Same semantics as TRL 1.16's `GRPOTrainer`: NaN rewards (reward functions that
  returned None) are ignored by the mean and the std, the std is Bessel-corrected, and
  any advantage that is still NaN becomes 0.
- `combine_rewards`: weighted sum of several reward functions, ignoring NaN entries.
- `rloo_advantages`: REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al. 2024):
  the baseline of a completion is the mean reward of the *other* K - 1 completions of
  its prompt.
- `gae`: Generalized Advantage Estimation for PPO (Schulman et al. 2016, eq. 16) on
  per-token rewards and values, right-padded by a mask.
- Reinforce++ helpers (Hu 2025): `clip_rewards`, `normalize_rewards`,
  `normalize_advantages`; `whiten` for PPO.

Layout: rewards are prompt-major, the G completions of a prompt are contiguous, so
`rewards.view(-1, G)` has one row per prompt. TRL's old RLOO docs use generation-major
order; `generation_major_to_prompt_major` and its inverse translate.

Simplifications: single process (TRL gathers rewards across processes before the same
computation); GAE assumes right padding (a mask of ones followed by zeros per row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_lib.masking import masked_whiten

Tensor = torch.Tensor

__all__ = [
    "GroupStats",
    "clip_rewards",
    "combine_rewards",
    "gae",
    "generation_major_to_prompt_major",
    "group_advantages",
    "nanstd",
    "normalize_advantages",
    "normalize_rewards",
    "prompt_major_to_generation_major",
    "rloo_advantages",
    "whiten",
]

# Added to the std before dividing; TRL uses the same constant.
STD_EPS = 1e-4


def nanstd(x: Tensor, dim: int | None = None) -> Tensor:
    """Bessel-corrected standard deviation ignoring NaN entries.

    Returns NaN where fewer than two values are present (an undefined spread), as
    TRL's `nanstd` does; `dim=None` reduces everything to a scalar.
    """
    if dim is None:
        x, dim = x.reshape(-1), 0
    count = (~torch.isnan(x)).sum(dim=dim)
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    variance = torch.nansum((x - mean) ** 2, dim=dim) / (count - 1).clamp(min=1)
    return torch.where(count > 1, variance.sqrt(), torch.full_like(variance, float("nan")))


def _check_groups(rewards: Tensor, num_generations: int) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards has shape {tuple(rewards.shape)}; expected one reward per completion (B,). "
                         "Fix: combine reward functions first with combine_rewards.")
    if num_generations < 1 or rewards.numel() % num_generations != 0:
        raise ValueError(f"num_generations={num_generations} does not divide the {rewards.numel()} rewards. "
                         "Fix: pass whole groups, B = num_prompts * num_generations, prompt-major.")


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
    _check_groups(rewards, num_generations)
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


def combine_rewards(
    rewards_per_func: Tensor | Sequence[Sequence[float | None]],
    reward_weights: Sequence[float] | Tensor | None = None,
) -> Tensor:
    """Weighted sum of the reward functions' outputs, skipping NaN / None.

    Args:
        rewards_per_func: `(B, F)` one column per reward function; NaN or None means
            "this function does not apply to this completion".
        reward_weights: `F` weights; None = all 1.0.

    Returns:
        `(B,)` `nansum_f(w_f * r_f)`. A row where *every* function returned NaN is NaN
        (as in TRL 1.16: such a completion is unscorable and later gets advantage 0),
        not 0 as a plain nansum would give.
    """
    if not isinstance(rewards_per_func, Tensor):
        rewards_per_func = torch.tensor(
            [[float("nan") if r is None else float(r) for r in row] for row in rewards_per_func],
            dtype=torch.float32)
    if rewards_per_func.dim() != 2:
        raise ValueError(f"rewards_per_func has shape {tuple(rewards_per_func.shape)}; expected (B, F). "
                         "Fix: stack one column per reward function.")
    num_funcs = rewards_per_func.shape[1]
    if reward_weights is None:
        weights = torch.ones(num_funcs, dtype=rewards_per_func.dtype, device=rewards_per_func.device)
    else:
        weights = torch.as_tensor(reward_weights, dtype=rewards_per_func.dtype, device=rewards_per_func.device)
        if weights.shape != (num_funcs,):
            raise ValueError(f"reward_weights={list(weights.tolist())} has {weights.numel()} entries for "
                             f"{num_funcs} reward functions. Fix: one weight per function, or None.")
    combined = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)  # (B,)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    return combined.masked_fill(unscorable, float("nan"))


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
    _check_groups(rewards, num_generations)
    if num_generations < 2:
        raise ValueError(f"num_generations={num_generations}: a leave-one-out baseline needs K >= 2. "
                         "Fix: sample at least two completions per prompt.")
    grouped = rewards.view(-1, num_generations)  # (P, K)
    scorable = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)  # (P, 1)
    total = torch.nansum(grouped, dim=1, keepdim=True)  # (P, 1)
    baseline = (total - grouped) / (scorable - 1)  # mean of the others; 0/0 -> NaN
    return torch.nan_to_num((grouped - baseline).view(-1), nan=0.0, posinf=0.0, neginf=0.0)


def generation_major_to_prompt_major(x: Tensor, num_generations: int) -> Tensor:
    """Reorder `(K * P, ...)` with index `k * P + p` into index `p * K + k`."""
    rest = x.shape[1:]
    return x.reshape(num_generations, -1, *rest).transpose(0, 1).reshape(x.shape)


def prompt_major_to_generation_major(x: Tensor, num_generations: int) -> Tensor:
    """Inverse of `generation_major_to_prompt_major`."""
    rest = x.shape[1:]
    return x.reshape(-1, num_generations, *rest).transpose(0, 1).reshape(x.shape)


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


def whiten(x: Tensor, mask: Tensor | None = None, shift_mean: bool = True) -> Tensor:
    """Zero-mean, unit-variance `x` over the valid positions (PPO's advantage whitening).

    `shift_mean=False` keeps the mean (used to whiten rewards). See `masking.masked_whiten`.
    """
    return masked_whiten(x, torch.ones_like(x) if mask is None else mask, shift_mean=shift_mean)


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


def normalize_rewards(rewards: Tensor, eps: float = 1e-8) -> Tensor:
    """Standardise a batch of scores: `(r - mean) / (std + eps)`, NaN-aware.

    Reinforce++'s reward normalisation, as in TRL's on-policy RLOO (which then clips the
    result with `clip_rewards(r, reward_clip_range)`). With fewer than two finite
    values the spread is undefined and the result is `r - mean` (0 for one value).
    """
    centred = rewards - torch.nanmean(rewards)
    std = nanstd(rewards)
    return centred / (std + eps) if not torch.isnan(std) else centred


def normalize_advantages(advantages: Tensor, eps: float = 1e-8) -> Tensor:
    """Standardise advantages over the batch (Reinforce++ / RLOO `normalize_advantage`).

    Same formula as `normalize_rewards`; TRL 1.16 uses eps=1e-4 here, its older RLOO 1e-8.
    """
    return normalize_rewards(advantages, eps=eps)
