"""What a :class:`~course_lib.trainer.Trainer` saves, and how it picks up where it stopped.

:class:`TrainerFiles` holds the parts of a run that a checkpoint keeps (the trainer builds it
from its own, :meth:`~course_lib.trainer.Trainer.files`):

- :meth:`~TrainerFiles.save_checkpoint`: ``checkpoint-<step>`` with the weights, the optimizer
  and scheduler, the loop's state (its counters, the sampler's position, the generation batch in
  flight with every process's rows), the algorithm's own state, through
  :func:`course_lib.run.checkpoint.save_checkpoint`;
- :meth:`~TrainerFiles.save_final`: ``final/``, the model alone (merged with its LoRA adapters);
- :meth:`~TrainerFiles.resume`: the inverse of the first, after checking that the checkpoint is
  of the same algorithm, config, rows and process count;
- :meth:`~TrainerFiles.save_after_failure`: the checkpoint of the last completed step when the
  generation worker fails, and the sentence saying what to continue from.

The loop's own state is one object, :class:`~course_lib.run.loop_state.LoopState`: its counters
and sampler position are the JSON entries of ``trainer_state.json``, its batch in flight the
``rollout`` file. The loop itself stays in ``trainer.py``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from . import checkpoint as ckpt
from .distributed import Shards
from .folder import check_resume_config, check_resume_run
from .history import load_history
from .loop_state import LoopState


@dataclass
class TrainerFiles:
    """A run's checkpoints and final model: what is saved, from where, and where it is restored to."""

    output_dir: Path
    config: Any
    state: LoopState
    algorithm: Any
    model: torch.nn.Module
    value_head: torch.nn.Module | None
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    shards: Shards
    accelerator: Any
    run_identity: Callable[[], dict]  # the rows and reward functions a resume must match (course_lib.run.folder)

    def trainer_state(self) -> dict:
        """The loop's counters, the sampler's position, the algorithm's state and the config (JSON-safe)."""
        return {**self.state.counters(), "algo": self.algorithm.name,
                "algorithm_state": self.algorithm.state(),  # e.g. GRPO's adaptive entropy coefficient
                "config": self.config.to_dict(), "run": self.run_identity()}

    def save_checkpoint(self, history: list[dict]) -> Path:
        """``checkpoint-<step>``, written by the main process; every process must call it.

        The other processes' in-flight rows of the generation batch travel to the main
        process and are saved with its own (``other_ranks``), so a run of N processes resumes
        where it stopped. ``history``: the rows logged so far (``history.jsonl``).
        """
        folder = self.output_dir / f"checkpoint-{self.state.step}"
        rollout = self.state.in_flight()
        if self.shards.size > 1:
            from accelerate.utils import gather_object

            everyone = gather_object([rollout])
            if rollout is not None:
                rollout = {**rollout, "other_ranks": everyone[1:]}
        if not self.shards.is_main:
            self.accelerator.wait_for_everyone()
            return folder
        saved = ckpt.save_checkpoint(folder, model=self.model, tokenizer=self.tokenizer,
                                     optimizer=self.optimizer, scheduler=self.scheduler,
                                     trainer_state=self.trainer_state(), rollout=rollout,
                                     value_head=self.value_head, history=history,
                                     save_total_limit=self.config.save_total_limit)
        self.accelerator.wait_for_everyone()
        return saved

    def save_final(self) -> Path:
        """``<output_dir>/final``: the model (merged with its adapters when LoRA) + tokenizer."""
        model = self.model
        if hasattr(model, "merge_and_unload"):  # a peft model: merge a copy, the trainer keeps its adapters
            model = copy.deepcopy(model).merge_and_unload()
        with ckpt.atomic_folder(self.output_dir / "final") as folder:
            model.save_pretrained(folder, safe_serialization=True)
            self.tokenizer.save_pretrained(folder)
            if self.value_head is not None:
                torch.save(self.value_head.state_dict(), folder / "value_head.pt")
        return self.output_dir / "final"

    def resume(self, folder: str | Path) -> list[dict]:
        """Restore everything saved in a checkpoint; return the history logged up to it."""
        state = ckpt.load_trainer_state(folder)
        if state["algo"] != self.algorithm.name:
            raise ValueError(f"checkpoint {folder} is a {state['algo']} run; this trainer is {self.algorithm.name}.")
        config, shards = self.config, self.shards
        check_resume_config(state.get("config"), config.to_dict(), folder)
        check_resume_run(state.get("run"), self.run_identity(), folder)
        ckpt.restore_weights(folder, self.model, self.value_head)
        saved = ckpt.restore_training_state(folder, self.optimizer, self.scheduler)
        if state.get("algorithm_state"):
            self.algorithm.load_state(state["algorithm_state"], config)
        if saved is not None:
            saved_processes = 1 + len(saved.get("other_ranks", []))
            if saved_processes != shards.size:
                raise ValueError(f"checkpoint {folder} holds the generation batch of {saved_processes} process(es); "
                                 f"this run has {shards.size}. Fix: resume with num_processes={saved_processes}.")
            if shards.rank > 0:  # this process's own rows of the generation batch in flight
                saved = saved["other_ranks"][shards.rank - 1]
        self.state.restore(state, saved)  # counters, sampler position, this process's batch in flight
        step = self.state.step
        rows = load_history(folder)
        for number, row in enumerate(rows, start=1):
            if isinstance(row.get("step"), bool) or not isinstance(row.get("step"), int):
                raise ValueError(f"{folder}/history.jsonl: row {number} has no whole-number 'step' (it holds "
                                 f"{str(row)[:80]}), so the rows up to step {step} cannot be kept. Fix: "
                                 "restore the file the run wrote, or resume from another checkpoint.")
        return [row for row in rows if row["step"] <= step]

    def save_after_failure(self, history: list[dict]) -> str:
        """Save a checkpoint at the last completed optimizer step if none exists (the generation worker
        failed mid-run); the sentence saying what the run can be continued from."""
        from ..common.wording import resume_latest

        step = self.state.step
        saved = self.output_dir / f"checkpoint-{step}"
        between_steps = self.state.between_steps(self.config.gradient_accumulation_steps)
        if step > 0 and between_steps and ckpt.checkpoint_problem(saved) is not None:
            self.save_checkpoint(history)
        latest = ckpt.latest_checkpoint(self.output_dir)
        if latest is None:
            return "No checkpoint exists (no optimizer step was completed): start the run again."
        return (f"The run stopped after step {step}; {latest} holds step {latest.name.split('-')[-1]}: "
                f"continue with {resume_latest()}.")
