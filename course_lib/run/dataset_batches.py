"""Batches read from the dataset instead of sampled: SFT's demonstrations and DPO's pairs.

The trainer's :meth:`~course_lib.trainer.Trainer.dataset_batch` calls :func:`read`; the SFT and
DPO algorithms ask for it from their ``next_batch``. The rows' checks and the tokenising of a
completion live below the loop, in :mod:`course_lib.post_training.batches`.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ..post_training.batches import completion_tokens
from ..rollout.base import left_pad, pad_token_id, tokenize_prompts
from .batches import GenerationBatch


def supervised_batch(trainer, prompts: list, completions: list, rows: list[int], max_length: int | None,
                     completion_only_loss: bool = True, refuse_longer: bool = False, name: str = "sft"):
    """``(GenerationBatch fields, metrics)`` for rows of (prompt, completion) read from the dataset.

    A row longer than ``max_length`` keeps its start (TRL's ``truncation_mode="keep_start"``): the
    completion is cut, and ``{name}/truncated_rows`` counts such rows; ``refuse_longer`` raises
    instead. ``completion_only_loss=False`` moves the prompt (all but its first token) into the
    trained part, so the loss covers it too.
    """
    tokenizer, config = trainer.tokenizer, trainer.config
    prompt_rows = tokenize_prompts(tokenizer, prompts, chat_template_kwargs=config.chat_template_kwargs)
    completion_rows, truncated = [], 0
    for prompt_ids, completion, row in zip(prompt_rows, completions, rows):
        ids = completion_tokens(tokenizer, completion)
        room = None if max_length is None else max_length - len(prompt_ids)
        if room is not None and len(ids) > room:
            if refuse_longer or room < 1:
                raise ValueError(f"train_dataset row {row}: prompt + completion are {len(prompt_ids) + len(ids)} tokens, "
                                 f"more than max_length={max_length}"
                                 + ("" if room >= 1 else " and the prompt alone fills it") +
                                 ". Fix: raise max_length, or shorten the row (truncation_mode='keep_start' cuts the "
                                 "completion's end).")
            ids, truncated = ids[:room], truncated + 1
        completion_rows.append(ids)
    if not completion_only_loss:
        completion_rows = [p[1:] + c for p, c in zip(prompt_rows, completion_rows)]
        prompt_rows = [p[:1] for p in prompt_rows]
    pad = pad_token_id(tokenizer)
    prompt_ids, prompt_mask = left_pad(prompt_rows, pad)
    width = max(len(c) for c in completion_rows)
    completion_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    completion_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, ids in enumerate(completion_rows):
        completion_ids[i, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        completion_mask[i, :len(ids)] = 1
    device = trainer.accelerator.device
    tensors = {"prompt_ids": prompt_ids.to(device), "prompt_mask": prompt_mask.to(device),
               "completion_ids": completion_ids.to(device), "completion_mask": completion_mask.to(device)}
    tokens = int(completion_mask.sum() + prompt_mask.sum())
    trainer.tokens_seen += int(trainer.shards.sum(tokens))
    return tensors, {f"{name}/truncated_rows": truncated, "num_completion_tokens": int(completion_mask.sum())}


def _rows_of_this_process(trainer, per_example: int) -> tuple[list[int], list[int]]:
    """The dataset rows of the next batch (every process draws the same), and this process's share."""
    examples = trainer.sampler.take(trainer.config.unique_prompts_per_generation)
    expanded = [row for row in examples for _ in range(per_example)]
    return examples, expanded[trainer.shards.rows]


def sft_batch(trainer):
    """SFT's ``next_batch``: the next ``prompt`` / ``completion`` rows, loss on the completion."""
    config = trainer.config
    _, rows = _rows_of_this_process(trainer, 1)
    prompts = [trainer._columns["prompt"][r] for r in rows]
    completions = [trainer._columns["completion"][r] for r in rows]
    tensors, metrics = supervised_batch(trainer, prompts, completions, rows, config.max_length,
                                        completion_only_loss=config.completion_only_loss is not False,
                                        refuse_longer=config.truncation_mode == "error")
    trainer.cycle += 1
    mask = tensors["completion_mask"]
    trainer._last_samples = ([str(p) for p in prompts], [str(c) for c in completions], [0.0] * len(rows),
                             [0.0] * len(rows))
    return GenerationBatch(**tensors, advantages=torch.zeros(len(rows), device=mask.device), rows=rows,
                           num_items_in_batch=int(trainer.shards.sum(int(mask.sum()))), metrics=metrics)


def pair_batch(trainer):
    """DPO's ``next_batch``: each pair as two rows, chosen then rejected, with the reference's log-probs."""
    config = trainer.config
    _, rows = _rows_of_this_process(trainer, 2)
    prompts = [trainer._columns["prompt"][r] for r in rows]
    completions = [trainer._columns["chosen" if i % 2 == 0 else "rejected"][r] for i, r in enumerate(rows)]
    tensors, metrics = supervised_batch(trainer, prompts, completions, rows, config.max_length, name="dpo")
    _, _, ref_logps = trainer._logps_before_learning(SimpleNamespace(**tensors, sampling_logps=None))
    if ref_logps is None:
        raise ValueError("DPO needs a reference model and none was loaded. Fix: beta > 0 (TRL's default 0.1).")
    trainer.cycle += 1
    mask = tensors["completion_mask"]
    trainer._last_samples = ([str(p) for p in prompts], [str(c) for c in completions],
                             [1.0 if i % 2 == 0 else 0.0 for i in range(len(rows))], [0.0] * len(rows))
    return GenerationBatch(**tensors, advantages=torch.zeros(len(rows), device=mask.device), rows=rows,
                           num_items_in_batch=int(trainer.shards.sum(int(mask.sum()))), ref_logps=ref_logps,
                           metrics=metrics)


#: What :func:`read` can read: the rows of SFT, the pairs of DPO.
READERS = {"sft": sft_batch, "pairs": pair_batch}


def read(trainer, kind: str):
    """The next batch of ``kind`` (a key of :data:`READERS`) from the trainer's dataset."""
    return READERS[kind](trainer)
