""""What is 2 + 2?": a language model reduced to one categorical choice.

An untrained model asked "What is 2 + 2?" might say ``0``, ``cat``, ``-10``, ``3``,
``A``, ... and, once in a while, ``4``. Here that model is a softmax over a fixed list
of candidate answers (one logit per answer), so every idea of RL for LLMs can be seen
with a dozen numbers:

- **Verifier vs reward function.** ``verify_answer`` only says right or wrong;
  ``is_number_reward`` (+1 a number / -1 not) and ``correctness_reward`` (+3 right /
  -3 wrong) turn outputs into scores, and ``combined_reward`` adds them up.
- **Patience is all you need.** ``sample_until_success`` keeps sampling until the
  verifier says yes; the number of tries is geometric with mean ``1 / p``.
- **RL pushes probability away from bad answers.** ``reinforce_step`` is one REINFORCE
  update (Williams 1992) on the logits, in torch; ``train_answer_policy`` repeats it
  and records the probability of the right answer. The probability taken from a bad
  answer goes to the others *in proportion to how likely they already are* (the logit
  gradient is ``pi_j * (r_j - mean reward)``), so a rare right answer gains little
  until it is actually sampled and rewarded.
- **Zero probability never learns.** If the right answer has probability 0 it is never
  sampled and its logit receives zero gradient, so it stays at 0 forever. That is why
  RL starts from a model that already answers sensibly sometimes: usually an
  instruction-tuned one, though DeepSeek-R1-Zero started from a base model whose
  answers were already right often enough to be rewarded.

What it simplifies: a real model produces answers token by token from a huge
vocabulary and its logits share parameters; here each answer owns one free logit, so
pushing one answer down cannot accidentally push a similar answer up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

__all__ = [
    "CANDIDATE_ANSWERS",
    "CORRECT_ANSWER",
    "AnswerPolicy",
    "verify_answer",
    "is_number",
    "binary_reward",
    "is_number_reward",
    "correctness_reward",
    "combined_reward",
    "sample_until_success",
    "expected_attempts",
    "reinforce_step",
    "AnswerTrainingTrace",
    "train_answer_policy",
]

# What an untrained model might blurt out when asked "What is 2 + 2?".
CANDIDATE_ANSWERS: tuple[str, ...] = (
    "0", "cat", "-10", "1928", "3", "A", "B", "122", "17", "C", "%$", "#", "9", "-192", "12.31", "4",
)
CORRECT_ANSWER = "4"


# --------------------------------------------------------------- verifier and rewards
def verify_answer(answer: str, target: str = CORRECT_ANSWER) -> bool:
    """The verifier: is ``answer`` correct? It says yes or no and gives no score.

    Surrounding spaces are ignored; ``"4.0"`` counts as ``"4"`` because it is the same
    number (a verifier should check the meaning, not the spelling).
    """
    answer, target = answer.strip(), target.strip()
    if answer == target:
        return True
    if is_number(answer) and is_number(target):
        return float(answer) == float(target)
    return False


def is_number(answer: str) -> bool:
    """True when ``answer`` parses as a number (``"-10"``, ``"12.31"``), else False."""
    try:
        float(answer.strip())
    except ValueError:
        return False
    return answer.strip().lower() not in {"nan", "inf", "-inf", "+inf", "infinity", "-infinity"}


def binary_reward(answer: str, target: str = CORRECT_ANSWER) -> float:
    """1.0 if the verifier accepts ``answer``, else 0.0: the plain RLVR reward.

    Teaches: for an untrained model this signal reads 0, 0, 0, ..., 0, then suddenly 1.
    """
    return float(verify_answer(answer, target))


def is_number_reward(answer: str) -> float:
    """+1 if ``answer`` is a number, -1 otherwise: a partial-credit "format" reward.

    Teaches: "3" is still wrong but better than "cat"; shaping rewards say so.
    """
    return 1.0 if is_number(answer) else -1.0


def correctness_reward(answer: str, target: str = CORRECT_ANSWER) -> float:
    """+3 if the verifier accepts ``answer``, -3 otherwise: a reward built on a verifier."""
    return 3.0 if verify_answer(answer, target) else -3.0


def combined_reward(
    answer: str,
    reward_fns: Sequence[Callable[[str], float]] = (is_number_reward, correctness_reward),
) -> float:
    """Sum of several reward functions (default: number +-1 plus correctness +-3).

    With the defaults: ``"4"`` -> +4, ``"3"`` -> -2, ``"cat"`` -> -4.
    """
    return float(sum(fn(answer) for fn in reward_fns))


# ---------------------------------------------------------------------------- policy
@dataclass
class AnswerPolicy:
    """A categorical policy ``pi = softmax(logits)`` over a list of answers.

    A logit of ``-inf`` means probability exactly 0 (the answer is never produced).

    Attributes:
        answers: the ``V`` candidate answers.
        logits: ``(V,)`` float tensor.
    """

    answers: tuple[str, ...]
    logits: torch.Tensor

    def __post_init__(self) -> None:
        self.answers = tuple(self.answers)
        self.logits = torch.as_tensor(self.logits, dtype=torch.float64).detach().clone()
        if self.logits.shape != (len(self.answers),):
            raise ValueError(
                f"logits must have shape ({len(self.answers)},), one per answer, got {tuple(self.logits.shape)}"
            )
        if not torch.isfinite(self.logits).any():
            raise ValueError("logits are all -inf (or NaN): at least one answer needs probability > 0")

    @classmethod
    def uniform(cls, answers: Sequence[str] = CANDIDATE_ANSWERS) -> "AnswerPolicy":
        """Every answer equally likely: ``p = 1 / V`` each."""
        return cls(tuple(answers), torch.zeros(len(answers), dtype=torch.float64))

    @classmethod
    def from_probs(cls, probs: Sequence[float], answers: Sequence[str] = CANDIDATE_ANSWERS) -> "AnswerPolicy":
        """A policy with the given probabilities (renormalised); 0 becomes a ``-inf`` logit."""
        p = torch.as_tensor(probs, dtype=torch.float64)
        if (p < 0).any() or p.sum() <= 0:
            raise ValueError(f"probs must be >= 0 with a positive sum, got {p.tolist()}")
        return cls(tuple(answers), torch.log(p / p.sum()))

    @property
    def probs(self) -> np.ndarray:
        """``(V,)`` the probability of each answer."""
        return torch.softmax(self.logits, dim=0).numpy()

    def prob_of(self, answer: str) -> float:
        """Probability of producing exactly ``answer`` (0.0 if it is not a candidate)."""
        return float(self.probs[self.answers.index(answer)]) if answer in self.answers else 0.0

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``(n,)`` indices of sampled answers (sampling needs no gradient)."""
        return rng.choice(len(self.answers), size=n, p=self.probs)


# -------------------------------------------------------------- patience is all you need
def sample_until_success(
    policy: AnswerPolicy,
    verifier: Callable[[str], bool] = verify_answer,
    rng: np.random.Generator | None = None,
    max_attempts: int = 100_000,
) -> int | None:
    """Sample answers until ``verifier`` accepts one; return how many samples it took.

    Teaches "luck (patience) is all you need": with success probability ``p > 0`` the
    number of attempts is geometric with mean ``1 / p``, so a verifier and enough
    samples always find the answer. With ``p = 0`` it never comes: returns ``None``
    after ``max_attempts``.
    """
    rng = np.random.default_rng() if rng is None else rng
    probs = policy.probs
    # Draw in blocks rather than one by one: identical distribution, far fewer calls.
    attempts, block = 0, 256
    while attempts < max_attempts:
        draws = rng.choice(len(policy.answers), size=min(block, max_attempts - attempts), p=probs)
        for index in draws:
            attempts += 1
            if verifier(policy.answers[index]):
                return attempts
    return None


def expected_attempts(p_success: float) -> float:
    """Mean of a geometric distribution: ``1 / p`` tries until the first success (inf if p = 0)."""
    if not 0.0 <= p_success <= 1.0:
        raise ValueError(f"p_success must be in [0, 1], got {p_success}")
    return float("inf") if p_success == 0 else 1.0 / p_success


# -------------------------------------------------------------------------- REINFORCE
def reinforce_step(
    logits: torch.Tensor,
    samples: torch.Tensor | Sequence[int],
    rewards: torch.Tensor | Sequence[float],
    lr: float,
    baseline: float | str | None = None,
) -> torch.Tensor:
    """One REINFORCE update of the logits (Williams 1992), returned as a new tensor.

    Loss (to minimise): ``L = -mean_i (r_i - b_i) * log pi(a_i)``; the step is plain
    gradient descent ``logits - lr * dL/dlogits``. For a softmax the gradient is
    ``dL/dz = -mean_i (r_i - b_i) * (one_hot(a_i) - pi)``: an answer with negative
    advantage loses logit and its probability flows to all other answers.

    Args:
        logits: ``(V,)`` current logits (``-inf`` allowed: that answer stays at p = 0).
        samples: ``(N,)`` indices of the sampled answers.
        rewards: ``(N,)`` reward of each sample.
        lr: learning rate (> 0).
        baseline: ``None`` (b = 0), a number (constant b), ``"mean"`` (batch mean, as in
            GRPO without the std) or ``"leave_one_out"`` (mean of the *other* samples,
            as in RLOO; needs N >= 2).

    Returns:
        ``(V,)`` updated logits, detached.
    """
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got lr={lr}")
    logits = torch.as_tensor(logits, dtype=torch.float64).detach().clone().requires_grad_(True)
    actions = torch.as_tensor(samples, dtype=torch.long).reshape(-1)  # (N,)
    r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)  # (N,)
    if actions.shape != r.shape:
        raise ValueError(f"samples and rewards must have the same length, got {actions.numel()} and {r.numel()}")
    advantages = r - _baseline_values(r, baseline)  # (N,)
    log_probs = torch.log_softmax(logits, dim=0)[actions]  # (N,)
    loss = -(advantages * log_probs).mean()
    loss.backward()
    # A -inf logit gets gradient exactly 0 (pi = 0), and -inf - lr * 0 stays -inf.
    grad = torch.nan_to_num(logits.grad, nan=0.0)
    return (logits - lr * grad).detach()


def _baseline_values(rewards: torch.Tensor, baseline: float | str | None) -> torch.Tensor:
    """``(N,)`` the baseline subtracted from each reward."""
    if baseline is None:
        return torch.zeros_like(rewards)
    if isinstance(baseline, (int, float)):
        return torch.full_like(rewards, float(baseline))
    if baseline == "mean":
        return rewards.mean().expand_as(rewards)
    if baseline == "leave_one_out":
        n = rewards.numel()
        if n < 2:
            raise ValueError("baseline='leave_one_out' needs at least 2 samples per step, got 1")
        return (rewards.sum() - rewards) / (n - 1)
    raise ValueError(f"baseline must be None, a number, 'mean' or 'leave_one_out', got {baseline!r}")


@dataclass
class AnswerTrainingTrace:
    """The story of one training run.

    Attributes:
        prob_correct: ``(steps + 1,)`` probability of the right answer before each step
            and after the last.
        mean_reward: ``(steps,)`` average reward of the samples drawn at each step.
        first_success_step: first step whose samples contained the right answer, or
            ``None`` if it was never sampled.
        policy: the trained policy.
    """

    prob_correct: np.ndarray
    mean_reward: np.ndarray
    first_success_step: int | None
    policy: AnswerPolicy


def train_answer_policy(
    policy: AnswerPolicy | None = None,
    reward_fn: Callable[[str], float] = combined_reward,
    steps: int = 100,
    batch_size: int = 8,
    lr: float = 0.5,
    baseline: float | str | None = None,
    seed: int | None = 0,
    correct_answer: str = CORRECT_ANSWER,
) -> AnswerTrainingTrace:
    """Train the answer policy with REINFORCE and record ``P(correct answer)`` per step.

    Each step samples ``batch_size`` answers on-policy, scores them with ``reward_fn``
    and calls ``reinforce_step``. The input policy is not modified.

    Teaches: with ``combined_reward`` (bad answers score negative) probability leaves
    the sampled bad answers even before ``4`` is ever produced; with ``binary_reward``
    and no baseline nothing moves until the first success; with ``P("4") = 0`` nothing
    ever moves toward ``4``; and with a tiny ``P("4")`` (say 0.002) the race is
    uncertain: the policy may concentrate on other answers before ``4`` is found
    often enough, which is why RL starts from a model that is already partly right.
    """
    if steps < 0 or batch_size < 1:
        raise ValueError(f"need steps >= 0 and batch_size >= 1, got steps={steps}, batch_size={batch_size}")
    policy = AnswerPolicy.uniform() if policy is None else policy
    if correct_answer not in policy.answers:
        raise ValueError(f"correct_answer={correct_answer!r} is not among the policy's answers {policy.answers}")
    correct_index = policy.answers.index(correct_answer)
    rng = np.random.default_rng(seed)
    reward_table = np.array([reward_fn(answer) for answer in policy.answers])  # (V,) rewards are deterministic
    logits = policy.logits.clone()
    prob_correct, mean_reward, first_success = [], [], None
    for step in range(steps):
        probs = torch.softmax(logits, dim=0).numpy()
        prob_correct.append(probs[correct_index])
        samples = rng.choice(len(probs), size=batch_size, p=probs)  # (N,)
        if first_success is None and np.any(samples == correct_index):
            first_success = step
        rewards = reward_table[samples]  # (N,)
        mean_reward.append(rewards.mean())
        logits = reinforce_step(logits, samples, rewards, lr, baseline)
    prob_correct.append(float(torch.softmax(logits, dim=0)[correct_index]))
    return AnswerTrainingTrace(
        prob_correct=np.asarray(prob_correct, dtype=float),
        mean_reward=np.asarray(mean_reward, dtype=float),
        first_success_step=first_success,
        policy=AnswerPolicy(policy.answers, logits),
    )
