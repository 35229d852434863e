"""What a :class:`~course_lib.trainer.Trainer` saves, and how it picks up where it stopped.

- :func:`save_trainer_checkpoint`: ``checkpoint-<step>`` with the weights, the optimizer
  and scheduler, the counters of the loop, the sampler's position, the algorithm's own
  state, and the generation batch in flight (every process's rows), through
  :func:`course_lib.run.checkpoint.save_checkpoint`.
- :func:`save_final_model`: ``final/``, the model alone (merged with its LoRA adapters).
- :func:`resume_trainer`: the inverse of the first, after checking that the checkpoint is
  of the same algorithm, config and process count.

The loop's own state is one object, :class:`~course_lib.run.loop_state.LoopState` (``trainer.state``):
its counters and sampler position are the JSON entries of ``trainer_state.json``, its batch in flight
the ``rollout`` file. The loop itself stays in ``trainer.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from . import checkpoint as ckpt
from .folder import check_resume_config, check_resume_run
from .history import load_history


def trainer_state(trainer) -> dict:
    """The loop's counters, the sampler's position, the algorithm's state and the config (JSON-safe)."""
    return {**trainer.state.counters(), "algo": trainer.algorithm.name,
            "algorithm_state": trainer.algorithm.state(),  # e.g. GRPO's adaptive entropy coefficient
            "config": trainer.config.to_dict(), "run": trainer.run_identity()}


def save_trainer_checkpoint(trainer) -> Path:
    """``checkpoint-<step>``, written by the main process; every process must call it.

    The other processes' in-flight rows of the generation batch travel to the main
    process and are saved with its own (``other_ranks``), so a run of N processes resumes
    where it stopped.
    """
    folder = trainer.output_dir / f"checkpoint-{trainer.state.step}"
    rollout = trainer.state.in_flight()
    if trainer.shards.size > 1:
        from accelerate.utils import gather_object

        everyone = gather_object([rollout])
        if rollout is not None:
            rollout = {**rollout, "other_ranks": everyone[1:]}
    if not trainer.shards.is_main:
        trainer.accelerator.wait_for_everyone()
        return folder
    saved = ckpt.save_checkpoint(folder, model=trainer.model, tokenizer=trainer.tokenizer,
                                 optimizer=trainer.optimizer, scheduler=trainer.scheduler,
                                 trainer_state=trainer_state(trainer), rollout=rollout,
                                 value_head=trainer.value_head, history=trainer.logger.entries,
                                 save_total_limit=trainer.config.save_total_limit)
    trainer.accelerator.wait_for_everyone()
    return saved


def save_final_model(trainer) -> Path:
    """``<output_dir>/final``: the model (merged with its adapters when LoRA) + tokenizer."""
    model = trainer.model
    if hasattr(model, "merge_and_unload"):  # a peft model: merge a copy, the trainer keeps its adapters
        model = copy.deepcopy(model).merge_and_unload()
    with ckpt.atomic_folder(trainer.output_dir / "final") as folder:
        model.save_pretrained(folder, safe_serialization=True)
        trainer.tokenizer.save_pretrained(folder)
        if trainer.value_head is not None:
            torch.save(trainer.value_head.state_dict(), folder / "value_head.pt")
    return trainer.output_dir / "final"


def resume_trainer(trainer, folder: str | Path) -> list[dict]:
    """Restore everything saved in a checkpoint into ``trainer``; return the history logged up to it."""
    state = ckpt.load_trainer_state(folder)
    if state["algo"] != trainer.algorithm.name:
        raise ValueError(f"checkpoint {folder} is a {state['algo']} run; this trainer is {trainer.algorithm.name}.")
    config = trainer.config
    check_resume_config(state.get("config"), config.to_dict(), folder)
    check_resume_run(state.get("run"), trainer.run_identity(), folder)
    ckpt.restore_weights(folder, trainer.model, trainer.value_head)
    saved = ckpt.restore_training_state(folder, trainer.optimizer, trainer.scheduler)
    if state.get("algorithm_state"):
        trainer.algorithm.load_state(state["algorithm_state"], config)
    if saved is not None:
        saved_processes = 1 + len(saved.get("other_ranks", []))
        if saved_processes != trainer.shards.size:
            raise ValueError(f"checkpoint {folder} holds the generation batch of {saved_processes} process(es); "
                             f"this run has {trainer.shards.size}. Fix: resume with num_processes={saved_processes}.")
        if trainer.shards.rank > 0:  # this process's own rows of the generation batch in flight
            saved = saved["other_ranks"][trainer.shards.rank - 1]
    trainer.state.restore(state, saved)  # counters, sampler position, this process's batch in flight
    step = trainer.state.step
    rows = load_history(folder)
    for number, row in enumerate(rows, start=1):
        if isinstance(row.get("step"), bool) or not isinstance(row.get("step"), int):
            raise ValueError(f"{folder}/history.jsonl: row {number} has no whole-number 'step' (it holds "
                             f"{str(row)[:80]}), so the rows up to step {step} cannot be kept. Fix: "
                             "restore the file the run wrote, or resume from another checkpoint.")
    return [row for row in rows if row["step"] <= step]


def save_after_failure(trainer) -> str:
    """Save a checkpoint at the last completed optimizer step if none exists (the generation worker
    failed mid-run); the sentence saying what the run can be continued from."""
    from ..common.wording import resume_latest

    step = trainer.state.step
    saved = trainer.output_dir / f"checkpoint-{step}"
    between_steps = trainer.state.between_steps(trainer.config.gradient_accumulation_steps)
    if step > 0 and between_steps and ckpt.checkpoint_problem(saved) is not None:
        trainer.save_checkpoint()
    latest = ckpt.latest_checkpoint(trainer.output_dir)
    if latest is None:
        return "No checkpoint exists (no optimizer step was completed): start the run again."
    return (f"The run stopped after step {step}; {latest} holds step {latest.name.split('-')[-1]}: "
            f"continue with {resume_latest()}.")
