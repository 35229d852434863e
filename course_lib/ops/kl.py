"""Per-token KL estimators (k1, k2, k3) between the policy and a reference model.

KL estimators (John Schulman, "Approximating KL Divergence", 2020). With tokens sampled
from the policy `pi` and `log_r = ref_logps - logps = log(ref(x) / pi(x))`, three
single-sample estimators of the reverse divergence `KL(pi || ref) = E_pi[log pi - log ref]`:

    k1 = -log_r                      unbiased, high variance, can be negative
    k2 = log_r ** 2 / 2              biased (low for small KL), low variance, >= 0
    k3 = (exp(log_r) - 1) - log_r    unbiased, low variance, >= 0  (GRPO's KL term)

k3 is what DeepSeekMath's GRPO (Shao et al. 2024, eq. 4) and TRL add to the loss with
coefficient `beta`. The estimates are per token; summing over a completion estimates the
sequence-level KL because the log-ratio of a sequence is the sum over its tokens.

Value versus gradient: the properties above are about the estimators' *values*. Used as
a loss on sampled tokens held fixed (as GRPO does with `beta * k3`), their expected
gradients are those of other quantities: E[grad k1] = 0, E[grad k2] = grad KL(pi || ref),
E[grad k3] = grad KL(ref || pi), the forward divergence (which agrees with the reverse one
to first order near ref). Putting k1 in the reward instead, as PPO-style RLHF does, lets
the policy gradient follow grad KL(pi || ref). `tests/lib/test_kl_gradients.py` checks this.

Simplifications: the estimators assume the tokens were sampled from `pi` (the current
policy); off-policy, the value is an estimate under the sampling distribution instead.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name}={shape}" for name, shape in shapes.items())
        raise ValueError(f"shapes differ ({listed}); pass per-token tensors of one shape (B, T)")


def kl_k1(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """k1 estimator of KL(pi || ref) per token: `logps - ref_logps`.

    Args:
        logps: log pi(x_t) of the sampled tokens under the policy, `(B, T)`.
        ref_logps: log ref(x_t) of the same tokens under the reference model, `(B, T)`.

    Returns:
        `(B, T)`; unbiased for tokens sampled from pi, but negative whenever the
        reference likes a token more than the policy does.
    """
    check_same_shape(logps=logps, ref_logps=ref_logps)
    return logps - ref_logps


def kl_k2(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """k2 estimator of KL(pi || ref) per token: `(logps - ref_logps) ** 2 / 2`.

    Args:
        logps: `(B, T)` policy log-probs of the sampled tokens.
        ref_logps: `(B, T)` reference log-probs of the same tokens.

    Returns:
        `(B, T)`, always >= 0; biased, but close to the true KL when the two
        distributions are close (its expectation is an f-divergence that matches KL to
        second order).
    """
    check_same_shape(logps=logps, ref_logps=ref_logps)
    return 0.5 * (logps - ref_logps) ** 2


def kl_k3(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """k3 estimator of KL(pi || ref) per token: `exp(ref - logps) - (ref - logps) - 1`.

    This is the KL term of GRPO (Shao et al. 2024, eq. 4) and of TRL's GRPOTrainer.

    Args:
        logps: `(B, T)` policy log-probs of the sampled tokens.
        ref_logps: `(B, T)` reference log-probs of the same tokens.

    Returns:
        `(B, T)`, always >= 0 (since `exp(u) >= 1 + u`), unbiased for tokens sampled from
        pi, and 0 exactly where the two log-probs agree.

    Computed as `expm1(u) - u`: `expm1` is accurate near 0 and never rounds below `u`, so
    the result is >= 0 in floating point too, where `exp(u) - u - 1` can give -1e-16
    (float64, `u` near 1e-9).
    """
    check_same_shape(logps=logps, ref_logps=ref_logps)
    log_r = ref_logps - logps
    return torch.expm1(log_r) - log_r
