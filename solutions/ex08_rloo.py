"""Lesson 08 exercises: RLOO's leave-one-out advantages, the KL folded into the reward
(sequence-level and token-level), and the sequence-level clipped loss."""


import torch


def rloo_advantages(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """REINFORCE Leave-One-Out advantages, prompt-major.

    `rewards` has shape `(B,)` with `B = num_prompts * k`, prompt-major: the `k`
    completions of a prompt are contiguous (`rewards.view(-1, k)` has one prompt per
    row). The baseline of completion `i` is the mean reward of the **other** `k - 1`
    completions of its prompt, so its own reward never enters its baseline:

        A_i = r_i - (sum_{j in group, j != i} r_j) / (k - 1)

    Example: `rloo_advantages(torch.tensor([1., 2., 5., 8.]), 4)` gives
    `[1 - 15/3, 2 - 14/3, 5 - 11/3, 8 - 8/3] = [-4., -2.6667, 1.3333, 5.3333]`.
    The rewards hold no NaN; `k >= 2`.

    Returns:
        `(B,)` advantages, same dtype as `rewards`; `rewards` is left unchanged.
    """
    # BEGIN SOLUTION
    # HINT: rewards.view(-1, k) puts one prompt per row; the others' sum is the row sum minus r_i.
    grouped = rewards.view(-1, k)  # (P, k)
    baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (k - 1)  # (P, k) mean of the others
    return (grouped - baseline).reshape(-1)
    # END SOLUTION


def rloo_reward_with_kl(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor,
                        kl_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO's reward with the KL penalty folded in, one number per completion.

    Per token, the KL estimate is `kl_t = logps_t - ref_logps_t` (the k1 estimator,
    log pi(y_t) - log pi_ref(y_t)), counted only where `mask == 1`. Then:

        non_score_reward = -kl_coef * sum_t kl_t            (B,)
        rlhf_reward      = scores + non_score_reward        (B,)

    Args:
        scores: `(B,)` reward-function / reward-model scores.
        logps: `(B, T)` log-probs of the sampled tokens under the policy.
        ref_logps: `(B, T)` the same under the reference model.
        mask: `(B, T)` 1 for completion tokens, 0 for padding (padded positions may hold
            any value in `logps` and `ref_logps`).
        kl_coef: the KL coefficient beta (`kl_coef`, default 0.05 in the RLOO notes' config).

    Example: `scores=[1.]`, `logps=[[-1., -2.]]`, `ref_logps=[[-1.5, -2.5]]`, mask all 1,
    `kl_coef=0.1`: KL sum = 1.0, non_score_reward = -0.1, rlhf_reward = 0.9.

    Returns:
        `(rlhf_reward, non_score_reward)`, both `(B,)`.
    """
    # BEGIN SOLUTION
    # HINT: multiply the per-token KL by the mask before summing over tokens.
    kl = (logps - ref_logps) * mask.to(logps.dtype)  # (B, T), 0 at padding
    non_score_reward = -kl_coef * kl.sum(dim=1)  # (B,)
    return scores + non_score_reward, non_score_reward
    # END SOLUTION


def token_level_rewards(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor,
                        kl_coef: float) -> torch.Tensor:
    """Reinforce++'s per-token reward (Hu 2025, eq. 1): KL on every token, score at the end.

        r_t = -kl_coef * (logps_t - ref_logps_t)            for every valid token t
        r_t += scores                                        at the LAST valid token

    and `r_t = 0` at padded positions (`mask == 0`). Completions are right-padded and
    every row has at least one valid token; the last valid token of row `b` is at
    index `mask[b].sum() - 1`.

    Example: `scores=[2.]`, `logps=[[-1., -1., 0.]]`, `ref_logps=[[-2., -1., 0.]]`,
    `mask=[[1, 1, 0]]`, `kl_coef=0.5` gives `[[-0.5, 2.0, 0.0]]`.

    Returns:
        `(B, T)` per-token rewards. Summed over tokens they equal `rlhf_reward` of
        `rloo_reward_with_kl`.
    """
    # BEGIN SOLUTION
    # HINT: the score goes at index mask.sum(1) - 1 of each row, not at the last column.
    mask = mask.to(logps.dtype)
    rewards = -kl_coef * (logps - ref_logps) * mask  # (B, T)
    last = (mask.sum(dim=1).long() - 1).clamp(min=0)  # (B,)
    rewards[torch.arange(rewards.shape[0]), last] += scores.to(rewards.dtype)
    return rewards
    # END SOLUTION


def rloo_sequence_clipped_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                               mask: torch.Tensor, cliprange: float = 0.2) -> torch.Tensor:
    """RLOO's PPO-clip loss with the whole completion as one action (TRL 1.16's `RLOOTrainer`).

    Per completion b, with `S_b = sum over valid tokens of logps` (its log-probability
    `log pi(y|x)`) and `S_old_b` the same under the sampling policy:

        r_b    = exp(S_b - S_old_b)                        (one ratio per completion)
        loss_b = max(-A_b * r_b, -A_b * clip(r_b, 1 - cliprange, 1 + cliprange))
        loss   = mean over b of loss_b

    Args:
        logps: `(B, T)` token log-probs under the current policy (differentiable).
        old_logps: `(B, T)` token log-probs when the batch was sampled (no gradient).
        advantages: `(B,)` leave-one-out advantages.
        mask: `(B, T)` 1 for completion tokens; padded positions may hold anything.
        cliprange: the clip range c.

    Example: one completion of two tokens with log-ratios 0.2 and 0.1 (r = e^0.3 = 1.35),
    A = +1, c = 0.2: the clipped branch wins, loss = -1.2, and its gradient is 0.

    Returns:
        A scalar tensor.
    """
    # BEGIN SOLUTION
    # HINT: sum the log-ratios over the completion's tokens first, then exponentiate once.
    valid = mask != 0
    log_ratio = torch.where(valid, logps - old_logps, torch.zeros_like(logps)).sum(dim=1)  # (B,)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    return torch.max(unclipped, clipped).mean()
    # END SOLUTION
