"""How noisy is the REINFORCE gradient, and what does a baseline buy?

For a categorical policy ``pi = softmax(z)`` and a reward ``r(a)``, the policy
gradient is ``grad J = E_{a~pi}[ r(a) * grad log pi(a) ]`` (the score-function or
log-derivative trick; Williams 1992). REINFORCE estimates it from ``n`` samples:

    g = 1/n * sum_i (r(a_i) - b_i) * grad_z log pi(a_i),   grad_z log pi(a) = one_hot(a) - pi

Subtracting a baseline ``b_i`` that does not depend on ``a_i`` leaves the mean of
``g`` unchanged, because ``E[grad log pi(a)] = sum_a grad pi(a) = grad 1 = 0``, while
its variance usually drops a lot. This module measures that by repeating the
estimate over many independent trials.

Baselines compared (and what the course later calls them):
- ``None``: plain REINFORCE.
- a number: any constant, e.g. the true ``E_pi[r]`` (exactly unbiased).
- ``"leave_one_out"``: ``b_i`` = mean reward of the *other* ``n - 1`` samples (RLOO):
  independent of ``a_i``, so exactly unbiased.
- ``"mean"``: ``b_i`` = mean of all ``n`` rewards, *including* ``r_i`` (GRPO's group
  mean). Because ``b_i`` contains ``r_i`` the expectation shrinks by ``(n - 1) / n``:
  the direction is right, the length is ``(n-1)/n`` of the true gradient. RLOO's
  ``n / (n - 1)`` rescaling is exactly what undoes this.

What it simplifies: rewards are a deterministic function of the answer, so the exact
gradient is available in closed form, ``grad J = pi * (r - E_pi[r])``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

__all__ = ["GradientVarianceResult", "exact_policy_gradient", "gradient_variance"]


@dataclass
class GradientVarianceResult:
    """Statistics of ``trials`` independent REINFORCE gradient estimates.

    Attributes:
        gradients: ``(trials, V)`` every estimate.
        mean_gradient: ``(V,)`` average estimate.
        variance: ``(V,)`` per-component variance across trials.
        total_variance: ``variance.sum()``, i.e. ``E||g - E g||^2``: one number to compare.
        exact_gradient: ``(V,)`` the true ``grad J`` (closed form).
        expected_scale: what ``E[g]`` should equal as a multiple of ``exact_gradient``
            (1 for unbiased baselines, ``(n-1)/n`` for ``"mean"``).
        baseline: the baseline used.
        n_samples: samples per estimate.
    """

    gradients: np.ndarray
    mean_gradient: np.ndarray
    variance: np.ndarray
    total_variance: float
    exact_gradient: np.ndarray
    expected_scale: float
    baseline: float | str | None
    n_samples: int

    @property
    def mean_gradient_stderr(self) -> np.ndarray:
        """``(V,)`` standard error of ``mean_gradient`` (for tolerance checks)."""
        return np.sqrt(self.variance / self.gradients.shape[0])


def exact_policy_gradient(
    policy_logits: Sequence[float] | torch.Tensor, rewards_per_action: Sequence[float]
) -> np.ndarray:
    """``(V,)`` exact ``d E_pi[r] / dz = pi * (r - E_pi[r])`` for ``pi = softmax(z)``.

    Teaches: the gradient raises answers that beat the policy's average reward and lowers
    the others, each in proportion to how often the policy produces it.
    """
    probs = torch.softmax(torch.as_tensor(policy_logits, dtype=torch.float64), dim=0).numpy()
    r = np.asarray(rewards_per_action, dtype=float)
    return probs * (r - probs @ r)


def gradient_variance(
    policy_logits: Sequence[float] | torch.Tensor,
    reward_fn: Callable[[int], float] | Sequence[float],
    n_samples: int = 8,
    baseline: float | str | None = None,
    trials: int = 2000,
    seed: int | None = 0,
) -> GradientVarianceResult:
    """Empirical mean and variance of the REINFORCE gradient estimator.

    Each trial draws ``n_samples`` actions from ``softmax(policy_logits)``, forms the
    surrogate loss ``-1/n * sum_i (r_i - b_i) * log pi(a_i)`` and takes its gradient
    with torch autograd (all trials in one backward pass, one row of logits per trial).

    Args:
        policy_logits: ``(V,)`` logits of the policy.
        reward_fn: ``f(action_index) -> reward``, or a ``(V,)`` sequence of rewards.
        n_samples: samples per gradient estimate (``n``; >= 2 for ``"leave_one_out"``).
        baseline: ``None``, a number, ``"mean"`` or ``"leave_one_out"`` (see module doc).
        trials: independent estimates.
        seed: seeds the sampling; the same seed gives every baseline the same samples,
            so differences come from the baseline alone.

    Returns:
        ``GradientVarianceResult``.
    """
    logits = torch.as_tensor(policy_logits, dtype=torch.float64).reshape(-1)
    n_actions = logits.numel()
    if n_samples < 1 or trials < 2:
        raise ValueError(f"need n_samples >= 1 and trials >= 2, got n_samples={n_samples}, trials={trials}")
    if baseline == "leave_one_out" and n_samples < 2:
        raise ValueError("baseline='leave_one_out' needs n_samples >= 2, got n_samples=1")
    if callable(reward_fn):
        rewards_per_action = np.array([float(reward_fn(a)) for a in range(n_actions)])  # (V,)
    else:
        rewards_per_action = np.asarray(reward_fn, dtype=float)
    if rewards_per_action.shape != (n_actions,):
        raise ValueError(
            f"reward_fn gives {rewards_per_action.size} rewards but the policy has {n_actions} actions; "
            "pass one reward per action"
        )

    probs = torch.softmax(logits, dim=0).numpy()
    rng = np.random.default_rng(seed)
    actions = rng.choice(n_actions, size=(trials, n_samples), p=probs)  # (K, n)
    rewards = rewards_per_action[actions]  # (K, n)
    advantages = torch.as_tensor(rewards - _baselines(rewards, baseline))  # (K, n)

    batched_logits = logits.detach().expand(trials, n_actions).clone().requires_grad_(True)  # (K, V)
    log_probs = torch.log_softmax(batched_logits, dim=1).gather(1, torch.as_tensor(actions))  # (K, n)
    # Each trial's loss touches only its own row, so one backward gives every trial's gradient.
    surrogate = -(advantages * log_probs).mean(dim=1).sum()
    (grad_of_loss,) = torch.autograd.grad(surrogate, batched_logits)
    gradients = (-grad_of_loss).numpy()  # (K, V) ascent direction: estimate of grad J

    variance = gradients.var(axis=0, ddof=1)
    return GradientVarianceResult(
        gradients=gradients,
        mean_gradient=gradients.mean(axis=0),
        variance=variance,
        total_variance=float(variance.sum()),
        exact_gradient=exact_policy_gradient(logits, rewards_per_action),
        expected_scale=(n_samples - 1) / n_samples if baseline == "mean" else 1.0,
        baseline=baseline,
        n_samples=n_samples,
    )


def _baselines(rewards: np.ndarray, baseline: float | str | None) -> np.ndarray:
    """``(K, n) -> (K, n)`` baseline subtracted from each reward, computed within each trial."""
    if baseline is None:
        return np.zeros_like(rewards)
    if isinstance(baseline, (int, float)):
        return np.full_like(rewards, float(baseline))
    n = rewards.shape[1]
    if baseline == "mean":
        return np.broadcast_to(rewards.mean(axis=1, keepdims=True), rewards.shape)
    if baseline == "leave_one_out":
        return (rewards.sum(axis=1, keepdims=True) - rewards) / (n - 1)
    raise ValueError(f"baseline must be None, a number, 'mean' or 'leave_one_out', got {baseline!r}")
