"""Checks of lesson 14's exercises (packing mask, DPO loss, distillation advantage, rejection filter).

Each check compares with values worked out by hand in the comments and with
``course_lib.algos`` (whose DPO loss matches TRL 1.16's), and names the usual mistake.
"""

from __future__ import annotations

import math

import torch

from ..feedback import Hint


def check_packing_mask(fn) -> None:
    mask = fn([1, 1, 1, 2, 2, 0])
    if not isinstance(mask, torch.Tensor) or mask.shape != (6, 6):
        raise Hint(f"return a (L, L) tensor, here (6, 6); got {type(mask).__name__} "
                   f"{tuple(getattr(mask, 'shape', ()))}.")
    mask = mask.bool()
    if mask[0, 1]:
        raise Hint("token 0 reads token 1, which comes after it: the mask must be causal (j <= i).")
    if mask[3, 2] or mask[4, 0]:
        raise Hint("token 3 (second example) reads token 2 (first example): packed examples must not see each other. "
                   "AND the causal mask with segment_ids[i] == segment_ids[j].")
    if not (mask[2, 0] and mask[4, 3] and mask[3, 3]):
        raise Hint("inside one example a token reads itself and every earlier token of its example.")
    if not mask[5, 5] or mask[5, :5].any():
        raise Hint("padding (segment 0) reads only itself: no real token, and not nothing (an empty softmax row is NaN).")
    expected = torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0],
                             [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    if not torch.equal(mask, expected):
        raise Hint(f"for segments [1, 1, 1, 2, 2, 0] the mask should be\n{expected.int()}\ngot\n{mask.int()}.")


def _pairs():
    gen = torch.Generator().manual_seed(0)
    logps = [-3 * torch.rand(3, 5, generator=gen) for _ in range(4)]
    chosen_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float32)
    rejected_mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.float32)
    return logps, chosen_mask, rejected_mask


def check_dpo_sigmoid_loss(fn) -> None:
    from ..algos.dpo import dpo_loss

    # By hand: one pair of one token each. delta = (-1 - -2) - (-3 - -2) = 2; beta 0.5 -> -log sigmoid(1).
    one = torch.ones(1, 1)
    value = fn(torch.tensor([[-1.0]]), torch.tensor([[-3.0]]), torch.tensor([[-2.0]]), torch.tensor([[-2.0]]),
               one, one, beta=0.5)
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        raise Hint("return the mean over pairs as a 0-dim tensor (loss.mean()).")
    if not math.isclose(value.item(), math.log(1 + math.exp(-1.0)), rel_tol=1e-5):
        if math.isclose(value.item(), math.log(1 + math.exp(1.0)), rel_tol=1e-5):
            raise Hint("the sign of delta is reversed: chosen minus rejected, each as policy minus reference.")
        raise Hint(f"one pair with delta 2 and beta 0.5 gives -log sigmoid(1) = {math.log(1 + math.exp(-1)):.4f}; "
                   f"got {value.item():.4f}. Did you multiply by beta?")
    (chosen, rejected, ref_chosen, ref_rejected), chosen_mask, rejected_mask = _pairs()
    value = fn(chosen, rejected, ref_chosen, ref_rejected, chosen_mask, rejected_mask, beta=0.1)

    def total(x, m):
        return (x * m).sum(-1)

    expected = dpo_loss(total(chosen, chosen_mask), total(rejected, rejected_mask), total(ref_chosen, chosen_mask),
                        total(ref_rejected, rejected_mask), beta=0.1, loss_type="sigmoid").loss
    if not math.isclose(value.item(), expected.item(), rel_tol=1e-5):
        def mean(x, m):
            return (x * m).sum(-1) / m.sum(-1)

        averaged = dpo_loss(mean(chosen, chosen_mask), mean(rejected, rejected_mask), mean(ref_chosen, chosen_mask),
                            mean(ref_rejected, rejected_mask), beta=0.1).loss
        unmasked = dpo_loss(chosen.sum(-1), rejected.sum(-1), ref_chosen.sum(-1), ref_rejected.sum(-1), beta=0.1).loss
        if math.isclose(value.item(), averaged.item(), rel_tol=1e-5):
            raise Hint("you averaged the log-probs over tokens: a completion's log-probability is their SUM.")
        if math.isclose(value.item(), unmasked.item(), rel_tol=1e-5):
            raise Hint("the padding tokens were summed too: multiply by the masks before summing.")
        raise Hint(f"three pairs of different lengths: expected {expected.item():.5f}, got {value.item():.5f}.")


def check_distillation_advantages(fn) -> None:
    student = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    teacher = torch.tensor([[-0.5, -3.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    value = fn(student, teacher, mask)
    # By hand: teacher - student = 0.5, -1.0, (0.0 masked).
    if value.shape != (1, 3):
        raise Hint(f"return one advantage per token, shape (B, T) = (1, 3); got {tuple(value.shape)}.")
    if torch.allclose(value.detach(), torch.tensor([[-0.5, 1.0, 0.0]])):
        raise Hint("the sign is reversed: the reward is log p_teacher - log p_student (minus the reverse KL), "
                   "positive where the teacher likes the sampled token more.")
    if not torch.allclose(value.detach(), torch.tensor([[0.5, -1.0, 0.0]])):
        raise Hint(f"expected [[0.5, -1.0, 0.0]] (teacher - student, 0 where the mask is 0); got {value.tolist()}.")
    if value.requires_grad:
        raise Hint("the advantage carries a gradient: .detach() the student's log-probs; an advantage is a constant "
                   "of the policy gradient (the gradient goes through log pi in the loss, not through A).")


def check_rejection_filter(fn) -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, float("nan"), 1.0, 1.0, 1.0, 0.5])
    kept = fn(rewards, num_generations=4, threshold=1.0)
    if kept.dtype != torch.bool or kept.shape != (8,):
        raise Hint(f"return a (B,) bool tensor; got {kept.dtype} {tuple(kept.shape)}.")
    if kept[3]:
        raise Hint("a NaN (unscorable) reward was kept: it is never accepted.")
    if kept.tolist() != [True, False, True, False, True, True, True, False]:
        raise Hint(f"keep rewards >= threshold (1.0 is kept, 0.5 is not); got {kept.tolist()}.")
    capped = fn(rewards, num_generations=4, threshold=1.0, max_per_prompt=2)
    # By hand: prompt 0 (rows 0-3) accepts rows 0, 2; prompt 1 (rows 4-7) accepts 4, 5, 6 -> first two: 4, 5.
    if capped.tolist() == [True, False, True, False, False, False, False, False]:
        raise Hint("the cap was applied over the whole batch: max_per_prompt counts each prompt's samples "
                   "(view as (prompts, num_generations), cumsum along each row).")
    if capped.tolist() != [True, False, True, False, True, True, False, False]:
        raise Hint(f"with max_per_prompt=2: prompt 0 keeps rows 0 and 2, prompt 1 its first two accepted, 4 and 5; "
                   f"got {capped.tolist()}.")
