# This file is generated from solutions/ex05_grpo.py by `python -m course_lib make-stubs`.
# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.
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
    `[1.1545, -0.5773, -0.5773, 0., 0., 0.]`.

    Returns:
        `(B,)` advantages, same dtype as `rewards`.
    """
    # HINT: rewards.view(-1, num_generations) puts one prompt per row.
    raise NotImplementedError("Exercise: replace this line with your code.")


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
    # HINT: the old log-probs are constants: detach them (and use logps.detach() when None).
    raise NotImplementedError("Exercise: replace this line with your code.")


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
    # HINT: logits[:, P - 1 : -1] are the ones that predict the completion tokens input_ids[:, P:].
    raise NotImplementedError("Exercise: replace this line with your code.")


def grpo_loop(model, sample_batch, reward_fn, steps: int, num_generations: int = 8, learning_rate: float = 3e-5,
              epsilon: float = 0.2, num_iterations: int = 1) -> list[dict]:
    """GRPO from scratch: `beta = 0`, `loss_type="grpo"`; returns one log row per optimizer step.

    `sample_batch(k)` (ready-made, `course_lib.group_batches.group_batch_sampler`) returns
    the k-th generation batch, k = 0, 1, 2, ...: `B = prompts x num_generations`
    completions, prompt-major, with `.prompt_ids`, `.prompt_mask`, `.completion_ids`,
    `.completion_mask`, `.texts` and `.answers`. It samples from the model's current weights.

    For each generation batch k, in order:

    1. **sample**: `batch = sample_batch(k)`;
    2. **score**: `reward_fn(batch.texts, batch.answers)` -> one float per completion;
    3. **advantages**: Exercise 1, the z-score within each prompt's group;
    4. **old log-probs**: only when `num_iterations > 1`, the log-probs of the policy that
       sampled the batch, computed once, without gradient (`torch.no_grad()`), before any update
       on it; with `num_iterations = 1` they are `None` (on-policy, Exercise 2 detaches);
    5. then `num_iterations` times (each an optimizer step on the same batch):
       - **log-probs**: `course_lib.policy.completion_forward(model, prompt_ids, prompt_mask,
         completion_ids, completion_mask)` -> `(B, T)` token log-probs (Exercise 3 inside);
       - **loss**: Exercise 2 with the old log-probs of step 4;
       - **step**: zero the gradients, backward, clip the gradient norm at 1.0
         (`torch.nn.utils.clip_grad_norm_`, TRL's `max_grad_norm`; it returns the norm
         *before* clipping), `optimizer.step()`, with one
         `torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)` created
         before the loop;

    until `steps` optimizer steps are done. On the second pass over a batch the policy has
    moved, so the ratio differs from 1 and the clip can act.

    These are the choices `course_lib.trainer.Trainer` makes with the same settings, so the
    two must sample the same completions and end with the same weights.

    Returns:
        `[{"step": 1, "reward": mean reward of the batch, "loss": loss value, "grad_norm": norm
        before clipping, "clip_fraction": share of the valid tokens whose clip is active}, ...]`;
        a token's clip is active when `r < 1 - epsilon` and `A < 0`, or `r > 1 + epsilon` and
        `A > 0` (TRL's `clip_ratio/region_mean`; 0 on-policy).
    """
    # HINT: AdamW once, outside the loop; old log-probs once per batch, before its first update.
    raise NotImplementedError("Exercise: replace this line with your code.")
