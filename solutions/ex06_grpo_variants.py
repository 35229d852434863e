"""Lesson 06 exercises: the loss aggregations of the GRPO family, GSPO's sequence ratio,
and two-sided clipping."""

import torch


def aggregate_loss(per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str,
                   max_completion_length: int | None = None, num_items: float | None = None) -> torch.Tensor:
    """Reduce per-token losses `(B, T)` to the scalar loss of one micro-batch.

    With `S = sum over valid tokens of per_token_loss` (valid: `mask == 1`) and `L_i`
    the number of valid tokens of completion i:

    - `"grpo"`: mean over completions of each completion's token mean,
      `(1 / B) * sum_i (sum_t loss_it) / L_i`;
    - `"bnpo"`: `S / (valid tokens of this batch)`;
    - `"dr_grpo"`: `S / (B * max_completion_length)`;
    - `"dapo"`: `S / num_items`, where `num_items` counts the valid tokens of the whole
      accumulated batch (all micro-batches of the optimizer step); `None` means this
      batch is the whole accumulated batch, so it is this batch's count.

    A completion with no valid token (every position masked) contributes 0; no count
    may be 0 in a denominator (clamp counts to at least 1).

    Example: `per_token_loss = [[1, 2, 3, 0], [4, 0, 0, 0]]`, `mask = [[1, 1, 1, 0],
    [1, 0, 0, 0]]`: grpo = (2 + 4) / 2 = 3, bnpo = 10 / 4 = 2.5, dr_grpo with
    `max_completion_length=4`: 10 / 8 = 1.25, dapo with `num_items=8`: 1.25.

    Returns:
        A scalar tensor.
    """
    # BEGIN SOLUTION
    # HINT: mask the loss first: padded positions may hold anything.
    mask = mask.to(per_token_loss.dtype)
    masked = torch.where(mask != 0, per_token_loss, torch.zeros_like(per_token_loss)) * mask  # (B, T)
    total = masked.sum()
    if loss_type == "grpo":
        return (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return total / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length")
        return total / (per_token_loss.shape[0] * max_completion_length)
    if loss_type == "dapo":
        count = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=per_token_loss.dtype)
        return total / count.clamp(min=1.0)
    raise ValueError(f"loss_type={loss_type!r}: use 'grpo', 'bnpo', 'dr_grpo' or 'dapo'")
    # END SOLUTION


def sequence_level_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's importance ratio: one per completion, the geometric mean of its token ratios.

        s_i = exp( (1 / L_i) * sum over valid tokens t of (logps_it - old_logps_it) )

    Args:
        logps, old_logps: `(B, T)` log-probs under the current and the sampling policy.
        mask: `(B, T)` 1 for valid tokens; `L_i` is the row's count (clamp it to >= 1).

    Example: token ratios 2 and 1 (log-ratios log 2 and 0) give sqrt(2) = 1.414, not
    their product 2 nor their arithmetic mean 1.5.

    Returns:
        `(B,)` sequence-level ratios.
    """
    # BEGIN SOLUTION
    mask = mask.to(logps.dtype)
    log_ratio = (logps - old_logps) * mask  # (B, T)
    return torch.exp(log_ratio.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0))
    # END SOLUTION


def two_sided_clip_objective(ratio: torch.Tensor, advantages: torch.Tensor, epsilon: float = 0.2,
                             epsilon_high: float | None = None, delta: float | None = None) -> torch.Tensor:
    """Per-token clipped objective with clip-higher (DAPO) and two-sided clipping (INTELLECT-2).

        objective = min( min(r, delta) * A, clip(r, 1 - epsilon, 1 + epsilon_high) * A )

    `epsilon_high=None` means `epsilon_high = epsilon` (symmetric clipping); `delta=None`
    means no cap on the unclipped term (standard PPO/GRPO).

    Args:
        ratio: `(B, T)` probability ratios r = pi / pi_old.
        advantages: `(B,)` one per completion (broadcast over tokens).

    Example: r = 3, A = -1, epsilon = 0.2: standard clipping gives -3 (a huge push);
    with `delta=1.5` it gives -1.5.

    Returns:
        `(B, T)` objective values (to maximise; the loss is their negative).
    """
    # BEGIN SOLUTION
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    adv = advantages.unsqueeze(1)  # (B, 1)
    unclipped = ratio if delta is None else torch.clamp(ratio, max=delta)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    return torch.min(unclipped * adv, clipped * adv)
    # END SOLUTION

