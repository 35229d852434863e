"""Checks for lesson 02 (policy gradients): REINFORCE loss, baselines, discounted returns.

Expected values are hand-worked cases and independent computations: explicit Python
loops over the tensors, the closed-form gradient of the REINFORCE loss
(``-reward * mask / B`` per token), the RLOO loss of ``course_lib.algos.ppo`` (equal
gradients at ratio 1) and ``course_lib.algos.rloo.rloo_advantages``.
"""

from __future__ import annotations

import functools

import torch

from ..algos.rloo import rloo_advantages
from ..algos.rloo import rloo_policy_loss
from ..feedback import Hint, assert_close


def _loss_inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    batch, width = 4, 6
    logps = -torch.rand(batch, width, generator=generator, dtype=torch.float64) * 3  # (B, T) in (-3, 0]
    lengths = torch.tensor([6, 3, 1, 4])
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)  # right padding
    logps = torch.where(mask.bool(), logps, torch.full_like(logps, -7.0))  # junk where padded
    rewards = torch.tensor([1.0, -0.5, 2.0, 0.0], dtype=torch.float64)
    return logps, rewards, mask


def check_reinforce_loss(fn) -> None:
    # Hand-worked: sequence log-prob -1 - 2 = -3 (the padded -9 does not count), loss -(2 * -3) = 6.
    small = fn(torch.tensor([[-1.0, -2.0, -9.0]], dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64),
               torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64))
    assert_close(small, torch.tensor(6.0, dtype=torch.float64), name="loss for logps=[[-1, -2, -9]], mask=[[1, 1, 0]]",
                 hints={"you forgot the mask: the padded -9 was counted.": 24.0,
                        "wrong sign: the loss is MINUS reward times log-prob (we minimise it).": -6.0,
                        "the log-probs of a completion are summed, not averaged over its tokens.": 3.0})

    logps, rewards, mask = _loss_inputs()
    batch = logps.shape[0]
    # Independent value: explicit loops over completions and tokens.
    total = 0.0
    for b in range(batch):
        sequence = sum(float(logps[b, t]) for t in range(logps.shape[1]) if mask[b, t] > 0)
        total += float(rewards[b]) * sequence
    expected = torch.tensor(-total / batch, dtype=torch.float64)
    leaf = logps.clone().requires_grad_(True)
    loss = fn(leaf, rewards, mask)
    if not isinstance(loss, torch.Tensor):
        raise Hint(f"return a torch scalar tensor (got {type(loss).__name__}): the loss must stay differentiable.")
    if loss.dim() != 0:
        raise Hint(f"the loss must be a scalar, got shape {tuple(loss.shape)}: average over the batch.")
    sequence_logps = (logps * mask).sum(-1)
    assert_close(loss.detach(), expected, name="REINFORCE loss (4 completions of lengths 6, 3, 1, 4)",
                 hints={"you forgot the mask: padded positions were counted.": -(rewards * logps.sum(-1)).mean(),
                        "wrong sign: the loss is MINUS reward times log-prob.": -expected,
                        "summed over the batch instead of averaging over it.": expected * batch,
                        "averaged the log-probs over tokens instead of summing them per completion.":
                            -(rewards * sequence_logps / mask.sum(-1)).mean(),
                        "averaged over every token of the batch; average the completion losses over B.":
                            -(rewards * sequence_logps).sum() / mask.sum()})
    if not loss.requires_grad:
        raise Hint("the loss has no gradient: keep it a torch computation on logps (no .item(), .detach() "
                   "or numpy) so that backward() reaches the policy.")
    (grad,) = torch.autograd.grad(loss, leaf)
    # d loss / d logps[b, t] = -rewards[b] * mask[b, t] / B.
    assert_close(grad, -rewards.unsqueeze(1) * mask / batch, name="gradient of the loss w.r.t. logps",
                 hints={"padded tokens receive gradient: apply the mask.":
                        -rewards.unsqueeze(1) * torch.ones_like(mask) / batch})
    # REINFORCE is the RLOO loss at ratio 1 (one epoch, one mini-batch): same gradient.
    library_leaf = logps.clone().requires_grad_(True)
    (library_grad,) = torch.autograd.grad(rloo_policy_loss(library_leaf, None, rewards, mask).loss, library_leaf)
    assert_close(grad, library_grad, name="gradient compared with course_lib.algos.rloo.rloo_policy_loss")


def check_baseline_subtract(fn) -> None:
    row = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    mean_centered = torch.tensor([[-1.5, -0.5, 0.5, 1.5]], dtype=torch.float64)
    leave_one_out = torch.tensor([[-2.0, -2.0 / 3, 2.0 / 3, 2.0]], dtype=torch.float64)
    assert_close(fn(row, "mean"), mean_centered, name="kind='mean' on [[1, 2, 3, 4]]",
                 hints={"subtract the baseline: reward - mean, not mean - reward.": -mean_centered,
                        "all zeros: the mean runs along the wrong dimension; rows are prompts, so average "
                        "each row (dim=-1).": torch.zeros_like(row)})
    assert_close(fn(row, "leave_one_out"), leave_one_out, name="kind='leave_one_out' on [[1, 2, 3, 4]]",
                 hints={"the leave-one-out baseline excludes the completion's own reward: "
                        "(row sum - r_i) / (G - 1).": mean_centered,
                        "divide the others' sum by G - 1 (there are G - 1 others), not by G.":
                            row - (row.sum() - row) / 4})

    # Several prompts: baselines stay within each prompt's row.
    generator = torch.Generator().manual_seed(2)
    rewards = torch.randint(0, 4, (3, 5), generator=generator).to(torch.float64)  # (P, G)
    rewards[1] += 10.0  # a prompt whose rewards are all high: a per-row baseline removes that
    expected_mean = torch.stack([r - sum(r.tolist()) / len(r) for r in rewards])
    assert_close(fn(rewards, "mean"), expected_mean, name="kind='mean' on 3 prompts x 5 completions",
                 hints={"the baseline must be each prompt's own mean (a row), not the mean of the whole batch.":
                        rewards - rewards.mean(),
                        "the mean runs along the wrong dimension: rows are prompts, average over dim=-1.":
                        rewards - rewards.mean(dim=0, keepdim=True)})
    expected_loo = rloo_advantages(rewards.reshape(-1), num_generations=5).reshape(3, 5)
    assert_close(fn(rewards, "leave_one_out"), expected_loo,
                 name="kind='leave_one_out' vs course_lib.algos.rloo.rloo_advantages",
                 hints={"the baseline must come from each prompt's own row, not from the whole batch.":
                        rewards - (rewards.sum() - rewards) / (rewards.numel() - 1)})
    # Identity: leave-one-out = G / (G - 1) * mean-centred.
    assert_close(fn(rewards, "leave_one_out"), 5 / 4 * expected_mean, name="leave-one-out = G/(G-1) * (r - mean)")

    try:
        fn(row, "median")
    except ValueError:
        return
    raise Hint("kind='median' should raise ValueError naming the allowed kinds ('mean', 'leave_one_out').")


def _returns_leaving_input_alone(fn, rewards: torch.Tensor, gamma: float):
    """``fn(rewards, gamma)`` on a copy; a Hint if it wrote into its input."""
    given = rewards.clone()
    out = fn(given, gamma)
    if not torch.equal(given, rewards):
        raise Hint(f"your function changed `rewards` in place (rewards {rewards.tolist()} became "
                   f"{given.tolist()}): the caller's tensor must stay as it was. Write the returns into a new "
                   "tensor (torch.zeros_like(rewards)) or work on rewards.clone().")
    return out


def check_discounted_returns(fn) -> None:
    fn = functools.partial(_returns_leaving_input_alone, fn)
    rewards = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    assert_close(fn(rewards, 0.9), torch.tensor([0.81, 0.9, 1.0], dtype=torch.float64),
                 name="rewards [0, 0, 1], gamma=0.9",
                 hints={"the sum runs forward in time: G_t collects the rewards from t onward "
                        "(compute it from the last step backwards).": torch.tensor([0.0, 0.0, 1.0]),
                        "the returns are in reverse order.": torch.tensor([1.0, 0.9, 0.81]),
                        "gamma multiplies the future only: G_t = r_t + gamma * G_{t+1}.":
                            torch.tensor([0.729, 0.81, 0.9])})
    assert_close(fn(rewards, 1.0), torch.ones(3, dtype=torch.float64), name="rewards [0, 0, 1], gamma=1")
    assert_close(fn(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), 0.0),
                 torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), name="gamma=0 keeps only the immediate reward")

    generator = torch.Generator().manual_seed(3)
    episode = torch.randn(12, generator=generator, dtype=torch.float64)
    gamma = 0.95
    expected = torch.tensor([sum(gamma**k * float(episode[t + k]) for k in range(12 - t)) for t in range(12)],
                            dtype=torch.float64)
    assert_close(fn(episode, gamma), expected, name="12-step episode, gamma=0.95",
                 hints={"accumulated from the start of the episode forward (G_t = r_t + gamma * G_{t-1}); "
                        "returns look ahead, so run the recursion backwards.":
                            torch.tensor([sum(gamma**(t - k) * float(episode[k]) for k in range(t + 1))
                                          for t in range(12)], dtype=torch.float64)})
