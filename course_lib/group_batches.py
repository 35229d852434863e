"""Ready-made sampling for a hand-written GRPO loop: `sample_batch(k)` gives the k-th group batch.

Lesson 05's loop exercise is about advantages, log-probs, loss and the optimizer step, not
about how `Trainer` picks prompts and seeds. :func:`group_batch_sampler` hides exactly that
plumbing and reproduces `Trainer`'s choices (so a correct hand-written loop ends with the
same weights as `Trainer`):

- the prompts come from one `PromptSampler(len(dataset), seed)` for the whole run (a fresh
  seeded permutation of the dataset each epoch, as TRL's sampler);
- each prompt is repeated `num_generations` times, prompt-major (the G completions of a
  prompt are contiguous rows);
- the k-th batch (k counted from 0) is sampled with seed `seed * 2**40 + k * B`,
  `B = prompts_per_batch * num_generations`, from the model's *current* weights, with the
  model in eval mode while it samples.

Call `sample_batch(0)`, `sample_batch(1)`, ... once each, in order: the prompt sampler
advances at each call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .rollout import HFEngine, SamplingConfig
from .run.batches import PromptSampler


@dataclass
class GroupBatch:
    """One generation batch: `B = prompts x G` completions, prompt-major.

    Attributes:
        prompt_ids: `(B, P)` prompt tokens, left-padded.
        prompt_mask: `(B, P)` 1 on real prompt tokens.
        completion_ids: `(B, T)` sampled tokens, right-padded.
        completion_mask: `(B, T)` 1 up to and including the end-of-turn token, 0 after.
        texts: the `B` decoded completions.
        answers: the `B` reference answers (the dataset's `"answer"` column, one per row).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]
    answers: list


def group_batch_sampler(model, tokenizer, dataset, prompts_per_batch: int = 4, num_generations: int = 8,
                        max_tokens: int = 6, temperature: float = 1.0, seed: int = 0
                        ) -> Callable[[int], GroupBatch]:
    """`sample_batch(k) -> GroupBatch`: the k-th batch `Trainer` would sample with these settings.

    `dataset` has `"prompt"` and `"answer"` columns. The batch is sampled from `model` as it
    is when `sample_batch` is called, so call it again after each update that should see
    fresh completions.
    """
    sampler, engine = PromptSampler(len(dataset), seed), HFEngine(model, tokenizer)
    batch_size = prompts_per_batch * num_generations

    def sample_batch(k: int) -> GroupBatch:
        rows = [row for row in sampler.take(prompts_per_batch) for _ in range(num_generations)]  # prompt-major
        was_training = model.training
        model.eval()  # no dropout while sampling
        rollout = engine.generate([dataset[r]["prompt"] for r in rows], n=1, sampling=SamplingConfig(
            temperature=temperature, max_tokens=max_tokens, seed=seed * 2**40 + k * batch_size))
        model.train(was_training)
        return GroupBatch(prompt_ids=rollout.prompt_ids, prompt_mask=rollout.prompt_mask,
                          completion_ids=rollout.completion_ids, completion_mask=rollout.completion_mask,
                          texts=list(rollout.texts), answers=[dataset[r]["answer"] for r in rows])

    return sample_batch
