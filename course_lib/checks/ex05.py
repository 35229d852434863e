"""Checks for lesson 05 (GRPO): group advantages, the clipped loss with loss_type="grpo", and the
per-token log-probs and entropies.

Expected values are hand-worked numbers and `course_lib` (advantages.group_advantages,
losses.policy_loss); each typical mistake is reproduced to name it in the hint.
"""

import math

import torch

from ..algos.grpo import group_advantages as library_group_advantages
from ..algos.grpo import policy_loss
from ..feedback import Hint, assert_close


def _tensor(values, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _advantage_mistakes(rewards: torch.Tensor, num_generations: int) -> dict[str, torch.Tensor]:
    grouped = rewards.view(-1, num_generations)
    mean, std = grouped.mean(1, keepdim=True), grouped.std(1, keepdim=True)
    population_std = grouped.std(1, unbiased=False, keepdim=True)
    by_generation = rewards.view(num_generations, -1)  # the generation-major misreading
    return {
        "normalized over the whole batch; the mean and the std are taken within each prompt's group "
        "(rewards.view(-1, num_generations)).": (rewards - rewards.mean()) / (rewards.std() + 1e-4),
        "the mean is per group but the std is the whole batch's (that is scale_rewards='batch'); GRPO "
        "divides by the group's own std.": ((grouped - mean) / (rewards.std() + 1e-4)).view(-1),
        "used the population std (divide by G); TRL and the course use the sample std, divided by "
        "G - 1 (Bessel's correction, torch.std's default).": ((grouped - mean) / (population_std + 1e-4)).view(-1),
        "forgot the + 1e-4 in the denominator: a group whose rewards are all equal gives 0 / 0 = NaN.":
            ((grouped - mean) / std).view(-1),
        "did not subtract the group mean.": (grouped / (std + 1e-4)).view(-1),
        "subtracted the group mean but did not divide by the group's std: that is scale_rewards='none' "
        "(Dr. GRPO, lesson 06), a valid choice but not GRPO's z-score; divide by std + 1e-4.":
            (grouped - mean).view(-1),
        "grouped the rewards generation-major (rewards.view(num_generations, -1)); the layout is "
        "prompt-major: the G completions of a prompt are contiguous, use rewards.view(-1, G).":
            ((by_generation - by_generation.mean(0)) / (by_generation.std(0) + 1e-4)).view(-1),
        "the epsilon is 1e-8; TRL and the course add 1e-4 to the std. The values differ from the 4th decimal "
        "(1.1547 instead of 1.1545), and far more when a group's rewards are nearly equal.":
            ((grouped - mean) / (std + 1e-8)).view(-1),
        "put the epsilon inside the square root, sqrt(var + 1e-4); GRPO adds it to the std: "
        "(r - mean) / (std + 1e-4).": ((grouped - mean) / torch.sqrt(grouped.var(1, keepdim=True) + 1e-4)).view(-1),
    }


def check_group_advantages(fn) -> None:
    # Hand-worked: group [1, 0, 0] has mean 1/3 and sample std sqrt(1/3) = 0.57735.
    got = fn(_tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), 3)
    if isinstance(got, torch.Tensor) and got.dim() == 2:
        raise Hint("return one advantage per completion, shape (B,): flatten the (P, G) result with .view(-1).")
    expected = _tensor([2 / 3 / (3 ** -0.5 + 1e-4), -1 / 3 / (3 ** -0.5 + 1e-4), -1 / 3 / (3 ** -0.5 + 1e-4),
                        0.0, 0.0, 0.0])
    rewards = _tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    assert_close(got, expected, name="group_advantages([1,0,0, 1,1,1], 3)", atol=1e-4,
                 hints=_advantage_mistakes(rewards, 3))

    # A group with a tiny spread shows the 1e-4; a zero-std group must give zeros.
    cases = [
        (_tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0]), 4),
        (_tensor([0.0, 1e-4, 0.0, 1e-4, 3.0, 3.0, 3.0, 3.0]), 4),
        (torch.randn(24, generator=torch.Generator().manual_seed(5)) * 2 + 1, 6),
        (torch.randint(0, 2, (16,), generator=torch.Generator().manual_seed(7)).float(), 2),
    ]
    for rewards, num_generations in cases:
        got = fn(rewards.clone(), num_generations)
        expected = library_group_advantages(rewards, num_generations, scale_rewards="group")
        assert_close(got, expected, name=f"group_advantages(rewards={rewards.tolist()}, {num_generations})",
                     hints=_advantage_mistakes(rewards, num_generations))
    rewards = _tensor([2.0, 0.0, 1.0, 1.0])
    fn(rewards, 2)
    if rewards.tolist() != [2.0, 0.0, 1.0, 1.0]:
        raise Hint("your function changed the rewards tensor in place; compute new tensors instead.")


def _loss_case(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    batch, tokens = 5, 6
    logps = -torch.rand(batch, tokens, generator=generator, dtype=torch.float64) * 3
    # Log-ratios up to +-0.6 put many tokens outside [0.8, 1.2], so the clip matters.
    old_logps = logps + (torch.rand(batch, tokens, generator=generator, dtype=torch.float64) - 0.5) * 1.2
    advantages = torch.tensor([1.5, -1.0, 0.5, -0.3, 0.0], dtype=torch.float64)
    lengths = torch.tensor([6, 2, 4, 1, 3])
    mask = (torch.arange(tokens).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    return logps, old_logps, advantages, mask


def _loss_mistakes(logps, old_logps, advantages, mask, epsilon) -> dict[str, torch.Tensor]:
    def library(**overrides):
        settings = dict(loss_type="grpo", epsilon=epsilon)
        settings.update(overrides)
        return policy_loss(logps, old_logps, advantages, mask, **settings).loss

    ratio = torch.exp(logps - old_logps)
    adv = advantages.unsqueeze(1)
    unclipped = -(ratio * adv)
    clipped_only = -(torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    optimistic = -torch.max(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    product_clamped = -torch.min(ratio * adv, torch.clamp(ratio * adv, 1 - epsilon, 1 + epsilon))
    log_ratio = logps - old_logps
    no_exp = -torch.min(log_ratio * adv, torch.clamp(log_ratio, 1 - epsilon, 1 + epsilon) * adv)
    clamp = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    min_of_ratios = -(torch.min(ratio, clamp) * adv)
    inverse = torch.exp(old_logps - logps)
    inverted = -torch.min(inverse * adv, torch.clamp(inverse, 1 - epsilon, 1 + epsilon) * adv)
    seq_mean = lambda x: ((x * mask).sum(1) / mask.sum(1)).mean()  # noqa: E731
    return {
        "took the max for negative advantages (min(r, clip(r)) * A, the min of the RATIOS, is the same "
        "mistake): the pessimistic term is the min of the two PRODUCTS, min(r * A, clip(r) * A), for both "
        "signs. For A < 0 it keeps r * A when r > 1 + eps (a bad token that became likelier is fully "
        "penalised) and clips when r < 1 - eps.": seq_mean(min_of_ratios),
        "the ratio is inverted: r = exp(logps - old_logps) = pi / pi_old (new over old), not old over new.":
            seq_mean(inverted),
        "divided each completion's masked sum by T, the padded width; divide by its own number of valid "
        "tokens, mask.sum(1) ((x * mask).mean(1) is this mistake).": ((per_token * mask).sum(1) / mask.shape[1]).mean(),
        "took the max of the two terms: that is the optimistic bound. PPO and GRPO keep the MIN of r * A and "
        "clip(r) * A, the pessimistic one, so moving the ratio past the clip never pays.": seq_mean(optimistic),
        "the ratio is the log-ratio itself: exponentiate it, ratio = exp(logps - old_logps) = pi / pi_old "
        "(it is 1, not 0, when the policy has not moved).": seq_mean(no_exp),
        "averaged over all valid tokens of the batch at once (that is loss_type='bnpo'); GRPO first "
        "averages each sequence over its own tokens, then averages the sequences.": library(loss_type="bnpo"),
        "the sign is flipped: return the *loss*, minus the clipped objective.": -library(),
        "no clipping: take min(r * A, clip(r, 1 - eps, 1 + eps) * A).": seq_mean(unclipped),
        "clamped the product r * A to [1 - eps, 1 + eps]; clip the RATIO, then multiply: "
        "clip(r, 1 - eps, 1 + eps) * A (the range is about r, whatever the size or sign of A).":
            seq_mean(product_clamped),
        "used only the clipped term; the min with the unclipped term r * A is what makes the bound "
        "pessimistic.": seq_mean(clipped_only),
        "ignored the mask: padded tokens must not count (divide by each row's number of valid tokens).":
            per_token.mean(),
        "summed the tokens of each sequence instead of averaging them.": ((per_token * mask).sum(1)).mean(),
    }


def check_grpo_clipped_loss(fn) -> None:
    # Hand-worked: ratios 1.5 and 0.5 with A = +1: -min(1.5, 1.2) = -1.2 and -min(0.5, 0.8) = -0.5.
    logps = torch.log(torch.tensor([[1.5, 0.5], [1.5, 0.5]], dtype=torch.float64))
    zeros = torch.zeros_like(logps)
    ones = torch.ones_like(logps)
    hand_advantages = torch.tensor([1.0, -0.5], dtype=torch.float64)
    got = fn(logps, zeros, hand_advantages, ones, 0.2)
    if not isinstance(got, torch.Tensor) or got.dim() != 0:
        raise Hint(f"return a scalar tensor (0-dimensional), got {got!r}.")
    # A = -0.5: -min(-0.75, -0.6) = 0.75 and -min(-0.25, -0.4) = 0.4; the sequences average to -0.1375.
    # (With A = -1 the optimistic max would give exactly minus the right loss and read as a sign flip.)
    assert_close(got, ((-1.2 - 0.5) / 2 + (0.75 + 0.4) / 2) / 2,
                 name="hand-worked loss (ratios 1.5, 0.5; A = +1, -0.5)",
                 hints=_loss_mistakes(logps, zeros, hand_advantages, ones, 0.2))

    for seed, epsilon in ((0, 0.2), (1, 0.1)):
        logps, old_logps, advantages, mask = _loss_case(seed)
        got = fn(logps, old_logps, advantages, mask, epsilon)
        expected = policy_loss(logps, old_logps, advantages, mask, loss_type="grpo", epsilon=epsilon).loss
        assert_close(got, expected, name=f"loss on a padded batch (epsilon={epsilon})",
                     hints=_loss_mistakes(logps, old_logps, advantages, mask, epsilon))

    # Gradients. Off-policy: clipped tokens get none; the old log-probs must be constants.
    logps, old_logps, advantages, mask = _loss_case(2)
    cases = (
        ("old_logps given (computed without gradient)", lambda current: old_logps, old_logps),
        ("old_logps=None (on-policy)", lambda current: None, None),
        # Same values as old_logps, but built from `current`, so they sit in its graph.
        ("old_logps that still carry a graph", lambda current: current + (old_logps - logps), old_logps),
    )
    for label, make_old, library_old in cases:
        reference = logps.clone().requires_grad_(True)
        policy_loss(reference, library_old, advantages, mask, loss_type="grpo").loss.backward()
        current = logps.clone().requires_grad_(True)
        loss = fn(current, make_old(current), advantages, mask, 0.2)
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            raise Hint(f"{label}: the loss has no gradient; compute it from logps with torch operations "
                       "(no .item(), no .detach() of logps).")
        loss.backward()
        got = current.grad if current.grad is not None else torch.zeros_like(current)
        if torch.allclose(got, torch.zeros_like(got)):
            if library_old is None:
                raise Hint("old_logps=None gives a zero gradient. Did you forget to detach the old log-probs? "
                           "On-policy they are logps.detach(): the ratio is 1 but its gradient is not 0.")
            raise Hint(f"{label}: the gradient is zero. Did you forget to detach the old log-probs? They are "
                       "constants of the objective: use old_logps.detach().")
        assert_close(got, reference.grad, name=f"gradient of the loss w.r.t. logps ({label})", atol=1e-6)


# ----------------------------------------------------------------------------- per-token log-probs
def _loop_logps_entropy(logits, input_ids, prompt_length, mask, temperature):
    """Token by token, written out: the reference for the check."""
    batch, width = mask.shape
    logps, entropy = torch.zeros(batch, width, dtype=torch.float64), torch.zeros(batch, width, dtype=torch.float64)
    for b in range(batch):
        for j in range(width):
            if mask[b, j] == 0:
                continue
            row = logits[b, prompt_length + j - 1].double() / temperature
            log_p = row - torch.logsumexp(row, 0)
            logps[b, j] = log_p[input_ids[b, prompt_length + j]]
            entropy[b, j] = -(log_p.exp() * log_p).sum()
    return logps, entropy


def _logps_case(seed: int):
    generator = torch.Generator().manual_seed(seed)
    batch, prompt_length, width, vocab = 3, 4, 5, 7
    logits = torch.randn(batch, prompt_length + width, vocab, generator=generator, dtype=torch.float64) * 2
    input_ids = torch.randint(0, vocab, (batch, prompt_length + width), generator=generator)
    mask = (torch.arange(width).unsqueeze(0) < torch.tensor([[5], [2], [4]])).long()
    return logits, input_ids, prompt_length, mask


def _logps_mistakes(logits, input_ids, prompt_length, mask, temperature) -> dict[str, tuple]:
    def tempered(shift=1, temp=temperature, after=False):
        scores = logits[:, prompt_length - shift: logits.shape[1] - shift, :].double()
        log_probs = torch.log_softmax(scores if after else scores / temp, dim=-1)
        if after:
            log_probs = log_probs / temp
        tokens = input_ids[:, prompt_length:]
        return log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) * mask, log_probs

    no_shift, _ = tempered(shift=0)
    shift_two, _ = tempered(shift=2)
    no_temp, _ = tempered(temp=1.0)
    after, _ = tempered(after=True)
    right, log_probs = tempered()
    unmasked = log_probs.gather(-1, input_ids[:, prompt_length:].unsqueeze(-1)).squeeze(-1)
    both_shifted = log_probs.gather(-1, input_ids[:, prompt_length - 1:-1].unsqueeze(-1)).squeeze(-1) * mask
    return {
        "no shift: the logits at position i predict the token at i + 1, so the completion tokens are scored by "
        "logits[:, P - 1 : -1], not logits[:, P:].": no_shift,
        "shifted by two: the logits at position i predict the token at i + 1 only, so the completion tokens "
        "input_ids[:, P:] are scored by logits[:, P - 1 : -1].": shift_two,
        "shifted the tokens together with the logits: the logits are shifted (logits[:, P - 1 : -1]) but the "
        "tokens are not, they are the completion itself, input_ids[:, P:].": both_shifted,
        "the temperature is missing: divide the logits by it before the log-softmax, as the sampler did.": no_temp,
        "divided the log-probs by the temperature; divide the LOGITS, then take the log-softmax.": after,
        "the padded positions are not 0: multiply by completion_mask.": unmasked,
    }


def check_completion_logps_and_entropy(fn) -> None:
    # Hand-worked: uniform logits over V = 2 -> log-prob log(1/2), entropy log 2 on valid tokens.
    logits = torch.zeros(1, 4, 2, dtype=torch.float64)
    got = fn(logits, torch.tensor([[0, 1, 0, 1]]), 2, torch.tensor([[1, 0]]), 1.0)
    if not isinstance(got, tuple) or len(got) != 2:
        raise Hint("return a pair (logps, entropy), each (B, T).")
    logps, entropy = got
    if logps.shape != (1, 2) or entropy.shape != (1, 2):
        raise Hint(f"both outputs are (B, T) = (1, 2), one value per completion token; got {tuple(logps.shape)} "
                   f"and {tuple(entropy.shape)}.")
    unmasked = "the padded positions are not 0: multiply by completion_mask."
    assert_close(logps, [[math.log(0.5), 0.0]], name="log-probs under uniform logits (second token padded)",
                 hints={unmasked: [[math.log(0.5), math.log(0.5)]]})
    flipped = "the entropy's sign is flipped: H = -sum_v p_v log p_v is >= 0 (log p_v <= 0)."
    assert_close(entropy, [[math.log(2.0), 0.0]], name="entropy of a uniform 2-way choice (second token padded)",
                 hints={unmasked: [[math.log(2.0), math.log(2.0)]], flipped: [[-math.log(2.0), 0.0]]})

    for seed, temperature in ((0, 1.0), (1, 0.7), (2, 1.6)):
        logits, input_ids, prompt_length, mask = _logps_case(seed)
        logps, entropy = fn(logits, input_ids, prompt_length, mask, temperature)
        expected_logps, expected_entropy = _loop_logps_entropy(logits, input_ids, prompt_length, mask, temperature)
        mistakes = _logps_mistakes(logits, input_ids, prompt_length, mask, temperature)
        assert_close(logps, expected_logps, name=f"log-probs (temperature {temperature})",
                     hints={message: wrong for message, wrong in mistakes.items()})
        entropy_hints = {flipped: -expected_entropy}
        if temperature != 1.0:
            entropy_hints["the entropy is of the tempered distribution: divide the logits by the temperature "
                          "first."] = _loop_logps_entropy(logits, input_ids, prompt_length, mask, 1.0)[1]
        assert_close(entropy, expected_entropy, name=f"entropies (temperature {temperature})", hints=entropy_hints)

    logits, input_ids, prompt_length, mask = _logps_case(3)
    current = logits.clone().requires_grad_(True)
    logps, _ = fn(current, input_ids, prompt_length, mask, 1.0)
    if not logps.requires_grad:
        raise Hint("the log-probs have no gradient; keep them in the graph (no .detach(), no torch.no_grad()).")


from .ex05_loop import check_grpo_loop  # noqa: E402,F401 (the loop's check, in its own module)
