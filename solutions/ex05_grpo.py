"""Lesson 05 exercises: GRPO's group-relative advantages, its clipped loss, and the per-token
log-probs (and entropies) that the loss is built from."""

import torch


def group_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """GRPO advantages: z-score each reward within its prompt's group.

    `rewards` has shape `(B,)` with `B = num_prompts * num_generations`, prompt-major:
    the `num_generations` completions of a prompt are contiguous. For completion `i` of
    group `g`:

        A_i = (r_i - mean(r_g)) / (std(r_g) + 1e-4)

    with the sample standard deviation (Bessel-corrected, divide by G - 1), as TRL does.
    The `1e-4` keeps a group whose rewards are all equal at advantage 0 instead of 0/0.

    Example: `group_advantages(torch.tensor([1., 0., 0., 1., 1., 1.]), 3)` gives about
    `[1.1546, -0.5773, -0.5773, 0., 0., 0.]`.

    Returns:
        `(B,)` advantages, same dtype as `rewards`.
    """
    # BEGIN SOLUTION
    # HINT: rewards.view(-1, num_generations) puts one prompt per row.
    grouped = rewards.view(-1, num_generations)  # (P, G)
    mean = grouped.mean(dim=1, keepdim=True)  # (P, 1)
    std = grouped.std(dim=1, keepdim=True)  # (P, 1), Bessel-corrected by default
    return ((grouped - mean) / (std + 1e-4)).view(-1)
    # END SOLUTION


def grpo_clipped_loss(logps: torch.Tensor, old_logps: torch.Tensor | None, advantages: torch.Tensor,
                      mask: torch.Tensor, epsilon: float = 0.2) -> torch.Tensor:
    """GRPO's clipped surrogate loss, averaged per sequence then over the batch.

    Per token t of completion i, with ratio `r = exp(logps - old_logps)`:

        loss_it = -min(r * A_i, clip(r, 1 - epsilon, 1 + epsilon) * A_i)

    then the mean over the valid tokens of each completion (`mask == 1`), then the mean
    over the B completions (TRL's `loss_type="grpo"`).

    Args:
        logps: `(B, T)` log-probs of the completion tokens under the current policy
            (the loss must be differentiable with respect to them).
        old_logps: `(B, T)` log-probs under the policy that sampled the batch. They are
            constants of the objective: no gradient may flow through them. `None` means
            on-policy, i.e. the old log-probs equal the current ones (as constants).
        advantages: `(B,)` one advantage per completion.
        mask: `(B, T)` 1 for completion tokens, 0 for padding.
        epsilon: clipping range.

    Example: on-policy (`old_logps=None`) the ratio is 1 everywhere, so the loss is
    `-mean(advantages)` and its gradient is that of `-mean_i A_i * mean_t logps_it`.

    Returns:
        A scalar tensor.
    """
    # BEGIN SOLUTION
    # HINT: the old log-probs are constants: detach them (and use logps.detach() when None).
    old_logps = logps.detach() if old_logps is None else old_logps.detach()
    ratio = torch.exp(logps - old_logps)  # (B, T)
    adv = advantages.unsqueeze(1)  # (B, 1), broadcast over tokens
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    mask = mask.to(per_token.dtype)
    per_sequence = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B,)
    return per_sequence.mean()
    # END SOLUTION


def completion_logps_and_entropy(logits: torch.Tensor, input_ids: torch.Tensor, prompt_length: int,
                                 completion_mask: torch.Tensor, temperature: float = 1.0
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of the completion tokens, and the entropy of each next-token distribution.

    `input_ids` is the prompt (its first `prompt_length` columns) followed by the
    completion (the remaining `T` columns); `logits` is the model's output on it. The
    logits at position `i` predict the token at position `i + 1`, so completion token `j`
    (column `prompt_length + j`) is scored by the logits at column `prompt_length + j - 1`:
    **shift** by one. The sampler divided the logits by `temperature`, so the loss must
    too, before the softmax. Then, per completion token:

        logps[b, j]   = log_softmax(logits[b, prompt_length + j - 1] / temperature)[input_ids[b, prompt_length + j]]
        entropy[b, j] = -sum_v p_v log p_v   of that same tempered distribution

    and both are 0 where `completion_mask` is 0 (padding after the end of a completion).

    Args:
        logits: `(B, L, V)` with `L = prompt_length + T`.
        input_ids: `(B, L)` prompt then completion ids.
        prompt_length: `P`, the width of the (left-padded) prompt part.
        completion_mask: `(B, T)` 1 for completion tokens, 0 for padding.
        temperature: the sampling temperature (> 0).

    Example: with `V = 2`, uniform logits and temperature 1, every valid token has
    log-prob `log(1/2) = -0.6931` and entropy `log 2 = 0.6931`.

    Returns:
        `(logps, entropy)`, both `(B, T)`.
    """
    # BEGIN SOLUTION
    # HINT: logits[:, P - 1 : -1] are the ones that predict the completion tokens input_ids[:, P:].
    scores = logits[:, prompt_length - 1:-1, :] / temperature  # (B, T, V): position i predicts token i + 1
    log_probs = torch.log_softmax(scores.float(), dim=-1)  # (B, T, V)
    tokens = input_ids[:, prompt_length:]  # (B, T)
    logps = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
    entropy = -(log_probs.exp() * log_probs).sum(-1)  # (B, T)
    mask = completion_mask.to(logps.dtype)
    return logps * mask, entropy * mask
    # END SOLUTION


def grpo_loop(model, tokenizer, dataset, reward_fn, steps: int, prompts_per_step: int = 4, num_generations: int = 8,
              learning_rate: float = 3e-5, epsilon: float = 0.2, max_tokens: int = 6, seed: int = 0) -> list[dict]:
    """GRPO from scratch: on-policy, `beta = 0`, `loss_type="grpo"`; returns one log row per step.

    Each step, in order:

    1. **generate**: take `prompts_per_step` dataset rows with
       `PromptSampler(len(dataset), seed).take(prompts_per_step)` (one sampler for the whole
       run), repeat each row `num_generations` times (prompt-major), and sample one
       completion per repeated prompt with `HFEngine(model, tokenizer).generate(prompts, n=1,
       sampling=SamplingConfig(temperature=1.0, max_tokens=max_tokens, seed=...))`, with
       `seed = seed * 2**40 + step * B` (B = completions per step, step counted from 0) and
       the model in eval mode while it samples (train mode again after);
    2. **score**: `reward_fn(completion_texts, answers)` -> one float per completion
       (`answers` = the rows' `"answer"` column);
    3. **advantages**: Exercise 1, the z-score within each prompt's group;
    4. **log-probs**: `course_lib.policy.completion_forward(model, prompt_ids, prompt_mask,
       completion_ids, completion_mask)` -> `(B, T)` token log-probs (Exercise 3 inside);
    5. **loss**: Exercise 2 on-policy (the old log-probs are `logps.detach()`);
    6. **step**: `torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)`
       created once before the loop (after `torch.manual_seed(seed)`), zero the gradients,
       backward, clip the gradient norm at 1.0 (`torch.nn.utils.clip_grad_norm_`, TRL's
       `max_grad_norm`), step.

    These are the choices `course_lib.trainer.Trainer` makes with the same settings, so the
    two must sample the same completions and end with the same weights.

    Returns:
        `[{"step": 1, "reward": mean reward of the step, "loss": loss value}, ...]`.
    """
    # BEGIN SOLUTION
    # HINT: the sampler is created once; the sampling seed changes with the step; AdamW once, outside the loop.
    from course_lib.policy import completion_forward
    from course_lib.rollout import HFEngine, SamplingConfig
    from course_lib.run.batches import PromptSampler

    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    engine, sampler, log = HFEngine(model, tokenizer), PromptSampler(len(dataset), seed), []
    for step in range(steps):
        rows = [row for row in sampler.take(prompts_per_step) for _ in range(num_generations)]  # prompt-major
        model.eval()  # no dropout while sampling
        batch = engine.generate([dataset[r]["prompt"] for r in rows], n=1, sampling=SamplingConfig(
            temperature=1.0, max_tokens=max_tokens, seed=seed * 2**40 + step * len(rows)))
        model.train()
        rewards = torch.tensor(reward_fn(batch.texts, [dataset[r]["answer"] for r in rows]), dtype=torch.float32)
        advantages = group_advantages(rewards, num_generations)  # (B,)
        logps, _, _ = completion_forward(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                         batch.completion_mask)  # (B, T)
        loss = grpo_clipped_loss(logps, None, advantages, batch.completion_mask, epsilon)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        log.append({"step": step + 1, "reward": rewards.mean().item(), "loss": loss.item()})
    return log
    # END SOLUTION
