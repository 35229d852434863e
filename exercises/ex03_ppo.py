# This file is generated from solutions/ex03_ppo.py by `python -m course_lib make-stubs`.
# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.
"""Lesson 03 exercises: PPO's clipped surrogate, GAE, and the k1 / k3 KL estimators."""

from __future__ import annotations

import torch


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, epsilon: float = 0.2) -> torch.Tensor:
    """PPO's clipped surrogate objective per token (Schulman et al. 2017, eq. 7).

    Args:
        ratio: ``(B, T)`` probability ratios ``r = pi_theta / pi_old`` of the sampled
            tokens (differentiable).
        advantages: ``(B, T)`` advantage of each token, or ``(B, 1)`` one per completion
            (it broadcasts over the tokens).
        epsilon: clip range; the ratio is clipped to ``[1 - epsilon, 1 + epsilon]``.

    Returns:
        ``(B, T)`` the objective to MAXIMISE, per token:
        ``min(r * A, clip(r, 1 - epsilon, 1 + epsilon) * A)``. No averaging.

    Example: ``epsilon = 0.2``: ``r = 1.5, A = 1`` gives ``min(1.5, 1.2) = 1.2``;
    ``r = 1.5, A = -1`` gives ``min(-1.5, -1.2) = -1.5``.
    """
    # HINT: clip the ratio (torch.clamp), not the advantage; take the min of the two products.
    raise NotImplementedError("Exercise: replace this line with your code.")


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float = 1.0, lam: float = 0.95) -> torch.Tensor:
    """Generalized Advantage Estimation for one trajectory (Schulman et al. 2016, eq. 16).

    Args:
        rewards: ``(T,)`` reward received after each step (token).
        values: ``(T,)`` the value model's estimate ``V(s_t)`` before each step.
        gamma: discount factor.
        lam: GAE's lambda: 0 gives the one-step TD error, 1 the full return minus ``V``.

    Returns:
        ``(T,)`` advantages ``A_t = delta_t + gamma * lam * A_{t+1}`` with the TD error
        ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)``. The episode ends after the last
        step, so ``V(s_T) = 0`` and ``A_T = 0``.

    Example: ``rewards = [0, 0, 1]``, ``values = [0.5, 0.6, 0.7]``, ``gamma = 1``:
    ``lam = 0`` gives ``[0.1, 0.1, 0.3]``; ``lam = 1`` gives ``[0.5, 0.4, 0.3]``.
    """
    # HINT: walk backwards from the last step, carrying A_{t+1} (0 after the end).
    raise NotImplementedError("Exercise: replace this line with your code.")


def kl_k1(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """The k1 estimator of ``KL(pi || ref)``, one value per sampled token.

    Args:
        logps: ``(B, T)`` ``log pi(x)`` of tokens sampled from the policy ``pi``.
        ref_logps: ``(B, T)`` ``log ref(x)`` of the same tokens under the reference model.

    Returns:
        ``(B, T)`` ``log pi(x) - log ref(x)``: unbiased, but noisy and sometimes negative.

    Example: ``pi(x) = 0.5``, ``ref(x) = 0.25`` give ``log 2 = 0.693``.
    """
    raise NotImplementedError("Exercise: replace this line with your code.")


def kl_k3(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """The k3 estimator of ``KL(pi || ref)`` (Schulman 2020), one value per sampled token.

    With the log-ratio ``u = log ref(x) - log pi(x)`` (reference over policy), k3 is
    ``exp(u) - u - 1``: unbiased like k1, never negative, and much less noisy. It is the
    KL term of GRPO.

    Args:
        logps: ``(B, T)`` ``log pi(x)`` of tokens sampled from the policy.
        ref_logps: ``(B, T)`` ``log ref(x)`` of the same tokens.

    Returns:
        ``(B, T)`` k3 values, all ``>= 0``.

    Example: ``pi(x) = 0.5``, ``ref(x) = 0.25``: ``u = log 0.5``, k3 ``= 0.5 + 0.693 - 1 = 0.193``.
    """
    # HINT: u is ref minus policy; exp(u) = ref(x) / pi(x).
    raise NotImplementedError("Exercise: replace this line with your code.")
