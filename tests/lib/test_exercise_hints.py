"""The graders' diagnoses: each typical mistake, written out as a learner would write it,
must fail its check with the specific hint (not a bare "expected ... got ...").

Each wrong implementation below differs from the reference answer by one mistake; the test
asserts the words of the diagnosis that names that mistake. The checks run on the
reference answers (and fail on the stubs) in tests/exercises/.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.checks import ex01, ex02, ex03, ex04, ex05, ex06, ex06b, ex08, ex10
from course_lib.feedback import Hint


def _hint_of(check, fn) -> str:
    with pytest.raises(Hint) as caught:
        check(fn)
    return str(caught.value)


# ----------------------------------------------------------------------------- lesson 01
def epsilon_greedy_global_rng(values, epsilon, rng):
    """Right distribution, but drawn from numpy's global random state, not the rng passed in."""
    if np.random.random() < epsilon:
        return int(np.random.randint(len(values)))
    return int(np.argmax(values))


def epsilon_greedy_half_global(values, epsilon, rng):
    """Decides with the rng passed in, but picks the exploring arm with the global state."""
    if rng.random() < epsilon:
        return int(np.random.randint(len(values)))
    return int(np.argmax(values))


def verifier_reward_swapped(answer, target, verifier):
    try:
        float(answer.strip())
        number = 1.0
    except ValueError:
        number = -1.0
    return number + (3.0 if verifier(target, answer) else -3.0)  # arguments swapped


# ----------------------------------------------------------------------------- lesson 02
def discounted_returns_in_place(rewards, gamma):
    """Correct values, but accumulated into the caller's tensor."""
    for t in reversed(range(rewards.shape[0] - 1)):
        rewards[t] += gamma * rewards[t + 1]
    return rewards


# ----------------------------------------------------------------------------- lesson 03
def gae_lambda_inside_delta(rewards, values, gamma=1.0, lam=0.95):
    advantages = torch.zeros_like(rewards)
    next_value, next_advantage = 0.0, 0.0
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * lam * next_value - values[t]  # lambda does not belong here
        next_advantage = delta + gamma * lam * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages


def kl_k1_wrote_k3(logps, ref_logps):
    u = ref_logps - logps
    return torch.exp(u) - u - 1


def kl_k3_wrote_k1(logps, ref_logps):
    return logps - ref_logps


# ----------------------------------------------------------------------------- lesson 04
def value_loss_around_returns(values, old_values, returns, mask, cliprange_value=0.2):
    clipped = torch.clamp(values, returns - cliprange_value, returns + cliprange_value)
    per_token = torch.max((values - returns) ** 2, (clipped - returns) ** 2)
    return 0.5 * (per_token * mask).sum() / mask.sum()


def whiten_per_row(x, mask, shift_mean=True):
    count = mask.sum(1, keepdim=True)
    mean = (x * mask).sum(1, keepdim=True) / count
    var = (((x - mean) ** 2) * mask).sum(1, keepdim=True) / (count - 1).clamp(min=1)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        out = out + mean
    return out * mask


def per_token_rewards_eos_rows_swapped(scores, logps, ref_logps, mask, beta, is_eos=None, missing_eos_penalty=None):
    scores = scores.clone()
    if is_eos is not None and missing_eos_penalty is not None:
        scores[is_eos.bool()] -= missing_eos_penalty  # penalises the rows that DID end
    rewards = -beta * (logps - ref_logps) * mask
    last = (mask.sum(1).long() - 1).clamp(min=0)
    rewards[torch.arange(rewards.shape[0]), last] += scores
    return rewards


# ----------------------------------------------------------------------------- lesson 05
def _grpo_loss(logps, old_logps, advantages, mask, epsilon, *, pick=torch.min, use_exp=True):
    old_logps = logps.detach() if old_logps is None else old_logps.detach()
    ratio = torch.exp(logps - old_logps) if use_exp else logps - old_logps
    adv = advantages.unsqueeze(1)
    per_token = -pick(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()


def grpo_loss_optimistic(logps, old_logps, advantages, mask, epsilon=0.2):
    return _grpo_loss(logps, old_logps, advantages, mask, epsilon, pick=torch.max)


def grpo_loss_sign_flipped(logps, old_logps, advantages, mask, epsilon=0.2):
    return -_grpo_loss(logps, old_logps, advantages, mask, epsilon)


def grpo_loss_ratio_without_exp(logps, old_logps, advantages, mask, epsilon=0.2):
    return _grpo_loss(logps, old_logps, advantages, mask, epsilon, use_exp=False)


# ----------------------------------------------------------------------------- lesson 06
def sequence_ratio_without_exp(logps, old_logps, mask):
    return ((logps - old_logps) * mask).sum(1) / mask.sum(1).clamp(min=1.0)


# ----------------------------------------------------------------------------- lesson 08
def rloo_reward_with_k3(scores, logps, ref_logps, mask, kl_coef):
    u = ref_logps - logps
    kl = (torch.exp(u) - u - 1) * mask
    non_score = -kl_coef * kl.sum(1)
    return scores + non_score, non_score


# ----------------------------------------------------------------------------- lesson 10
def chunked_over_batch_logsumexp(logits, ids, chunk_size):
    """Right values, but each block is chunk_size whole sequences: (chunk, T, V)."""
    pieces = []
    for start in range(0, logits.shape[0], chunk_size):
        block = logits[start:start + chunk_size]
        chosen = block.gather(-1, ids[start:start + chunk_size].unsqueeze(-1)).squeeze(-1)
        pieces.append(chosen - torch.logsumexp(block, dim=-1))
    return torch.cat(pieces)


def chunked_over_batch_log_softmax(logits, ids, chunk_size):
    pieces = []
    for start in range(0, logits.shape[0], chunk_size):
        block = torch.log_softmax(logits[start:start + chunk_size], dim=-1)
        pieces.append(block.gather(-1, ids[start:start + chunk_size].unsqueeze(-1)).squeeze(-1))
    return torch.cat(pieces)


CASES = [
    # (check, wrong implementation, words the diagnosis must contain)
    (ex01.check_epsilon_greedy_action, epsilon_greedy_global_rng, "the rng passed in"),
    (ex01.check_epsilon_greedy_action, epsilon_greedy_half_global, "the rng passed in"),
    (ex01.check_verifier_reward, verifier_reward_swapped, "verifier(answer, target)"),
    (ex02.check_discounted_returns, discounted_returns_in_place, "changed `rewards` in place"),
    (ex03.check_gae, gae_lambda_inside_delta, "lambda does not enter the TD error"),
    (ex03.check_kl_k1, kl_k1_wrote_k3, "that is k3"),
    (ex03.check_kl_k3, kl_k3_wrote_k1, "that is k1"),
    (ex04.check_value_loss, value_loss_around_returns, "centred on the returns"),
    (ex04.check_whiten, whiten_per_row, "whitened each row on its own"),
    (ex04.check_per_token_rewards, per_token_rewards_eos_rows_swapped, "rows that DID end"),
    (ex05.check_grpo_clipped_loss, grpo_loss_optimistic, "optimistic"),
    (ex05.check_grpo_clipped_loss, grpo_loss_sign_flipped, "the sign is flipped"),
    (ex05.check_grpo_clipped_loss, grpo_loss_ratio_without_exp, "exponentiate"),
    (ex06.check_sequence_level_ratio, sequence_ratio_without_exp, "exponentiate"),
    (ex08.check_rloo_reward_with_kl, rloo_reward_with_k3, "k3"),
    (ex10.check_chunked_selective_log_softmax, chunked_over_batch_logsumexp, "batch axis"),
    (ex10.check_chunked_selective_log_softmax, chunked_over_batch_log_softmax, "batch axis"),
]


@pytest.mark.parametrize("check, wrong, words", CASES, ids=[case[1].__name__ for case in CASES])
def test_typical_mistake_gets_its_diagnosis(check, wrong, words):
    hint = _hint_of(check, wrong)
    assert words in hint, f"{wrong.__name__}: the hint does not name the mistake:\n{hint}"


def test_optimistic_bound_is_not_reported_as_a_sign_flip():
    assert "sign" not in _hint_of(ex05.check_grpo_clipped_loss, grpo_loss_optimistic)
    assert "optimistic" not in _hint_of(ex05.check_grpo_clipped_loss, grpo_loss_sign_flipped)


def test_value_clip_around_returns_is_not_reported_as_no_clipping():
    assert "old_values" in _hint_of(ex04.check_value_loss, value_loss_around_returns)


def test_in_place_returns_are_named_before_any_value_mismatch():
    hint = _hint_of(ex02.check_discounted_returns, discounted_returns_in_place)
    assert "expected" not in hint and "clone" in hint


# ----------------------------------------------------------------------------- more diagnoses
def token_level_rewards_kl_flipped(scores, logps, ref_logps, mask, kl_coef):
    rewards = kl_coef * (logps - ref_logps) * mask  # sign flipped
    last = (mask.sum(1).long() - 1).clamp(min=0)
    rewards[torch.arange(rewards.shape[0]), last] += scores
    return rewards


def correction_weight_ignores_clip_min(old_logps, sampling_logps, mask, mode, clip_min=None, clip_max=3.0):
    log_ratio = ((old_logps - sampling_logps) * mask).detach()
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(-1, keepdim=True)
    weight = torch.exp(log_ratio)
    if mode.endswith("truncate"):
        return torch.clamp(weight, max=clip_max)
    return weight.masked_fill(weight > (float("inf") if clip_max is None else clip_max), 0.0)


def cispo_weight_not_detached(logps, old_logps, advantages, epsilon_max=5.0):
    weight = torch.clamp(torch.exp(logps - old_logps), max=epsilon_max)
    return -weight * advantages.unsqueeze(1) * logps


def entropy_mask_over_padding(entropies, mask, quantile):
    cut = torch.quantile(entropies.float().flatten(), 1.0 - quantile)
    return (entropies >= cut) & mask.bool()


def entropy_mask_drops_ties(entropies, mask, quantile):
    cut = torch.quantile(entropies[mask.bool()].float(), 1.0 - quantile)
    return (entropies > cut) & mask.bool()


def entropy_mask_wrong_quantile(entropies, mask, quantile):
    cut = torch.quantile(entropies[mask.bool()].float(), quantile)
    return (entropies >= cut) & mask.bool()


def rloo_loss_clipped_per_token(logps, old_logps, advantages, mask, cliprange=0.2):
    ratio = torch.exp(torch.where(mask != 0, logps - old_logps, torch.zeros_like(logps)))
    adv = advantages.unsqueeze(1)
    per_token = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cliprange, 1 + cliprange))
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def rloo_loss_padding_summed(logps, old_logps, advantages, mask, cliprange=0.2):
    ratio = torch.exp((logps - old_logps).sum(1))
    return torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - cliprange, 1 + cliprange)).mean()


def grpo_loss_old_logps_not_detached(logps, old_logps, advantages, mask, epsilon=0.2):
    old = logps if old_logps is None else old_logps
    ratio = torch.exp(logps - old)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def group_advantages_without_std(rewards, num_generations):
    """Centred on the group mean but never divided by the group's std (scale_rewards='none')."""
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.mean(1, keepdim=True)).view(-1)


def grpo_loss_product_clamped(logps, old_logps, advantages, mask, epsilon=0.2):
    """Clamps r * A to [1 - eps, 1 + eps] instead of clipping r and multiplying by A."""
    old = logps.detach() if old_logps is None else old_logps.detach()
    ratio = torch.exp(logps - old)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio * adv, 1 - epsilon, 1 + epsilon))
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def bradley_terry_swapped(chosen_scores, rejected_scores):
    return -torch.nn.functional.logsigmoid(rejected_scores - chosen_scores).mean()


def bradley_terry_log_of_sigmoid(chosen_scores, rejected_scores):
    """Right on moderate gaps, infinite on a gap of -2000: log(sigmoid(x)) underflows."""
    return -torch.log(torch.sigmoid(chosen_scores - rejected_scores)).mean()


def logps_without_shift(logits, input_ids, prompt_length, completion_mask, temperature=1.0):
    log_probs = torch.log_softmax(logits[:, prompt_length:, :] / temperature, dim=-1)
    logps = log_probs.gather(-1, input_ids[:, prompt_length:].unsqueeze(-1)).squeeze(-1)
    return logps * completion_mask, -(log_probs.exp() * log_probs).sum(-1) * completion_mask


def logps_temperature_after_log_softmax(logits, input_ids, prompt_length, completion_mask, temperature=1.0):
    log_probs = torch.log_softmax(logits[:, prompt_length - 1:-1, :], dim=-1) / temperature
    logps = log_probs.gather(-1, input_ids[:, prompt_length:].unsqueeze(-1)).squeeze(-1)
    return logps * completion_mask, -(log_probs.exp() * log_probs).sum(-1) * completion_mask


def logps_unmasked(logits, input_ids, prompt_length, completion_mask, temperature=1.0):
    log_probs = torch.log_softmax(logits[:, prompt_length - 1:-1, :] / temperature, dim=-1)
    logps = log_probs.gather(-1, input_ids[:, prompt_length:].unsqueeze(-1)).squeeze(-1)
    return logps, -(log_probs.exp() * log_probs).sum(-1)


def grpo_loop_fresh_sampler_each_step(model, sample_batch, reward_fn, steps, num_generations=8, learning_rate=3e-5,
                                      epsilon=0.2, num_iterations=1):
    """The reference loop restarted at every step: each restart asks for batch 0 again."""
    from course_lib.grading import load_exercise

    reference = load_exercise("ex05_grpo", impl="solutions")
    log = []
    for step in range(steps):  # one step at a time, each with a fresh loop
        row = reference.grpo_loop(model, sample_batch, reward_fn, 1, num_generations, learning_rate, epsilon,
                                  num_iterations)[0]
        log.append({**row, "step": step + 1})
    return log


def sampling_version_rounded_down(taken_step, max_staleness, weight_sync_steps=1):
    """Rounds s - max_staleness down to a sent version: one step staler than the bound allows."""
    return max(0, taken_step - max_staleness) // weight_sync_steps * weight_sync_steps


def sampling_version_not_rounded(taken_step, max_staleness, weight_sync_steps=1):
    """Forgets that only multiples of weight_sync_steps reach the worker."""
    return max(0, taken_step - max_staleness)


MORE_CASES = [
    (ex10.check_sampling_version, sampling_version_rounded_down, "round up, not down"),
    (ex10.check_sampling_version, sampling_version_not_rounded, "never sent"),
    (ex08.check_token_level_rewards, token_level_rewards_kl_flipped, "the KL sign is flipped"),
    (ex10.check_correction_weight, correction_weight_ignores_clip_min, "clip_min=0.5 was ignored"),
    (ex06b.check_cispo_per_token_loss, cispo_weight_not_detached, "not detached"),
    (ex08.check_rloo_sequence_clipped_loss, rloo_loss_clipped_per_token, "clipped per token"),
    (ex08.check_rloo_sequence_clipped_loss, rloo_loss_padding_summed, "padded positions"),
    (ex06b.check_high_entropy_token_mask, entropy_mask_over_padding, "padding included"),
    (ex06b.check_high_entropy_token_mask, entropy_mask_drops_ties, "ties at the cut"),
    (ex06b.check_high_entropy_token_mask, entropy_mask_wrong_quantile, "1 - quantile"),
    (ex05.check_grpo_clipped_loss, grpo_loss_old_logps_not_detached, "detach the old log-probs"),
    (ex05.check_group_advantages, group_advantages_without_std, "scale_rewards='none'"),
    (ex05.check_grpo_clipped_loss, grpo_loss_product_clamped, "clip the RATIO"),
    (ex04.check_bradley_terry_loss, bradley_terry_swapped, "swapped"),
    (ex04.check_bradley_terry_loss, bradley_terry_log_of_sigmoid, "logsigmoid"),
    (ex05.check_completion_logps_and_entropy, logps_without_shift, "no shift"),
    (ex05.check_completion_logps_and_entropy, logps_temperature_after_log_softmax, "divide the LOGITS"),
    (ex05.check_completion_logps_and_entropy, logps_unmasked, "multiply by completion_mask"),
    (ex05.check_grpo_loop, grpo_loop_fresh_sampler_each_step, "ONE PromptSampler"),
]


@pytest.mark.parametrize("check, wrong, words", MORE_CASES, ids=[case[1].__name__ for case in MORE_CASES])
def test_more_mistakes_get_their_diagnosis(check, wrong, words):
    hint = _hint_of(check, wrong)
    assert words in hint, f"{wrong.__name__}: the hint does not name the mistake:\n{hint}"
