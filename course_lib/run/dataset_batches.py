"""Batches read from the dataset instead of sampled: SFT's demonstrations and DPO's pairs.

Two batch generators with the RL one's interface (``generate`` then ``score``,
:class:`~course_lib.run.sampled_batches.SampledBatches`), chosen by the algorithm's ``batches``
(``"sft"``, ``"pairs"``; :data:`GENERATORS`):

- :class:`DemonstrationBatches`: the next ``prompt`` / ``completion`` rows, loss on the completion
  (or ``messages`` conversations, loss on the assistant's turns or on every token);
- :class:`PairBatches`: each pair as two rows, chosen then rejected, scored with the reference's
  log-probs.

They read the rows through :class:`~course_lib.run.batches.DatasetRows` and advance the loop's
state (:class:`~course_lib.run.loop_state.LoopState`: the prompt sampler, the cycle, the tokens seen,
the samples to print). The rows' checks and the tokenising of a completion live below the loop, in
:mod:`course_lib.post_training.batches`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..models import eval_mode
from ..post_training.batches import completion_tokens
from ..post_training.conversations import conversation_batch, split_for_display
from ..post_training.packing import pack_micro_batches
from ..rollout.base import left_pad, pad_token_id, tokenize_prompts
from .batches import DatasetRows, GenerationBatch
from .distributed import Shards
from .loop_state import LoopState
from .sampled_batches import reference_logps


def supervised_batch(tokenizer, config, device, prompts: list, completions: list, rows: list[int], max_length: int | None,
                     completion_only_loss: bool = True, refuse_longer: bool = False, name: str = "sft"):
    """``(GenerationBatch tensors on device, metrics)`` for rows of (prompt, completion) read from the dataset.

    A row longer than ``max_length`` keeps its start (TRL's ``truncation_mode="keep_start"``): the
    completion is cut, and ``{name}/truncated_rows`` counts such rows; ``refuse_longer`` raises
    instead. ``completion_only_loss=False`` moves the prompt (all but its first token) into the
    trained part, so the loss covers it too.
    """
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
    tensors = {"prompt_ids": prompt_ids.to(device), "prompt_mask": prompt_mask.to(device),
               "completion_ids": completion_ids.to(device), "completion_mask": completion_mask.to(device)}
    return tensors, {f"{name}/truncated_rows": truncated, "num_completion_tokens": int(completion_mask.sum())}


@dataclass
class DemonstrationBatches:
    """SFT's batch generator: the next ``prompt`` / ``completion`` rows, loss on the completion."""

    config: Any
    state: LoopState
    rows: DatasetRows
    tokenizer: Any
    shards: Shards
    device: torch.device

    per_example = 1  # batch rows made of each dataset row: one demonstration

    def after_step(self, step: int) -> None:
        """Nothing runs between optimizer steps."""

    def close(self) -> None:
        """Nothing to release."""

    def generate(self) -> GenerationBatch:
        """The next rows, tokenised (every process draws the same dataset rows and keeps its share)."""
        config, state = self.config, self.state
        examples = state.sampler.take(config.unique_prompts_per_generation)
        rows = [row for row in examples for _ in range(self.per_example)][self.shards.rows]
        if self.conversational:  # messages rows: the whole chat, loss on the assistant's turns
            conversations = self.rows.column("messages", rows)
            tensors, metrics = conversation_batch(self.tokenizer, config, self.device, conversations, rows,
                                                  config.max_length, refuse_longer=config.truncation_mode == "error")
            prompts, completions = zip(*map(split_for_display, conversations))
        else:
            prompts = self.rows.column("prompt", rows)
            completions = [self.rows.columns[self.completion_column(i)][r] for i, r in enumerate(rows)]
            tensors, metrics = self.tokenize(prompts, completions, rows)
        read = tensors.get("attention_mask", tensors["completion_mask"])
        state.tokens_seen += int(self.shards.sum(int(read.sum() + tensors["prompt_mask"].sum())))
        if getattr(config, "packing", False):  # each micro-batch's examples in one row (course_lib.post_training.packing)
            tensors = pack_micro_batches(tensors, config.per_device_train_batch_size)
        state.cycle += 1
        mask = tensors["completion_mask"]
        state.last_samples = ([str(p) for p in prompts], [str(c) for c in completions], self.sample_rewards(len(rows)),
                              [0.0] * len(rows))
        return GenerationBatch(**tensors, advantages=torch.zeros(len(mask), device=mask.device), rows=rows,
                               num_items_in_batch=int(self.shards.sum(int(mask.sum()))), metrics=metrics)

    @property
    def conversational(self) -> bool:
        """True for ``messages`` rows (whole chats, :mod:`course_lib.post_training.conversations`), False for
        ``prompt`` / ``completion`` rows."""
        return self.per_example == 1 and "completion" not in self.rows.columns and "messages" in self.rows.columns

    def completion_column(self, index: int) -> str:
        """The column holding the completion of the batch's ``index``-th row."""
        return "completion"

    def tokenize(self, prompts: list, completions: list, rows: list[int]):
        config = self.config
        return supervised_batch(self.tokenizer, config, self.device, prompts, completions, rows, config.max_length,
                                completion_only_loss=config.completion_only_loss is not False,
                                refuse_longer=config.truncation_mode == "error")

    def sample_rewards(self, count: int) -> list[float]:
        """The "reward" column of the printed samples: none for a demonstration."""
        return [0.0] * count

    def score(self, batch: GenerationBatch) -> GenerationBatch:
        """Nothing to score: a demonstration's advantage is no part of SFT's loss."""
        return batch


@dataclass
class PairBatches(DemonstrationBatches):
    """DPO's batch generator: each pair as two rows, chosen then rejected, with the reference's log-probs."""

    model: torch.nn.Module | None = None
    reference: Any = None         # course_lib.policy.ReferencePolicy; None when beta == 0 (refused)
    forward: Callable | None = None  # the trainer's no-gradient forward in chunks

    per_example = 2  # chosen, then rejected

    def completion_column(self, index: int) -> str:
        return "chosen" if index % 2 == 0 else "rejected"

    def tokenize(self, prompts: list, completions: list, rows: list[int]):
        return supervised_batch(self.tokenizer, self.config, self.device, prompts, completions, rows,
                                self.config.max_length, name="dpo")

    def sample_rewards(self, count: int) -> list[float]:
        return [1.0 if i % 2 == 0 else 0.0 for i in range(count)]  # chosen 1, rejected 0

    def score(self, batch: GenerationBatch) -> GenerationBatch:
        """The reference policy's log-probs of both completions of each pair."""
        if self.reference is None:
            raise ValueError("DPO needs a reference model and none was loaded. Fix: beta > 0 (TRL's default 0.1).")
        tensors = {name: getattr(batch, name) for name in ("prompt_ids", "prompt_mask", "completion_ids",
                                                           "completion_mask")}
        with eval_mode(self.model):  # no dropout in the reference pass
            return dataclasses.replace(batch, ref_logps=reference_logps(self.reference, self.forward, tensors))


#: The algorithm's ``batches`` -> the generator that reads them.
GENERATORS = {"sft": DemonstrationBatches, "pairs": PairBatches}
