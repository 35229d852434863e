"""More of the graders' diagnoses for lessons 03-08: each typical mistake, written out as a learner
would write it, must fail its check with a hint that names it (not a bare "expected ... got ...").

Each wrong implementation differs from the reference answer by one mistake. Among them: the
sign-dependent clipping slips (max for A < 0), epsilon and epsilon_high swapped, a masked sum
divided by the padded width T, the 1e-8 epsilon, the off-by-one shifts of the log-probs, a flipped
entropy sign, and the update mistakes of lesson 05's hand-written loop, told apart by comparing the
first step's gradient norm with Trainer's.
"""

from __future__ import annotations

import functools

import pytest
import torch

from course_lib.checks import ex03, ex05, ex06, ex06b, ex07, ex08
from course_lib.feedback import Hint


def _hint_of(check, fn) -> str:
    with pytest.raises(Hint) as caught:
        check(fn)
    return str(caught.value)


# ----------------------------------------------------------------------------- lesson 03
def surrogate_product_clamped(ratio, advantages, epsilon=0.2):
    return torch.minimum(ratio * advantages, torch.clamp(ratio * advantages, 1 - epsilon, 1 + epsilon))


def surrogate_max_when_negative(ratio, advantages, epsilon=0.2):
    plain, clipped = ratio * advantages, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * advantages
    return torch.where(advantages > 0, torch.minimum(plain, clipped), torch.maximum(plain, clipped))


# ----------------------------------------------------------------------------- lesson 05: advantages
def _z_score(rewards, num_generations, epsilon=1e-4, inside_sqrt=False):
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(1, keepdim=True)
    if inside_sqrt:
        return (centred / torch.sqrt(grouped.var(1, keepdim=True) + epsilon)).view(-1)
    return (centred / (grouped.std(1, keepdim=True) + epsilon)).view(-1)


def advantages_epsilon_1e8(rewards, num_generations):
    return _z_score(rewards, num_generations, epsilon=1e-8)


def advantages_epsilon_inside_sqrt(rewards, num_generations):
    return _z_score(rewards, num_generations, inside_sqrt=True)


# ----------------------------------------------------------------------------- lesson 05: the loss
def _loss(logps, old_logps, advantages, mask, epsilon=0.2, *, how="right"):
    old = logps.detach() if old_logps is None else old_logps.detach()
    ratio = torch.exp(old - logps) if how == "inverted" else torch.exp(logps - old)
    adv = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    if how == "min_of_ratios":
        per_token = -(torch.minimum(ratio, clipped) * adv)
    elif how == "max_when_negative":
        per_token = -torch.where(adv > 0, torch.minimum(ratio * adv, clipped * adv),
                                 torch.maximum(ratio * adv, clipped * adv))
    else:
        per_token = -torch.minimum(ratio * adv, clipped * adv)
    if how == "masked_sum_over_T":
        return (per_token * mask).mean(1).mean()  # the masked sum divided by T
    return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()


loss_masked_sum_over_T = functools.partial(_loss, how="masked_sum_over_T")
loss_min_of_ratios = functools.partial(_loss, how="min_of_ratios")
loss_ratio_inverted = functools.partial(_loss, how="inverted")
loss_max_when_negative = functools.partial(_loss, how="max_when_negative")
for _name, _fn in (("loss_masked_sum_over_T", loss_masked_sum_over_T), ("loss_min_of_ratios", loss_min_of_ratios),
                   ("loss_ratio_inverted", loss_ratio_inverted), ("loss_max_when_negative", loss_max_when_negative)):
    _fn.__name__ = _name


# ----------------------------------------------------------------------------- lesson 05: log-probs
def _logps(logits, input_ids, prompt_length, completion_mask, temperature=1.0, *, shift=1, tokens_shift=0,
           entropy_sign=1.0):
    width = logits.shape[1]
    log_probs = torch.log_softmax(logits[:, prompt_length - shift:width - shift, :] / temperature, dim=-1)
    tokens = input_ids[:, prompt_length - tokens_shift:input_ids.shape[1] - tokens_shift]
    logps = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -entropy_sign * (log_probs.exp() * log_probs).sum(-1)
    return logps * completion_mask, entropy * completion_mask


def logps_shifted_by_two(logits, input_ids, prompt_length, completion_mask, temperature=1.0):
    return _logps(logits, input_ids, prompt_length, completion_mask, temperature, shift=2)


def logps_tokens_shifted_with_logits(logits, input_ids, prompt_length, completion_mask, temperature=1.0):
    return _logps(logits, input_ids, prompt_length, completion_mask, temperature, tokens_shift=1)


def logps_entropy_sign_flipped(logits, input_ids, prompt_length, completion_mask, temperature=1.0):
    return _logps(logits, input_ids, prompt_length, completion_mask, temperature, entropy_sign=-1.0)


# ----------------------------------------------------------------------------- lesson 06 and 06b
def two_sided_max_when_negative(ratio, advantages, epsilon=0.2, epsilon_high=None, delta=None):
    high = epsilon if epsilon_high is None else epsilon_high
    adv = advantages.unsqueeze(1)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + high)
    return torch.where(adv > 0, torch.min(capped * adv, clipped * adv), torch.max(capped * adv, clipped * adv))


def two_sided_epsilons_swapped(ratio, advantages, epsilon=0.2, epsilon_high=None, delta=None):
    high = epsilon if epsilon_high is None else epsilon_high
    adv = advantages.unsqueeze(1)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    return torch.min(capped * adv, torch.clamp(ratio, 1 - high, 1 + epsilon) * adv)


def cispo_with_ppo_floor(logps, old_logps, advantages, epsilon_max=5.0):
    weight = torch.clamp(torch.exp(logps - old_logps), min=0.8, max=epsilon_max).detach()
    return -weight * advantages.unsqueeze(1) * logps


# ----------------------------------------------------------------------------- lesson 07
def micro_batches_flag_before_counting(per_device, accumulation, generations, steps_per_generation=None, cycles=2):
    """Right prompts, but the optimizer flag is tested before the micro-step is counted."""
    steps = steps_per_generation or accumulation
    if (per_device * steps) % generations:
        raise ValueError("a group would be split")
    rows, prompt, counted = [], 0, 0
    for _ in range(cycles):
        order = [prompt + i // generations for i in range(per_device * steps)]
        prompt += per_device * steps // generations
        for k in range(steps):
            flag = counted % accumulation == 0  # tested before counting: one micro-step early
            counted += 1
            rows.append((order[k * per_device:(k + 1) * per_device], flag))
    return rows


def batch_arithmetic_default_off_by_one(per_device_train_batch_size, gradient_accumulation_steps, num_generations,
                                        num_processes=1, steps_per_generation=None, generation_batch_size=None):
    """steps_per_generation defaults to gradient_accumulation_steps - 1: legal settings are refused."""
    if steps_per_generation is not None and generation_batch_size is not None:
        raise ValueError("set one of them")
    if generation_batch_size is not None:
        steps_per_generation = generation_batch_size // (per_device_train_batch_size * num_processes)
    steps = steps_per_generation or gradient_accumulation_steps - 1
    batch = per_device_train_batch_size * steps * num_processes
    if num_generations < 2 or batch == 0 or batch % num_generations:
        raise ValueError("num_generations must divide the generation batch")
    return {"steps_per_generation": steps, "generation_batch_size": batch,
            "effective_batch_size": per_device_train_batch_size * gradient_accumulation_steps * num_processes,
            "optimizer_steps_per_generation": steps / gradient_accumulation_steps,
            "unique_prompts_per_generation": batch // num_generations}


# ----------------------------------------------------------------------------- lesson 08
def rloo_min_when_negative(logps, old_logps, advantages, mask, cliprange=0.2):
    ratio = torch.where(mask != 0, logps - old_logps, torch.zeros_like(logps)).sum(1).exp()
    plain, clipped = -advantages * ratio, -advantages * ratio.clamp(1 - cliprange, 1 + cliprange)
    return torch.where(advantages > 0, torch.max(plain, clipped), torch.min(plain, clipped)).mean()


CASES = [
    (ex03.check_clipped_surrogate, surrogate_product_clamped, "clip the RATIO"),
    (ex03.check_clipped_surrogate, surrogate_max_when_negative, "max for negative advantages"),
    (ex05.check_group_advantages, advantages_epsilon_1e8, "1e-8"),
    (ex05.check_group_advantages, advantages_epsilon_inside_sqrt, "inside the square root"),
    (ex05.check_grpo_clipped_loss, loss_masked_sum_over_T, "divided each completion's masked sum by T"),
    (ex05.check_grpo_clipped_loss, loss_min_of_ratios, "min of the RATIOS, is the same"),
    (ex05.check_grpo_clipped_loss, loss_ratio_inverted, "the ratio is inverted"),
    (ex05.check_grpo_clipped_loss, loss_max_when_negative, "max for negative advantages"),
    (ex05.check_completion_logps_and_entropy, logps_shifted_by_two, "shifted by two"),
    (ex05.check_completion_logps_and_entropy, logps_tokens_shifted_with_logits, "shifted the tokens together"),
    (ex05.check_completion_logps_and_entropy, logps_entropy_sign_flipped, "sign is flipped"),
    (ex06.check_two_sided_clip_objective, two_sided_max_when_negative, "max for negative advantages"),
    (ex06.check_two_sided_clip_objective, two_sided_epsilons_swapped, "swapped epsilon and epsilon_high"),
    (ex06b.check_cispo_per_token_loss, cispo_with_ppo_floor, "1 - epsilon = 0.8"),
    (ex07.check_micro_batches, micro_batches_flag_before_counting, "one micro-step early"),
    (ex07.check_batch_arithmetic, batch_arithmetic_default_off_by_one, "is a legal configuration"),
    (ex08.check_rloo_sequence_clipped_loss, rloo_min_when_negative, "min of the two losses for negative"),
]


@pytest.mark.parametrize("check, wrong, words", CASES, ids=[case[1].__name__ for case in CASES])
def test_planted_mistake_gets_its_diagnosis(check, wrong, words):
    hint = _hint_of(check, wrong)
    assert words in hint, f"{wrong.__name__}: the hint does not name the mistake:\n{hint}"
    assert "expected\n" not in hint, f"{wrong.__name__}: a bare mismatch instead of a diagnosis:\n{hint}"


# ----------------------------------------------------------------------------- lesson 05: the loop
def _loop(model, sample_batch, reward_fn, steps, num_generations=8, learning_rate=3e-5, epsilon=0.2,
          num_iterations=1, *, mistake=None):
    """Lesson 05's loop written out, with one learner's mistake."""
    from course_lib.policy import completion_forward

    def new_optimizer():
        return torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)

    optimizer, log, k = new_optimizer(), [], 0
    while len(log) < steps:
        batch = sample_batch(k)
        k += 1
        inputs = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
        rewards = torch.tensor(reward_fn(batch.texts, batch.answers), dtype=torch.float32)
        grouped = rewards.view(-1, num_generations)
        centred = grouped - grouped.mean(1, keepdim=True)
        advantages = (centred if mistake == "no_std" else centred / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
        old = None
        if num_iterations > 1 and mistake != "old_each_pass":
            with torch.no_grad():
                old = completion_forward(model, *inputs)[0]
        for _ in range(min(num_iterations, steps - len(log))):
            if mistake == "optimizer_each_step":
                optimizer = new_optimizer()
            logps = completion_forward(model, *inputs)[0]
            ratio = torch.exp(logps - (logps.detach() if old is None else old))
            adv = advantages.unsqueeze(1)
            per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
            mask = batch.completion_mask.float()
            if mistake == "token_mean":
                loss = (per_token * mask).sum() / mask.sum()
            else:
                loss = ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()
            if mistake == "sign":
                loss = -loss
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                       float("inf") if mistake == "no_clip" else 1.0)
            optimizer.step()
            log.append({"step": len(log) + 1, "reward": rewards.mean().item(), "loss": loss.item(),
                        "grad_norm": grad_norm.item(), "clip_fraction": 0.0})
    return log


def _loop_with(mistake):
    fn = functools.partial(_loop, mistake=mistake)
    fn.__name__ = f"loop_{mistake}"
    return fn


def loop_same_batch_every_step(model, sample_batch, reward_fn, steps, num_generations=8, learning_rate=3e-5,
                               epsilon=0.2, num_iterations=1):
    return _loop(model, lambda k: sample_batch(0), reward_fn, steps, num_generations, learning_rate, epsilon,
                 num_iterations)


LOOP_CASES = [
    (_loop_with("token_mean"), "all the valid tokens of the batch at once"),
    (_loop_with("no_std"), "not divided by the group's std"),
    (_loop_with("sign"), "the update goes the wrong way"),
    (_loop_with("optimizer_each_step"), "AdamW is created again at every step"),
    (_loop_with("no_clip"), "the gradient norm is not clipped"),
    (_loop_with("old_each_pass"), "recomputed before each pass"),
    (loop_same_batch_every_step, "sample_batch was called with [0, 0]"),
]


@pytest.mark.slow
@pytest.mark.parametrize("wrong, words", LOOP_CASES, ids=[case[0].__name__ for case in LOOP_CASES])
def test_each_loop_mistake_gets_its_own_diagnosis(wrong, words):
    hint = _hint_of(ex05.check_grpo_loop, wrong)
    assert words in hint, f"{wrong.__name__}: the hint does not name the mistake:\n{hint}"
