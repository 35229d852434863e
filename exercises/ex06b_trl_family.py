# This file is generated from solutions/ex06b_trl_family.py by `python -m course_lib make-stubs`.
# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.
"""Lesson 06b exercises: CISPO's per-token loss and the high-entropy token mask."""

import torch


def cispo_per_token_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                         epsilon_max: float = 5.0) -> torch.Tensor:
    """CISPO's per-token loss (MiniMax-M1): clip the importance weight, keep every token's gradient.

        loss_t = -sg(min(r_t, epsilon_max)) * A * logps_t,   r_t = exp(logps_t - old_logps_t)

    `sg` is stop-gradient: the clipped weight is a constant, so the gradient with respect to
    `logps_t` is `-min(r_t, epsilon_max) * A`, never 0. (PPO's clip instead zeroes the
    gradient of a token whose ratio left the range.) There is no lower bound.

    Args:
        logps: `(B, T)` current log-probs (differentiable).
        old_logps: `(B, T)` log-probs at sampling time.
        advantages: `(B,)` one per completion (broadcast over tokens).
        epsilon_max: the cap on the ratio (TRL's `epsilon_high` with `loss_type="cispo"`).

    Example: logps = log 0.4, old = log 0.05 (r = 8), A = 1, epsilon_max = 5: the loss is
    -5 * log 0.4 = +4.58, and its gradient with respect to logps is -5.

    Returns:
        `(B, T)` per-token losses.
    """
    # HINT: detach the clipped ratio, but not logps.
    raise NotImplementedError("Exercise: replace this line with your code.")


def high_entropy_token_mask(entropies: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """The tokens kept by `top_entropy_quantile=quantile` (Wang et al. 2025, as in TRL 1.16).

    The cut is the `1 - quantile` quantile (`torch.quantile`, linear interpolation) of the
    entropies of the **valid** tokens only (`mask == 1`); a valid token is kept when its
    entropy is at least the cut (ties at the cut are kept). Padded tokens are never kept,
    and when no token is valid nothing is kept.

    Args:
        entropies: `(B, T)` per-token entropies (nats, >= 0).
        mask: `(B, T)` 1 for valid tokens, 0 for padding.
        quantile: the fraction of tokens to keep, in (0, 1]; 1.0 keeps every valid token.

    Example: entropies `[[0.1, 0.9, 0.5, 0.2]]`, mask `[[1, 1, 1, 0]]`, quantile 0.5: the
    valid entropies are 0.1, 0.9, 0.5, their 0.5 quantile is 0.5, so the kept tokens are
    `[[False, True, True, False]]` (0.5 sits at the cut and is kept; the padded 0.2 never is).

    Returns:
        `(B, T)` bool.
    """
    # HINT: take the quantile over entropies[mask.bool()], not over the whole (B, T) tensor.
    raise NotImplementedError("Exercise: replace this line with your code.")
