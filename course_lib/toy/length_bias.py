"""A policy whose only free choice is *when to stop*: GRPO's length bias, isolated.

Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", section 3.1) argues that
dividing each completion's loss by its own length (`loss_type="grpo"`) makes long wrong
answers cheaper per token than short ones, so wrong answers grow longer. On a real model
the effect is buried under everything else a run changes; here nothing else can change.

The toy completion is `[answer, filler x n, EOS]`:

- the answer token is correct or wrong with probability 1/2 each; it is *not* learnable,
  so the reward (1 if correct) is independent of the length by construction;
- after the answer, each position emits EOS with probability `p_a = sigmoid(theta_a)`,
  where `a` is the answer (one length logit for correct answers, one for wrong ones), so
  `n ~ Geometric(p_a)` fillers come before the EOS; a completion that reaches
  `max_completion_length` tokens stops without EOS (truncated).

Each token's log-prob is a function of `theta` (`log p_a` for EOS, `log(1 - p_a)` for a
filler, a constant for the answer), and the loss is :func:`course_lib.algos.grpo.policy_loss`
itself, so the gradient on each length logit is exactly what that loss type gives. For an
untruncated completion the sum over its tokens of `d log pi / d theta_a` is
`1 - (n + 1) p_a`, whose expectation under `n ~ Geometric(p_a)` is 0: a loss that weighs
every token alike (`dr_grpo`, `dapo`) has no expected pull on the length, whatever the
advantages. `grpo` multiplies it by `A / L`, and `E[(1 - (n + 1) p) / (n + 2)] > 0`: the
wrong answers (A < 0) push their EOS logit down (longer), the correct ones push theirs up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from course_lib.algos.grpo import group_advantages, policy_loss

Tensor = torch.Tensor

WRONG, CORRECT = 0, 1


def expected_length(eos_probability: float, max_completion_length: int) -> float:
    """Expected toy completion length in tokens (answer + fillers + EOS), truncation included.

    `L = n + 2` with `P(n = k) = (1 - p)^k p` while `n + 2 <= M`; the remaining mass
    `(1 - p)^(M - 1)` is a truncated completion of `M` tokens (answer + `M - 1` fillers).
    """
    p, m = float(eos_probability), int(max_completion_length)
    if not 0.0 < p <= 1.0 or m < 2:
        raise ValueError(f"need 0 < eos_probability <= 1 and max_completion_length >= 2, got {p}, {m}")
    k = torch.arange(m - 1, dtype=torch.float64)  # n = 0 .. M-2 fits with its EOS
    finished = ((k + 2) * (1 - p) ** k * p).sum().item()
    return finished + m * (1 - p) ** (m - 1)


def sample_batch(theta: Tensor, num_groups: int, num_generations: int, max_completion_length: int,
                 generator: torch.Generator) -> dict[str, Tensor]:
    """Sample `B = num_groups * num_generations` toy completions (prompt-major groups).

    Returns:
        `answers` `(B,)` long (1 correct, 0 wrong), `fillers` `(B,)` long (n, before truncation
        to `M - 1`), `truncated` `(B,)` bool, `lengths` `(B,)` long, `rewards` `(B,)` float.
    """
    batch = num_groups * num_generations
    answers = torch.randint(0, 2, (batch,), generator=generator)
    p = torch.sigmoid(theta.detach()[answers]).to(torch.float64)
    uniform = torch.rand(batch, generator=generator, dtype=torch.float64).clamp(min=1e-300)
    fillers = torch.floor(torch.log(uniform) / torch.log1p(-p)).long()  # inverse CDF of Geometric(p)
    truncated = fillers + 2 > max_completion_length
    lengths = torch.where(truncated, torch.full_like(fillers, max_completion_length), fillers + 2)
    return {"answers": answers, "fillers": fillers, "truncated": truncated, "lengths": lengths,
            "rewards": answers.to(torch.float32)}


def token_logps(theta: Tensor, batch: dict[str, Tensor], max_completion_length: int) -> tuple[Tensor, Tensor]:
    """`(B, M)` per-token log-probs (differentiable in `theta`) and the `(B, M)` completion mask."""
    answers, lengths, truncated = batch["answers"], batch["lengths"], batch["truncated"]
    positions = torch.arange(max_completion_length).unsqueeze(0)  # (1, M)
    log_p = torch.nn.functional.logsigmoid(theta[answers]).unsqueeze(1)  # (B, 1): log p_a
    log_not_p = torch.nn.functional.logsigmoid(-theta[answers]).unsqueeze(1)  # log(1 - p_a)
    is_eos = (positions == (lengths - 1).unsqueeze(1)) & ~truncated.unsqueeze(1)
    is_filler = (positions >= 1) & (positions < lengths.unsqueeze(1)) & ~is_eos
    logps = torch.where(is_eos, log_p, torch.where(is_filler, log_not_p, torch.full_like(log_p, math.log(0.5))))
    mask = (positions < lengths.unsqueeze(1)).to(logps.dtype)
    return logps * mask, mask


def length_logit_gradient(theta: Tensor, batch: dict[str, Tensor], loss_type: str,
                          max_completion_length: int, num_generations: int,
                          scale_rewards: str = "group") -> Tensor:
    """`(2,)` gradient of `policy_loss` on `theta = [theta_wrong, theta_correct]` for one batch (on-policy)."""
    theta = theta.detach().clone().requires_grad_(True)
    logps, mask = token_logps(theta, batch, max_completion_length)
    advantages = group_advantages(batch["rewards"], num_generations, scale_rewards=scale_rewards).to(logps.dtype)
    loss = policy_loss(logps, None, advantages, mask, loss_type=loss_type,
                       max_completion_length=max_completion_length).loss
    (grad,) = torch.autograd.grad(loss, theta)
    return grad


@dataclass
class LengthBiasRun:
    """Expected length of wrong and correct completions before each update, and after the last."""

    loss_type: str
    wrong_length: list[float] = field(default_factory=list)
    correct_length: list[float] = field(default_factory=list)


def train_length_policy(loss_type: str, *, steps: int = 150, learning_rate: float = 1.0,
                        initial_eos_probability: float = 1 / 16, max_completion_length: int = 128,
                        num_groups: int = 8, num_generations: int = 8, seed: int = 0) -> LengthBiasRun:
    """Plain SGD on the two length logits with `policy_loss(loss_type=...)`, on-policy.

    The reward never depends on the length, so any drift of the expected lengths comes
    from how the loss weighs tokens, nothing else. Returns the expected lengths
    (:func:`expected_length`) of wrong and correct completions, `steps + 1` values each.
    """
    if steps < 0 or learning_rate <= 0:
        raise ValueError(f"need steps >= 0 and learning_rate > 0, got {steps}, {learning_rate}")
    generator = torch.Generator().manual_seed(seed)
    logit = math.log(initial_eos_probability / (1 - initial_eos_probability))
    theta = torch.full((2,), logit, dtype=torch.float64)
    run = LengthBiasRun(loss_type)

    def record() -> None:
        p = torch.sigmoid(theta)
        run.wrong_length.append(expected_length(p[WRONG].item(), max_completion_length))
        run.correct_length.append(expected_length(p[CORRECT].item(), max_completion_length))

    record()
    for _ in range(steps):
        batch = sample_batch(theta, num_groups, num_generations, max_completion_length, generator)
        theta = theta - learning_rate * length_logit_gradient(theta, batch, loss_type, max_completion_length,
                                                              num_generations)
        record()
    return run
