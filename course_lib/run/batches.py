"""The data a training run moves around: which prompts come next, and one scored batch.

- :class:`PromptSampler`: dataset rows in a fresh seeded permutation each epoch (as TRL's
  sampler does), resumable from ``(epoch, position)``.
- :class:`DatasetRows`: the training rows as plain lists, column by column, indexed by row.
- :class:`Generated`: one generation cycle as sampled (and rewarded), before the log-probs;
- :class:`GenerationBatch`: one generation cycle after scoring: tensors the loss reads,
  sliced in order into micro-batches (:class:`~course_lib.algos.base.MicroBatch`, prompt-major rows).
- :func:`completion_metrics`: TRL's completion-length metrics of a generation batch.
- The cycle plan, written once for the trainer and the asynchronous worker: the rows of a cycle
  (:func:`repeat_prompts`), its sampling seed (:func:`cycle_seed`) and its length in micro-steps
  (:func:`micro_steps_per_cycle`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from ..algos.base import MicroBatch
from ..rollout.base import RolloutBatch
from ..rollout.tool_run import ToolRollout


def repeat_prompts(prompt_rows: list[int], num_generations: int) -> list[int]:
    """Prompt-major rows of a generation cycle: each prompt's row ``num_generations`` times in a row."""
    return [row for row in prompt_rows for _ in range(num_generations)]


def cycle_seed(config, cycle: int, round_index: int = 0) -> int:
    """The sampling seed of generation cycle ``cycle`` (``round_index``: dynamic sampling's refill
    rounds); each row then adds its global index, so no two completions of a run share a seed."""
    return config.seed * 2**40 + cycle * config.effective_generation_batch_size + round_index * 2**36


def micro_steps_per_cycle(config) -> int:
    """Micro-steps one generation batch feeds: ``steps_per_generation`` slices, ``num_iterations`` times."""
    return config.effective_steps_per_generation * config.num_iterations


class PromptSampler:
    """Dataset row indices, a fresh seeded permutation each epoch; resumable."""

    def __init__(self, num_rows: int, seed: int, epoch: int = 0, position: int = 0, shuffle: bool = True):
        self.num_rows, self.seed, self.epoch, self.position = num_rows, seed, epoch, position
        self.shuffle = shuffle  # False: the dataset's own order every epoch (a curriculum)

    def _order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.num_rows))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.num_rows, generator=generator).tolist()

    def take(self, count: int) -> list[int]:
        taken: list[int] = []
        while len(taken) < count:
            order = self._order()
            chunk = order[self.position: self.position + count - len(taken)]
            taken += chunk
            self.position += len(chunk)
            if self.position >= self.num_rows:
                self.epoch, self.position = self.epoch + 1, 0
        return taken

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}


class DatasetRows:
    """The training rows as plain lists, column by column (made once, so each generation cycle indexes
    them instead of slicing the dataset); ``columns`` also goes to the reward and tool set-up."""

    def __init__(self, dataset):
        # dataset[name][:] reads the column in one batch; iterating dataset[name] formats row by row (~40x slower)
        self.columns: dict[str, list] = {name: list(dataset[name][:]) for name in dataset.column_names}

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def column(self, name: str, rows: list[int]) -> list:
        """Column ``name`` at dataset rows ``rows`` (repeats allowed)."""
        values = self.columns[name]
        return [values[r] for r in rows]

    def prompts_and_columns(self, rows: list[int]) -> tuple[list, dict[str, list]]:
        """The prompts of ``rows`` and every other column at them (what reward functions receive)."""
        return self.column("prompt", rows), {name: self.column(name, rows) for name in self.columns if name != "prompt"}


@dataclass
class Generated:
    """Step 1's output on this process: the dataset rows, their prompts and columns, the engine's completions,
    and their rewards (scored as they were sampled: dynamic sampling filters on them)."""

    rows: list[int]
    prompts: list
    columns: dict[str, list]
    rollout: RolloutBatch
    per_func: torch.Tensor | None = None   # (B, K) each reward function's score
    total: torch.Tensor | None = None      # (B,) their weighted sum
    metrics: dict = field(default_factory=dict)  # dynamic_sampling/* when on
    tools: ToolRollout | None = None  # multi-turn rollouts: trajectories, tool mask, environments

    @property
    def loss_mask(self) -> torch.Tensor:
        """(B, T) the tokens the model wrote: multi-turn rollouts attend to tool results but do not train on them."""
        mask = self.rollout.completion_mask
        return mask if self.tools is None else mask * self.tools.agent.tool_mask.to(mask.device)


@dataclass
class GenerationBatch:
    """One generation cycle, scored: everything the micro-steps read.  B = prompts x G."""

    prompt_ids: torch.Tensor                 # (B, P) left-padded
    prompt_mask: torch.Tensor                # (B, P)
    completion_ids: torch.Tensor             # (B, T) right-padded
    completion_mask: torch.Tensor            # (B, T) loss mask (truncated rows zeroed if asked)
    advantages: torch.Tensor                 # (B,) GRPO/RLOO, (B, T) PPO
    rows: list[int]                          # dataset row of each completion
    num_items_in_batch: int                  # valid completion tokens in the whole batch
    old_logps: torch.Tensor | None = None    # (B, T) policy at sampling time
    ref_logps: torch.Tensor | None = None    # (B, T) reference policy
    sampling_ratio: torch.Tensor | None = None  # (B, T) or (B, 1) sampler-mismatch weight
    sampling_logps: torch.Tensor | None = None  # (B, T) the sampler's own log-probs, when recorded
    old_values: torch.Tensor | None = None   # (B, T) PPO
    returns: torch.Tensor | None = None      # (B, T) PPO
    metrics: dict = field(default_factory=dict)
    attention_mask: torch.Tensor | None = None  # (B, T) multi-turn: 1 on tool results too; None = completion_mask
    segment_ids: torch.Tensor | None = None  # (M, P + T) SFT's packing: one row per micro-batch, its examples

    def micro_batch(self, index: int, size: int) -> MicroBatch:
        """Rows ``[index * size, (index + 1) * size)``: the ``index``-th micro-batch, in order (packed:
        row ``index``, which holds those ``size`` examples; course_lib.post_training.packing)."""
        sl = slice(index * size, (index + 1) * size)
        rows = self.rows[sl]
        if self.segment_ids is not None:
            sl = slice(index, index + 1)
        tensors = {}
        for spec in dataclasses.fields(MicroBatch):
            value = getattr(self, spec.name, None)  # None too for fields newer than a saved batch
            if isinstance(value, torch.Tensor):
                tensors[spec.name] = value[sl]
        return MicroBatch(**tensors, rows=rows)


def completion_metrics(completion_mask: torch.Tensor, is_eos: torch.Tensor) -> dict:
    """TRL's completion-length metrics for one generation batch."""
    lengths = completion_mask.sum(1).float()
    terminated = lengths[is_eos]
    return {
        "completions/mean_length": lengths.mean().item(),
        "completions/min_length": lengths.min().item(),
        "completions/max_length": lengths.max().item(),
        "completions/clipped_ratio": (~is_eos).float().mean().item(),
        "completions/mean_terminated_length": terminated.mean().item() if len(terminated) else 0.0,
    }
