"""Lesson 04 exercises: the pieces PPO adds when the agent is a language model.

Per-token rewards (KL shaping, score on the last token, the missing-EOS penalty),
advantage whitening, the clipped value loss of the critic, and the Bradley-Terry loss of
the reward model.
"""

import torch


def per_token_rewards(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor,
                      beta: float, is_eos: torch.Tensor | None = None,
                      missing_eos_penalty: float | None = None) -> torch.Tensor:
    """The reward PPO sees at each token of a completion (Ziegler et al. 2019).

    Every generated token pays a KL price for leaving the reference model, and the score
    of the whole completion (from a reward model or a reward function) arrives once, on
    its last token:

        r_t  = -beta * (logps_t - ref_logps_t)       for every valid token t
        r_t += score                                  at the LAST VALID token of the row

    and `r_t = 0` at padded positions (`mask == 0`). Completions are right-padded and
    every row has at least one valid token; row `b`'s last valid token is at index
    `mask[b].sum() - 1`, which is not the last column when the row is shorter than `T`.

    The "EOS trick": when `is_eos` and `missing_eos_penalty` are given, a completion that
    never emitted EOS (`is_eos[b]` is False, it was cut at the length limit) gets its
    score lowered by `missing_eos_penalty` before it is placed. Do not modify `scores`
    in place.

    Args:
        scores: `(B,)` one score per completion.
        logps, ref_logps: `(B, T)` log-probs of the sampled tokens under the policy and
            under the frozen reference model.
        mask: `(B, T)` 1 for completion tokens, 0 for padding.
        beta: KL coefficient (`kl_coef`).
        is_eos: `(B,)` bool, True where the completion ended with EOS; None = no penalty.
        missing_eos_penalty: subtracted from the score of completions without EOS.

    Example: `scores=[2.]`, `logps=[[-1., -1., 0.]]`, `ref_logps=[[-2., -1., 0.]]`,
    `mask=[[1, 1, 0]]`, `beta=0.5` gives `[[-0.5, 2.0, 0.0]]`; with `is_eos=[False]` and
    `missing_eos_penalty=1.0` it gives `[[-0.5, 1.0, 0.0]]`.

    Returns:
        `(B, T)` per-token rewards.
    """
    # BEGIN SOLUTION
    # HINT: the score goes at index mask.sum(1) - 1 of each row, not at the last column.
    # HINT: KL shaping is -beta * (logps - ref_logps): a token the policy likes MORE than the reference pays.
    mask = mask.to(logps.dtype)
    scores = scores.to(logps.dtype).clone()  # (B,), never change the caller's tensor
    if is_eos is not None and missing_eos_penalty is not None:
        scores[~is_eos.bool()] -= missing_eos_penalty
    rewards = -beta * (logps - ref_logps) * mask  # (B, T), 0 at padding
    last = (mask.sum(dim=1).long() - 1).clamp(min=0)  # (B,)
    rewards[torch.arange(rewards.shape[0]), last] += scores
    return rewards
    # END SOLUTION


def whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalize `x` over the valid positions of the WHOLE batch (PPO's whitening).

    With `mean` and `var` computed over all entries where `mask == 1` (all rows
    together, unbiased variance: divide by the count minus 1):

        whitened = (x - mean) / sqrt(var + 1e-8)
        if not shift_mean: whitened = whitened + mean   (keeps the batch mean, not each sign)

    and 0 at padded positions. PPO for RLHF whitens the advantages (`shift_mean=True`)
    and optionally the per-token rewards (`whiten_rewards`, `shift_mean=False`).

    Args:
        x: `(B, T)` values.
        mask: `(B, T)` 1 for valid tokens, 0 for padding (at least two valid entries).
        shift_mean: subtract the mean (True), or add it back after scaling (False).

    Example: `x=[[1., 2., 9.], [3., 0., 0.]]`, `mask=[[1, 1, 0], [1, 0, 0]]`: the valid
    values 1, 2, 3 have mean 2 and unbiased variance 1, so the result is
    `[[-1., 0., 0.], [1., 0., 0.]]` (up to the 1e-8).

    Returns:
        `(B, T)` tensor.
    """
    # BEGIN SOLUTION
    # HINT: the padded entries must not enter the mean or the variance, and they come out as 0.
    mask = mask.to(x.dtype)
    count = mask.sum()
    mean = (x * mask).sum() / count
    var = (((x - mean) ** 2) * mask).sum() / (count - 1)  # unbiased
    whitened = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask
    # END SOLUTION


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               cliprange_value: float = 0.2) -> torch.Tensor:
    """PPO's clipped value loss, as in the RLHF implementations.

    The critic regresses its per-token values on the GAE returns, but a new value may
    not move further than `cliprange_value` from the value at rollout time without the
    loss noticing:

        v_clipped = clip(values, old_values - cliprange_value, old_values + cliprange_value)
        loss_t    = max((values - returns)^2, (v_clipped - returns)^2)
        loss      = 0.5 * mean of loss_t over the valid tokens (mask == 1) of the batch

    Args:
        values: `(B, T)` current value predictions (differentiable).
        old_values: `(B, T)` the value head's predictions when the batch was sampled
            (constants).
        returns: `(B, T)` regression targets (advantages + old values).
        mask: `(B, T)` 1 for valid tokens.
        cliprange_value: the clip range c.

    Example: `values=[[1.0]]`, `old_values=[[0.0]]`, `returns=[[1.0]]`, `c=0.2`: the
    unclipped error is 0, the clipped one (0.2 - 1)^2 = 0.64, so the loss is
    0.5 * 0.64 = 0.32.

    Returns:
        A scalar tensor.
    """
    # BEGIN SOLUTION
    # HINT: the clip is centred on old_values, and the max (not the min) keeps the worse of the two errors.
    mask = mask.to(values.dtype)
    old_values = old_values.detach()
    clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)  # (B, T)
    per_token = torch.max((values - returns) ** 2, (clipped - returns) ** 2)  # (B, T)
    return 0.5 * (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    # END SOLUTION


def bradley_terry_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> torch.Tensor:
    """The reward model's loss on preference pairs (Bradley-Terry; InstructGPT eq. 1).

    A labeller preferred completion `chosen` to `rejected` for the same prompt. The
    Bradley-Terry model says that happens with probability `sigmoid(s_chosen - s_rejected)`;
    the reward model is trained to maximise the likelihood of the observed choices:

        loss = -mean over pairs of log sigmoid(chosen_scores - rejected_scores)

    Compute `log sigmoid` in one numerically stable step (`torch.nn.functional.logsigmoid`):
    `torch.log(torch.sigmoid(x))` underflows to `-inf` once `x` is below about -100.

    Args:
        chosen_scores: `(N,)` the reward model's scores of the preferred completions.
        rejected_scores: `(N,)` its scores of the other completion of each pair.

    Example: scores `chosen=[0., 3.]`, `rejected=[0., 1.]`: the first pair is a coin flip,
    `-log(1/2) = 0.6931`; the second wins by 2, `-log sigmoid(2) = 0.1269`; the loss is
    their mean, 0.4100.

    Returns:
        A scalar tensor.
    """
    # BEGIN SOLUTION
    # HINT: only the difference chosen - rejected matters; F.logsigmoid keeps huge gaps finite.
    return -torch.nn.functional.logsigmoid(chosen_scores - rejected_scores).mean()
    # END SOLUTION
