"""Checks for lesson 03 (PPO): clipped surrogate, GAE, k1 and k3 KL estimators.

Expected values are hand-worked cases, explicit sums written out in the check (GAE as
``sum_l (gamma * lam)**l * delta_{t+l}``), the course's library functions
(``algos.ppo.ppo_policy_loss``, ``algos.ppo.gae``, ``ops.kl.kl_k1`` / ``kl_k3``) and the
exact KL of two categorical distributions for the estimators' averages.
"""

from __future__ import annotations

import math

import torch

from ..algos.ppo import gae as library_gae
from ..ops.kl import kl_k1 as library_k1
from ..ops.kl import kl_k3 as library_k3
from ..algos.ppo import ppo_policy_loss
from ..feedback import Hint, assert_close


def _as_tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise Hint(f"{name}: return a torch tensor, got {type(value).__name__}.")
    return value


def check_clipped_surrogate(fn) -> None:
    # Hand-worked, epsilon = 0.2: one token per case.
    ratio = torch.tensor([[1.5, 1.5, 0.5, 0.5, 1.1, 1.0]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, -1.0, 1.0, -1.0, 2.0, -3.0]], dtype=torch.float64)
    expected = torch.tensor([[1.2, -1.5, 0.5, -0.8, 2.2, -3.0]], dtype=torch.float64)
    got = _as_tensor("clipped_surrogate", fn(ratio, advantages, 0.2))
    clamp = torch.clamp(ratio, 0.8, 1.2)
    assert_close(got, expected, name="hand-worked ratios [1.5, 1.5, 0.5, 0.5, 1.1, 1.0]",
                 hints={"you took the max; PPO takes the MIN of the clipped and unclipped terms (a pessimistic "
                        "bound).": torch.maximum(ratio * advantages, clamp * advantages),
                        "the min is missing: it is min(r * A, clip(r) * A), not clip(r) * A alone.": clamp * advantages,
                        "clip the ratio, not the advantage.":
                            torch.minimum(ratio * advantages, ratio * torch.clamp(advantages, 0.8, 1.2)),
                        "took the max for negative advantages (min(r, clip(r)) * A is the same mistake): the "
                        "pessimistic term is the min of the two PRODUCTS for both signs. For A < 0, min(r * A, "
                        "clip(r) * A) keeps r * A when r > 1 + eps (a bad token that became likelier is fully "
                        "penalised) and clips when r < 1 - eps.":
                            torch.minimum(ratio, clamp) * advantages,
                        "the clip range is [1 - eps, 1 + eps] around 1, not [-eps, eps].":
                            torch.minimum(ratio * advantages, torch.clamp(ratio, -0.2, 0.2) * advantages),
                        "clamped the product r * A to [1 - eps, 1 + eps]; clip the RATIO, then multiply: "
                        "clip(r, 1 - eps, 1 + eps) * A (the range is about r, whatever the size or sign of A).":
                            torch.minimum(ratio * advantages, torch.clamp(ratio * advantages, 0.8, 1.2))})

    # Seeded batch against the library's PPO loss (objective = -per-token loss), with
    # per-completion advantages broadcast over the tokens.
    generator = torch.Generator().manual_seed(0)
    log_ratio = 0.5 * torch.randn(4, 7, generator=generator, dtype=torch.float64)
    per_completion = torch.randn(4, 1, generator=generator, dtype=torch.float64)
    epsilon = 0.3
    library = ppo_policy_loss(log_ratio.clone().requires_grad_(True), torch.zeros_like(log_ratio),
                              per_completion.squeeze(1), torch.ones_like(log_ratio), cliprange=epsilon)
    ratio = log_ratio.exp().requires_grad_(True)
    got = _as_tensor("clipped_surrogate", fn(ratio, per_completion, epsilon))
    assert_close(got.detach(), -library.per_token_loss.detach(),
                 name="4 x 7 tokens, epsilon=0.3, vs course_lib.algos.ppo.ppo_policy_loss",
                 hints={"use the epsilon argument instead of a fixed 0.2.":
                        torch.minimum(ratio * per_completion, torch.clamp(ratio, 0.8, 1.2) * per_completion).detach()})
    if not got.requires_grad:
        raise Hint("the objective has no gradient: keep it a torch computation on ratio.")
    (grad,) = torch.autograd.grad(got.sum(), ratio)
    # d/dr of the objective: A where the unclipped term is the min, 0 where the clip is active.
    plain_ratio = ratio.detach()
    inside = plain_ratio * per_completion <= torch.clamp(plain_ratio, 1 - epsilon, 1 + epsilon) * per_completion
    assert_close(grad, torch.where(inside, per_completion.expand_as(ratio), torch.zeros_like(ratio)),
                 name="gradient w.r.t. the ratio (A where unclipped, 0 where the clip acts)")


_LAMBDA_IN_DELTA = ("lambda does not enter the TD error: delta_t = r_t + gamma * V(s_{t+1}) - V(s_t); lambda "
                    "only weights the sum of later deltas, A_t = delta_t + gamma * lam * A_{t+1}.")


def _gae_lambda_in_delta(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """The advantages a learner gets by writing delta_t = r_t + gamma * lam * V(s_{t+1}) - V(s_t)."""
    out, next_value, running = [], 0.0, 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * lam * next_value - float(values[t]) + gamma * lam * running
        out.append(running)
        next_value = float(values[t])
    return torch.tensor(out[::-1], dtype=torch.float64)


def check_gae(fn) -> None:
    rewards = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    values = torch.tensor([0.5, 0.6, 0.7], dtype=torch.float64)
    deltas = torch.tensor([0.1, 0.1, 0.3], dtype=torch.float64)
    assert_close(_as_tensor("gae", fn(rewards, values, 1.0, 0.0)), deltas,
                 name="lam=0 (one-step TD errors) on rewards [0, 0, 1], values [0.5, 0.6, 0.7]",
                 hints={"the value after the last step is 0 (the episode ends); do not bootstrap from V(s_{T-1}).":
                        torch.tensor([0.1, 0.1, 1.0]),
                        "with lam=0 the advantage is the TD error alone: lambda is missing from the recursion "
                        "A_t = delta_t + gamma * LAM * A_{t+1}.": torch.tensor([0.5, 0.4, 0.3]),
                        _LAMBDA_IN_DELTA: _gae_lambda_in_delta(rewards, values, 1.0, 0.0)})
    assert_close(fn(rewards, values, 1.0, 1.0), torch.tensor([0.5, 0.4, 0.3], dtype=torch.float64),
                 name="lam=1 (return minus value)",
                 hints={"the recursion runs backwards: A_t = delta_t + gamma * lam * A_{t+1}.":
                        torch.tensor([0.1, 0.2, 0.5])})
    # gamma = 0.9, lam = 0.5 by hand: delta = [0 + 0.54 - 0.5, 0 + 0.63 - 0.6, 1 - 0.7] = [0.04, 0.03, 0.3];
    # A_2 = 0.3, A_1 = 0.03 + 0.45 * 0.3 = 0.165, A_0 = 0.04 + 0.45 * 0.165 = 0.11425.
    assert_close(fn(rewards, values, 0.9, 0.5), torch.tensor([0.11425, 0.165, 0.3], dtype=torch.float64),
                 name="gamma=0.9, lam=0.5",
                 hints={"lambda is missing from the recursion: A_t = delta_t + gamma * LAM * A_{t+1}.":
                        torch.tensor([0.04 + 0.9 * (0.03 + 0.9 * 0.3), 0.03 + 0.9 * 0.3, 0.3]),
                        "gamma is missing from the recursion: A_t = delta_t + GAMMA * lam * A_{t+1}.":
                        torch.tensor([0.04 + 0.5 * (0.03 + 0.5 * 0.3), 0.03 + 0.5 * 0.3, 0.3]),
                        "gamma also discounts the next value in delta_t = r_t + GAMMA * V(s_{t+1}) - V(s_t).":
                        torch.tensor([0.1 + 0.45 * (0.1 + 0.45 * 0.3), 0.1 + 0.45 * 0.3, 0.3]),
                        _LAMBDA_IN_DELTA: _gae_lambda_in_delta(rewards, values, 0.9, 0.5)})

    # A longer seeded trajectory: the explicit sum A_t = sum_l (gamma lam)^l delta_{t+l}, and the library.
    generator = torch.Generator().manual_seed(1)
    length, gamma, lam = 9, 0.97, 0.8
    token_rewards = 0.1 * torch.randn(length, generator=generator, dtype=torch.float64)
    token_rewards[-1] += 1.0  # the score arrives on the last token
    token_values = torch.rand(length, generator=generator, dtype=torch.float64)
    next_values = torch.cat([token_values[1:], torch.zeros(1, dtype=torch.float64)])
    delta = token_rewards + gamma * next_values - token_values
    explicit = torch.tensor([sum((gamma * lam) ** l * float(delta[t + l]) for l in range(length - t))
                             for t in range(length)], dtype=torch.float64)
    got = fn(token_rewards, token_values, gamma, lam)
    assert_close(got, explicit, name="9-token trajectory, gamma=0.97, lam=0.8",
                 hints={_LAMBDA_IN_DELTA: _gae_lambda_in_delta(token_rewards, token_values, gamma, lam)})
    library, _ = library_gae(token_rewards[None], token_values[None], torch.ones(1, length), gamma=gamma, lam=lam)
    assert_close(got, library[0], name="compared with course_lib.algos.ppo.gae")


def _categorical_samples(seed: int = 0, num: int = 40_000):
    """Tokens sampled from pi, their log-probs under pi and ref, and the exact KL(pi || ref)."""
    generator = torch.Generator().manual_seed(seed)
    pi_logits = torch.randn(6, generator=generator, dtype=torch.float64)
    ref_logits = pi_logits + 0.8 * torch.randn(6, generator=generator, dtype=torch.float64)
    log_pi, log_ref = pi_logits.log_softmax(0), ref_logits.log_softmax(0)
    tokens = torch.multinomial(log_pi.exp(), num, replacement=True, generator=generator).reshape(8, -1)  # (B, T)
    exact = float((log_pi.exp() * (log_pi - log_ref)).sum())
    return log_pi[tokens], log_ref[tokens], exact


def check_kl_k1(fn) -> None:
    logps = torch.log(torch.tensor([[0.5, 0.25, 0.1]], dtype=torch.float64))
    ref_logps = torch.log(torch.tensor([[0.25, 0.5, 0.1]], dtype=torch.float64))
    expected = torch.tensor([[math.log(2), -math.log(2), 0.0]], dtype=torch.float64)
    assert_close(_as_tensor("kl_k1", fn(logps, ref_logps)), expected,
                 name="pi = [0.5, 0.25, 0.1], ref = [0.25, 0.5, 0.1]",
                 hints={"wrong sign: k1 is log pi - log ref (policy minus reference).": -expected,
                        "k1 can be negative: do not take an absolute value.": expected.abs(),
                        "that is k3 (exp(u) - u - 1 with u = log ref - log pi); k1 is the plain log-ratio "
                        "log pi - log ref.": torch.expm1(-expected) + expected,
                        "that is k2 = (log pi - log ref)^2 / 2; k1 is the plain log-ratio log pi - log ref.":
                            expected ** 2 / 2})
    logps, ref_logps, exact = _categorical_samples()
    got = fn(logps, ref_logps)
    assert_close(got, library_k1(logps, ref_logps), name="40,000 sampled tokens vs course_lib.ops.kl.kl_k1")
    stderr = float(got.std()) / math.sqrt(got.numel())
    if abs(float(got.mean()) - exact) > 5 * stderr:
        raise Hint(f"the average of k1 over tokens sampled from pi should be KL(pi || ref) = {exact:.4f}, "
                   f"got {float(got.mean()):.4f}.")


def check_kl_k3(fn) -> None:
    logps = torch.log(torch.tensor([[0.5, 0.25, 0.1]], dtype=torch.float64))
    ref_logps = torch.log(torch.tensor([[0.25, 0.5, 0.1]], dtype=torch.float64))
    # u = log(ref / pi): [log 0.5, log 2, 0] -> exp(u) - u - 1 = [0.5 + 0.6931 - 1, 2 - 0.6931 - 1, 0].
    expected = torch.tensor([[0.5 + math.log(2) - 1, 1 - math.log(2), 0.0]], dtype=torch.float64)
    swapped = torch.tensor([[1 - math.log(2), 0.5 + math.log(2) - 1, 0.0]], dtype=torch.float64)
    assert_close(_as_tensor("kl_k3", fn(logps, ref_logps)), expected,
                 name="pi = [0.5, 0.25, 0.1], ref = [0.25, 0.5, 0.1]",
                 hints={"the log-ratio is reversed: u = log ref - log pi (reference minus policy).": swapped,
                        "the '- 1' is missing: k3 = exp(u) - u - 1, which is 0 when pi = ref.": expected + 1,
                        "that is k2 = u^2 / 2, not k3.": torch.tensor([[math.log(2) ** 2 / 2] * 2 + [0.0]],
                                                                       dtype=torch.float64),
                        "that is k1 (log pi - log ref), the plain log-ratio; k3 = exp(u) - u - 1 with "
                        "u = log ref - log pi.": torch.tensor([[math.log(2), -math.log(2), 0.0]], dtype=torch.float64)})
    logps, ref_logps, exact = _categorical_samples()
    got = fn(logps, ref_logps)
    assert_close(got, library_k3(logps, ref_logps), name="40,000 sampled tokens vs course_lib.ops.kl.kl_k3")
    if (got < -1e-12).any():
        raise Hint("k3 must never be negative (exp(u) >= 1 + u for every u).")
    stderr = float(got.std()) / math.sqrt(got.numel())
    if abs(float(got.mean()) - exact) > 5 * stderr:
        raise Hint(f"the average of k3 over tokens sampled from pi should be KL(pi || ref) = {exact:.4f}, "
                   f"got {float(got.mean()):.4f}.")
