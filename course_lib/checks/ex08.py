"""Checks for lesson 08 (RLOO): leave-one-out advantages, the KL in the reward, Reinforce++'s
per-token rewards, and the sequence-level clipped loss.

Expected values are the worked numbers of the RLOO notes (3 prompts x 4 completions, rewards 1..10),
other hand-worked cases, `course_lib.algos.rloo.rloo_advantages`, and explicit loops
written here; each typical mistake is reproduced to name it in the hint.
"""

from __future__ import annotations

import torch

from ..algos.rloo import generation_major_to_prompt_major, rloo_policy_loss
from ..algos.rloo import rloo_advantages as library_rloo_advantages
from ..feedback import Hint, assert_close


def _tensor(values, dtype=torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


# The RLOO notes' example: rewards listed generation-major (first completion of each of the three
# prompts, then the second completion of each, ...).
SEED_GENERATION_MAJOR = [1.0, 2.0, 3.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]


def _advantage_mistakes(rewards: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    grouped = rewards.view(-1, k)
    by_generation = rewards.view(k, -1)  # the generation-major misreading of a prompt-major tensor
    return {
        "grouped the rewards generation-major (rewards.view(k, -1), as the RLOO notes' vectorized code does); "
        "here the layout is prompt-major: the k completions of a prompt are contiguous, use rewards.view(-1, k).":
            (by_generation - (by_generation.sum(0, keepdim=True) - by_generation) / (k - 1)).reshape(-1),
        "the baseline includes the completion's own reward (r_i - mean of the whole group); RLOO leaves it "
        "out: the baseline is the mean of the OTHER k - 1 rewards.":
            (grouped - grouped.mean(1, keepdim=True)).reshape(-1),
        "divided the others' sum by k; there are k - 1 others.":
            (grouped - (grouped.sum(1, keepdim=True) - grouped) / k).reshape(-1),
        "returned the baseline; the advantage is the reward minus the baseline.":
            ((grouped.sum(1, keepdim=True) - grouped) / (k - 1)).reshape(-1),
        "the sign is flipped: advantage = reward - baseline.":
            -(grouped - (grouped.sum(1, keepdim=True) - grouped) / (k - 1)).reshape(-1),
        "normalised by the group's std as GRPO does; RLOO only subtracts the leave-one-out mean.":
            ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).reshape(-1),
    }


def check_rloo_advantages(fn) -> None:
    # The RLOO notes' numbers, translated to prompt-major: prompt 0 got rewards 1, 2, 5, 8.
    prompt_major = generation_major_to_prompt_major(_tensor(SEED_GENERATION_MAJOR), 4)
    got = fn(prompt_major.clone(), 4)
    if isinstance(got, torch.Tensor) and got.dim() == 2:
        raise Hint("return one advantage per completion, shape (B,): flatten the (P, k) result with .reshape(-1).")
    expected = _tensor([1 - (2 + 5 + 8) / 3, 2 - (1 + 5 + 8) / 3, 5 - (1 + 2 + 8) / 3, 8 - (1 + 2 + 5) / 3,
                        2 - (3 + 6 + 9) / 3, 3 - (2 + 6 + 9) / 3, 6 - (3 + 2 + 9) / 3, 9 - (2 + 3 + 6) / 3,
                        3 - (4 + 7 + 10) / 3, 4 - (3 + 7 + 10) / 3, 7 - (3 + 4 + 10) / 3, 10 - (3 + 4 + 7) / 3])
    assert_close(got, expected, name="the RLOO notes' example in prompt-major order (rewards 1, 2, 5, 8 | 2, 3, 6, 9 | ...)",
                 hints=_advantage_mistakes(prompt_major, 4))
    # The RLOO notes' two asserts: its advantage[0] and advantage[7] sit at prompt-major 0 and 6.
    assert_close(got[0], 1 - (2 + 5 + 8) / 3, name="first completion of the first prompt")
    assert_close(got[6], 6 - (3 + 2 + 9) / 3, name="third completion of the second prompt")

    cases = [
        (_tensor([1.0, 0.0]), 2),
        (_tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), 3),
        (torch.randn(24, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2 + 1, 6),
        (torch.randint(0, 2, (16,), generator=torch.Generator().manual_seed(4)).double(), 4),
    ]
    for rewards, k in cases:
        got = fn(rewards.clone(), k)
        assert_close(got, library_rloo_advantages(rewards, k), name=f"rloo_advantages({rewards.tolist()}, k={k})",
                     hints=_advantage_mistakes(rewards, k))
    rewards = _tensor([2.0, 0.0, 1.0, 1.0])
    fn(rewards, 2)
    if rewards.tolist() != [2.0, 0.0, 1.0, 1.0]:
        raise Hint("your function changed the rewards tensor in place; compute new tensors instead.")


def _kl_case(seed: int):
    generator = torch.Generator().manual_seed(seed)
    batch, tokens = 5, 6
    logps = -torch.rand(batch, tokens, generator=generator, dtype=torch.float64) * 3
    ref_logps = -torch.rand(batch, tokens, generator=generator, dtype=torch.float64) * 3
    lengths = torch.tensor([6, 2, 4, 1, 3])
    mask = (torch.arange(tokens).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    # Padding holds garbage, as after a real forward pass: only the mask says what counts.
    logps = torch.where(mask.bool(), logps, torch.full_like(logps, -7.0))
    scores = torch.randn(batch, generator=generator, dtype=torch.float64)
    return scores, logps, ref_logps, mask


def _reward_by_loops(scores, logps, ref_logps, mask, kl_coef):
    rlhf, non_score = [], []
    for b in range(scores.shape[0]):
        kl = sum(float(logps[b, t] - ref_logps[b, t]) for t in range(logps.shape[1]) if mask[b, t] == 1)
        non_score.append(-kl_coef * kl)
        rlhf.append(float(scores[b]) - kl_coef * kl)
    return _tensor(rlhf), _tensor(non_score)


def _reward_mistakes(scores, logps, ref_logps, mask, kl_coef) -> dict[str, torch.Tensor]:
    kl = (logps - ref_logps) * mask
    return {
        "padded positions were counted: multiply the per-token KL by the mask before summing.":
            scores - kl_coef * (logps - ref_logps).sum(1),
        "the KL was added to the score; it is a penalty: rlhf_reward = score - kl_coef * KL.":
            scores + kl_coef * kl.sum(1),
        "averaged the KL over tokens; the sequence-level penalty sums it over the completion's tokens.":
            scores - kl_coef * kl.sum(1) / mask.sum(1),
        "used ref_logps - logps; the k1 estimate of KL(pi || pi_ref) is logps - ref_logps.":
            scores - kl_coef * (-kl).sum(1),
        "forgot kl_coef: the penalty is kl_coef * KL.": scores - kl.sum(1),
        "used the k3 estimator (exp(u) - u - 1); RLOO puts the k1 estimate, the plain log-ratio "
        "logps - ref_logps, into the reward (TRL's RLOOTrainer does the same), summed over the completion.":
            scores - kl_coef * ((torch.expm1(-(logps - ref_logps)) + (logps - ref_logps)) * mask).sum(1),
    }


def check_rloo_reward_with_kl(fn) -> None:
    # Hand-worked: KL = 0.5 + 0.5 = 1.0 in row 0; row 1 counts only its first token (0.25).
    scores = _tensor([1.0, 0.0])
    logps = _tensor([[-1.0, -2.0], [-0.5, -4.0]])
    ref_logps = _tensor([[-1.5, -2.5], [-0.75, -1.0]])
    mask = _tensor([[1.0, 1.0], [1.0, 0.0]])
    out = fn(scores, logps, ref_logps, mask, 0.1)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise Hint(f"return a pair (rlhf_reward, non_score_reward), got {type(out).__name__}.")
    rlhf, non_score = out
    hints = _reward_mistakes(scores, logps, ref_logps, mask, 0.1)
    assert_close(rlhf, _tensor([0.9, -0.025]), name="rlhf_reward (hand-worked, kl_coef=0.1)", hints=hints)
    assert_close(non_score, _tensor([-0.1, -0.025]), name="non_score_reward (hand-worked, kl_coef=0.1)",
                 hints={m: v - scores for m, v in hints.items()})

    for seed, kl_coef in ((0, 0.05), (1, 0.3)):
        scores, logps, ref_logps, mask = _kl_case(seed)
        rlhf, non_score = fn(scores, logps, ref_logps, mask, kl_coef)
        expected_rlhf, expected_non_score = _reward_by_loops(scores, logps, ref_logps, mask, kl_coef)
        hints = _reward_mistakes(scores, logps, ref_logps, mask, kl_coef)
        assert_close(rlhf, expected_rlhf, name=f"rlhf_reward on a padded batch (kl_coef={kl_coef})", hints=hints)
        assert_close(non_score, expected_non_score, name=f"non_score_reward (kl_coef={kl_coef})",
                     hints={m: v - scores for m, v in hints.items()})


def _token_rewards_by_loops(scores, logps, ref_logps, mask, kl_coef):
    out = torch.zeros_like(logps)
    for b in range(logps.shape[0]):
        valid = [t for t in range(logps.shape[1]) if mask[b, t] == 1]
        for t in valid:
            out[b, t] = -kl_coef * (logps[b, t] - ref_logps[b, t])
        out[b, valid[-1]] += scores[b]
    return out


def _token_mistakes(scores, logps, ref_logps, mask, kl_coef) -> dict[str, torch.Tensor]:
    kl_rewards = -kl_coef * (logps - ref_logps) * mask
    at_last_column = kl_rewards.clone()
    at_last_column[:, -1] += scores
    at_first = kl_rewards.clone()
    at_first[:, 0] += scores
    unmasked = -kl_coef * (logps - ref_logps)
    last = (mask.sum(1).long() - 1).clamp(min=0)
    unmasked[torch.arange(len(scores)), last] += scores
    everywhere = kl_rewards + scores.unsqueeze(1) * mask
    return {
        "the score went to the last column; with right padding the last VALID token is at index "
        "mask.sum(1) - 1.": at_last_column,
        "the score went to the first token; eq. 1 gives it at the end of the completion (the EOS token).": at_first,
        "padded positions hold rewards: multiply the KL term by the mask.": unmasked,
        "the score was added to every token; it belongs to the last valid token only.": everywhere,
        "the KL sign is flipped: each token pays -kl_coef * (logps - ref_logps), so a token the policy makes "
        "more likely than the reference does is penalised.": _flipped_kl(kl_rewards, scores, last),
    }


def _flipped_kl(kl_rewards: torch.Tensor, scores: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Per-token rewards with +kl_coef * KL instead of -kl_coef * KL (score on the last valid token)."""
    flipped = -kl_rewards
    flipped[torch.arange(len(scores)), last] += scores
    return flipped


def check_token_level_rewards(fn) -> None:
    example = (_tensor([2.0]), _tensor([[-1.0, -1.0, 0.0]]), _tensor([[-2.0, -1.0, 0.0]]), _tensor([[1.0, 1.0, 0.0]]))
    got = fn(*(x.clone() for x in example), 0.5)
    if not isinstance(got, torch.Tensor) or got.shape != (1, 3):
        raise Hint(f"return the (B, T) per-token rewards; got {got!r}.")
    assert_close(got, _tensor([[-0.5, 2.0, 0.0]]), name="hand-worked example of the docstring",
                 hints=_token_mistakes(*example, 0.5))

    for seed, kl_coef in ((2, 0.05), (3, 0.2)):
        scores, logps, ref_logps, mask = _kl_case(seed)
        got = fn(scores.clone(), logps.clone(), ref_logps.clone(), mask.clone(), kl_coef)
        assert_close(got, _token_rewards_by_loops(scores, logps, ref_logps, mask, kl_coef),
                     name=f"per-token rewards of a right-padded batch (kl_coef={kl_coef})",
                     hints=_token_mistakes(scores, logps, ref_logps, mask, kl_coef))
        # Summed over tokens, eq. 1 gives back the sequence-level rlhf_reward.
        expected_rlhf, _ = _reward_by_loops(scores, logps, ref_logps, mask, kl_coef)
        assert_close(got.sum(1), expected_rlhf, name="per-token rewards summed over the completion")


def _sequence_loss_variants(logps, old, advantages, mask, c) -> dict[str, torch.Tensor]:
    """The usual slips, computed so the hint can name them."""
    valid = mask != 0
    diff = torch.where(valid, logps - old, torch.zeros_like(logps))
    ratio_seq = diff.sum(1).exp()
    token_ratio = diff.exp()
    adv = advantages.unsqueeze(1)
    token_loss = torch.max(-adv * token_ratio, -adv * token_ratio.clamp(1 - c, 1 + c))
    return {
        "you clipped per token: RLOO's action is the whole completion, one ratio exp(sum of log-ratios) per row.":
            ((token_loss * mask).sum(1) / mask.sum(1).clamp(min=1)).mean(),
        "you took min instead of max of the two losses (the pessimistic bound is the larger loss).":
            torch.min(-advantages * ratio_seq, -advantages * ratio_seq.clamp(1 - c, 1 + c)).mean(),
        "padded positions entered the sum: mask the log-ratios before summing.":
            torch.max(-advantages * (logps - old).sum(1).exp(),
                      -advantages * (logps - old).sum(1).exp().clamp(1 - c, 1 + c)).mean(),
        "you averaged the log-ratio over the tokens (that is GSPO's ratio); RLOO sums it.":
            torch.max(-advantages * (diff.sum(1) / mask.sum(1)).exp(),
                      -advantages * (diff.sum(1) / mask.sum(1)).exp().clamp(1 - c, 1 + c)).mean(),
        _MIN_WHEN_NEGATIVE: _min_when_negative(logps, old, advantages, mask, c),
    }


_MIN_WHEN_NEGATIVE = ("you took the min of the two losses for negative advantages: the pessimistic bound is the "
                      "MAX of the two losses for both signs. For A < 0 a ratio below 1 - c is clipped (loss "
                      "-A * (1 - c), no gradient) and a ratio above 1 + c is not.")


def _min_when_negative(logps, old, advantages, mask, c) -> torch.Tensor:
    """The sign-dependent slip: max of the losses for A > 0, min for A < 0."""
    ratio = torch.where(mask != 0, logps - old, torch.zeros_like(logps)).sum(1).exp()
    plain, clipped = -advantages * ratio, -advantages * ratio.clamp(1 - c, 1 + c)
    return torch.where(advantages > 0, torch.max(plain, clipped), torch.min(plain, clipped)).mean()


def check_rloo_sequence_clipped_loss(fn) -> None:
    # The docstring's example: r = e^0.3 = 1.35 > 1.2 with A = +1: the clipped branch, loss -1.2, no gradient.
    logps = torch.tensor([[0.2, 0.1]], dtype=torch.float64, requires_grad=True)
    loss = fn(logps, torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
              torch.ones(1, 2, dtype=torch.float64), 0.2)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise Hint(f"return a scalar tensor (the mean over completions), got {getattr(loss, 'shape', type(loss))}.")
    example = (logps.detach(), torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
               torch.ones(1, 2, dtype=torch.float64), 0.2)
    assert_close(loss, -1.2, name="the docstring's example (r = e^0.3, A = +1, c = 0.2)",
                 hints=_sequence_loss_variants(*example))
    if loss.requires_grad:
        (grad,) = torch.autograd.grad(loss, logps)
        if grad.abs().max() > 1e-12:
            raise Hint("the clipped branch must give no gradient: clamp the ratio (torch.clamp), do not detach "
                       "or rebuild it by hand.")

    # A < 0 by hand: log-ratios -0.2 and -0.1, r = e^-0.3 = 0.741 < 0.8: the clipped branch, loss
    # max(0.741, 0.8) = 0.8 and no gradient (the min slip gives 0.741 with a gradient).
    logps = torch.tensor([[-0.2, -0.1]], dtype=torch.float64, requires_grad=True)
    negative = (torch.zeros(1, 2, dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64),
                torch.ones(1, 2, dtype=torch.float64), 0.2)
    loss = fn(logps, *negative)
    variants = _sequence_loss_variants(logps.detach(), *negative)  # with A < 0 only, min everywhere = min for A < 0
    assert_close(loss, 0.8, name="A = -1, r = e^-0.3 = 0.741 below 1 - c (c = 0.2)",
                 hints={_MIN_WHEN_NEGATIVE: variants.pop(_MIN_WHEN_NEGATIVE), **variants})
    if loss.requires_grad:
        (grad,) = torch.autograd.grad(loss, logps)
        if grad.abs().max() > 1e-12:
            raise Hint("A = -1 with r below 1 - c is the clipped branch and must give no gradient: clamp the "
                       "ratio (torch.clamp) and take the max of the two losses.")

    generator = torch.Generator().manual_seed(8)
    B, T = 6, 7
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    old = -torch.rand(B, T, generator=generator, dtype=torch.float64) * 2
    current = old + 0.15 * torch.randn(B, T, generator=generator, dtype=torch.float64)
    current = torch.where(mask.bool(), current, torch.full_like(current, -1e4))  # garbage in the padding
    advantages = torch.randn(B, generator=generator, dtype=torch.float64)
    for c in (0.2, 0.05):
        leaf = current.clone().requires_grad_(True)
        expected = rloo_policy_loss(leaf, old, advantages, mask, cliprange=c).loss
        (expected_grad,) = torch.autograd.grad(expected, leaf)
        leaf = current.clone().requires_grad_(True)
        got = fn(leaf, old, advantages, mask, c)
        assert_close(got, expected.detach(), name=f"random completions of lengths 1 to 7, cliprange={c}",
                     hints=_sequence_loss_variants(current, old, advantages, mask, c))
        if not got.requires_grad:
            raise Hint("the loss carries no gradient: keep logps in the graph (detach nothing).")
        (grad,) = torch.autograd.grad(got, leaf)
        wrong = current.clone().requires_grad_(True)
        (wrong_grad,) = torch.autograd.grad(_min_when_negative(wrong, old, advantages, mask, c), wrong)
        assert_close(grad, expected_grad, name=f"gradient with respect to logps (cliprange={c})",
                     hints={_MIN_WHEN_NEGATIVE: wrong_grad})
