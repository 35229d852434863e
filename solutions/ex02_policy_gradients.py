"""Lesson 02 exercises: the REINFORCE loss of a language model, baselines, discounted returns."""

from __future__ import annotations

import torch


def reinforce_loss(logps: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The REINFORCE surrogate loss for a batch of completions (Williams 1992).

    Args:
        logps: ``(B, T)`` log-probability of each sampled token under the policy
            (differentiable). Positions after the end of a completion hold junk.
        rewards: ``(B,)`` one reward (or advantage) per completion; a constant, no gradient.
        mask: ``(B, T)`` 1 for the completion's real tokens, 0 for padding.

    Returns:
        A scalar: ``-mean_b(rewards[b] * log pi(completion b))``, where the log-probability
        of a whole completion is the sum of its real tokens' log-probs
        (``sum_t logps[b, t] * mask[b, t]``). Minimising it follows the policy gradient.

    Example: ``logps = [[-1, -2, -9]]``, ``mask = [[1, 1, 0]]``, ``rewards = [2]`` give a
    sequence log-prob of ``-3`` and a loss of ``-(2 * -3) = 6``.
    """
    # BEGIN SOLUTION
    # HINT: padded positions must not count: multiply by the mask before summing over T.
    sequence_logps = (logps * mask).sum(dim=-1)  # (B,)
    return -(rewards * sequence_logps).mean()
    # END SOLUTION


def baseline_subtract(rewards: torch.Tensor, kind: str = "mean") -> torch.Tensor:
    """Advantages ``reward - baseline`` for groups of completions of the same prompt.

    Args:
        rewards: ``(P, G)``: row ``p`` holds the rewards of the ``G`` completions sampled
            for prompt ``p``. Baselines are computed within each row.
        kind: ``"mean"``: the baseline is the row's mean reward (every completion
            included); ``"leave_one_out"``: the baseline of completion ``i`` is the mean
            of the *other* ``G - 1`` rewards of its row (needs ``G >= 2``). Any other
            value raises ``ValueError``.

    Returns:
        ``(P, G)`` advantages.

    Example: one row ``[1, 2, 3, 4]``: ``"mean"`` gives ``[-1.5, -0.5, 0.5, 1.5]``;
    ``"leave_one_out"`` gives ``[1 - 3, 2 - 8/3, 3 - 7/3, 4 - 2] = [-2, -2/3, 2/3, 2]``.
    """
    # BEGIN SOLUTION
    if kind == "mean":
        return rewards - rewards.mean(dim=-1, keepdim=True)
    if kind == "leave_one_out":
        group_size = rewards.shape[-1]
        # HINT: the mean of the others is (row sum - own reward) / (G - 1).
        others_mean = (rewards.sum(dim=-1, keepdim=True) - rewards) / (group_size - 1)
        return rewards - others_mean
    raise ValueError(f"kind={kind!r} is unknown: use 'mean' or 'leave_one_out'")
    # END SOLUTION


def discounted_returns(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """Reward-to-go of every step of one episode: ``G_t = sum_{k >= 0} gamma**k * r_{t+k}``.

    Args:
        rewards: ``(T,)`` the reward received after each step.
        gamma: discount factor in ``[0, 1]``.

    Returns:
        ``(T,)`` returns. They satisfy ``G_t = r_t + gamma * G_{t+1}`` with ``G_T = 0``,
        so one backward pass over the episode computes them all.

    Example: ``rewards = [0, 0, 1]``, ``gamma = 0.9`` give ``[0.81, 0.9, 1.0]``.
    """
    # BEGIN SOLUTION
    returns = torch.zeros_like(rewards)
    running = 0.0
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns
    # END SOLUTION
