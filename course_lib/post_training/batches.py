"""Batches read from the dataset instead of sampled: SFT's demonstrations and DPO's pairs.

The trainer's micro-steps read a ``GenerationBatch`` (prompt-major rows: left-padded prompt,
right-padded completion, its loss mask); RL fills it by sampling and scoring
(``Algorithm.next_batch``'s default). Here the completions are the dataset's own:

- :func:`check_sft_rows` / :func:`check_pair_rows`: the dataset's columns, checked once when
  the trainer is built (an empty completion, a pair whose chosen equals its rejected);
- :func:`completion_tokens`: a completion's tokens, the end-of-turn token appended (what the
  policy must learn to write, as TRL appends ``eos_token``);
- :func:`supervised_batch`: rows of (prompt, completion) into a ``GenerationBatch``, cut to
  ``max_length`` with a count of the rows cut;
- :func:`sft_batch`, :func:`pair_batch`: the two algorithms' ``next_batch``; DPO's reference
  log-probs come from the trainer's reference pass (the same as GRPO's KL reads).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from course_lib.rollout.base import left_pad, pad_token_id, tokenize_prompts


def refuse_sampling_options(config) -> None:
    """Refuse the options of a sampling loop on a run that reads its rows from the dataset (SFT, DPO)."""
    from course_lib.config import fail

    for name, why in (("async_generation", "there is no sampling to run ahead of the trainer"),
                      ("dynamic_sampling", "there are no sampled groups to refill")):
        if getattr(config, name):
            fail(name, True, f"does nothing for {config.algo}, which reads its rows from the dataset: {why}",
                 f"leave {name}=False")


def _text(completion) -> str:
    """A completion as text: a string, or the content of a conversation's assistant message(s)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and all(isinstance(m, dict) for m in completion):
        return "".join(str(m.get("content") or "") for m in completion)
    raise TypeError(f"a completion is a string or a list of messages, not {type(completion).__name__}")


def check_sft_rows(dataset) -> None:
    """Refuse an SFT dataset without a ``completion`` column or with an empty completion."""
    if "completion" not in dataset.column_names:
        raise ValueError(f"train_dataset has no 'completion' column (columns: {dataset.column_names}); SFT learns "
                         "the completion of each prompt. Fix: rows of {'prompt': ..., 'completion': ...}.")
    for row, completion in enumerate(dataset["completion"]):
        if not _text(completion).strip():
            raise ValueError(f"train_dataset row {row}: the completion is empty, so there is nothing to learn. "
                             "Fix: drop rows with empty completions.")


def check_pair_rows(dataset) -> None:
    """Refuse a DPO dataset without ``chosen`` / ``rejected``, with an empty one, or with chosen == rejected."""
    missing = [name for name in ("chosen", "rejected") if name not in dataset.column_names]
    if missing:
        raise ValueError(f"train_dataset has no {missing} column(s) (columns: {dataset.column_names}); DPO learns "
                         "from pairs. Fix: rows of {'prompt': ..., 'chosen': ..., 'rejected': ...}.")
    for row, (chosen, rejected) in enumerate(zip(dataset["chosen"], dataset["rejected"])):
        chosen, rejected = _text(chosen), _text(rejected)
        if not chosen.strip() or not rejected.strip():
            raise ValueError(f"train_dataset row {row}: an empty {'chosen' if not chosen.strip() else 'rejected'} "
                             "completion. Fix: drop the pair.")
        if chosen == rejected:
            raise ValueError(f"train_dataset row {row}: chosen and rejected are the same text ({chosen[:40]!r}); "
                             "the pair prefers nothing and its loss has zero gradient. Fix: drop the pair.")


def completion_tokens(tokenizer, completion) -> list[int]:
    """The completion's tokens plus the end-of-turn (eos) token, no other special tokens."""
    ids = tokenizer(_text(completion), add_special_tokens=False)["input_ids"]
    return list(ids) + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])


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
    from course_lib.run.batches import GenerationBatch

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
    from course_lib.run.batches import GenerationBatch

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
