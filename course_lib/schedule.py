"""Batch arithmetic of GRPO-style trainers and the step-by-step schedule table.

One *generation cycle* works like TRL's `RepeatSampler` + `GRPOTrainer._prepare_inputs`:

1. Take `generation_batch_size / num_generations` new prompts and repeat each one
   `num_generations` times in a row (prompt-major: `[0,0,0, 1,1,1, ...]`).
2. Generate all those completions at once and score them.
3. Cut the batch into `steps_per_generation` micro-batches of
   `per_device_train_batch_size * num_processes` completions; one micro-batch is one
   forward/backward micro-step.
4. With `num_iterations > 1` the same micro-batches are replayed, in the same order,
   `num_iterations` times before the next generation (TRL regenerates every
   `steps_per_generation * num_iterations` micro-steps).
5. Every `gradient_accumulation_steps` micro-steps (counted from the start of training,
   across cycles) the optimizer takes one step.

With several processes, each process owns a contiguous slice of
`per_device_train_batch_size * steps_per_generation` completions of the generation batch
(Accelerate gives process p the p-th batch of the sampler's stream) and cuts *its* slice
into micro-batches; a global micro-batch is the concatenation of the processes' pieces.

Simplification: TRL shuffles each process's completions before cutting them
(`shuffle_sequence_dict`); the table keeps them in order, as Unsloth's documented tables do, unless
`shuffle_seed` is given.
"""

from __future__ import annotations

import numbers
import string
from dataclasses import dataclass, field

import torch

__all__ = [
    "ScheduleRow",
    "effective_batch_size",
    "format_schedule",
    "generation_batch_size",
    "optimizer_steps_per_generation",
    "resolve_steps_per_generation",
    "schedule_from_config",
    "schedule_table",
    "unique_prompts_per_generation",
]


def _check_positive(**values: int | None) -> None:
    for name, value in values.items():
        if value is not None and (not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name}={value!r} must be a positive integer. Fix: pass e.g. {name}=1.")


def effective_batch_size(per_device_train_batch_size: int, gradient_accumulation_steps: int,
                         num_processes: int = 1) -> int:
    """Completions whose gradients make one optimizer step (all processes)."""
    _check_positive(per_device_train_batch_size=per_device_train_batch_size,
                    gradient_accumulation_steps=gradient_accumulation_steps, num_processes=num_processes)
    return per_device_train_batch_size * gradient_accumulation_steps * num_processes


def generation_batch_size(per_device_train_batch_size: int, steps_per_generation: int,
                          num_processes: int = 1) -> int:
    """Completions generated at once: `per_device * num_processes * steps_per_generation`."""
    _check_positive(per_device_train_batch_size=per_device_train_batch_size,
                    steps_per_generation=steps_per_generation, num_processes=num_processes)
    return per_device_train_batch_size * num_processes * steps_per_generation


_generation_batch_size = generation_batch_size  # for schedule_table, whose argument shadows the name


def resolve_steps_per_generation(per_device_train_batch_size: int, gradient_accumulation_steps: int,
                                 num_processes: int = 1, steps_per_generation: int | None = None,
                                 generation_batch_size: int | None = None) -> int:
    """Micro-steps one generation batch serves, by TRL's `GRPOConfig.__post_init__` rule.

    `steps_per_generation` if given; else `generation_batch_size / (per_device *
    num_processes)`; else `gradient_accumulation_steps`. The two are mutually exclusive.
    """
    _check_positive(per_device_train_batch_size=per_device_train_batch_size,
                    gradient_accumulation_steps=gradient_accumulation_steps, num_processes=num_processes,
                    steps_per_generation=steps_per_generation, generation_batch_size=generation_batch_size)
    global_micro_batch = per_device_train_batch_size * num_processes
    if steps_per_generation is not None and generation_batch_size is not None:
        raise ValueError(f"steps_per_generation={steps_per_generation} and generation_batch_size="
                         f"{generation_batch_size} are both set. Fix: set only one; each determines the other.")
    if generation_batch_size is not None:
        if generation_batch_size % global_micro_batch != 0:
            raise ValueError(f"generation_batch_size={generation_batch_size} is not a multiple of "
                             f"per_device_train_batch_size * num_processes = {global_micro_batch}. "
                             f"Fix: use a multiple of {global_micro_batch}.")
        return generation_batch_size // global_micro_batch
    return gradient_accumulation_steps if steps_per_generation is None else steps_per_generation


def unique_prompts_per_generation(generation_batch: int, num_generations: int) -> int:
    """Distinct prompts in a generation batch; it must hold whole groups."""
    _check_positive(generation_batch=generation_batch, num_generations=num_generations)
    if generation_batch % num_generations != 0:
        raise ValueError(
            f"num_generations={num_generations} does not divide the generation batch of {generation_batch} "
            "completions, so the last prompt's group would be cut in two. Fix: choose num_generations "
            f"among the divisors of {generation_batch}, or change the batch sizes.")
    return generation_batch // num_generations


def optimizer_steps_per_generation(steps_per_generation: int, gradient_accumulation_steps: int,
                                   num_iterations: int = 1) -> float:
    """Optimizer steps taken on one generation batch: `steps * iterations / accumulation`.

    Unsloth's documented example: 4 micro-steps per generation, accumulation 2 -> 2.0. A fractional
    result means some optimizer steps mix micro-batches of two generation batches.
    """
    _check_positive(steps_per_generation=steps_per_generation,
                    gradient_accumulation_steps=gradient_accumulation_steps, num_iterations=num_iterations)
    return steps_per_generation * num_iterations / gradient_accumulation_steps


@dataclass(frozen=True)
class ScheduleRow:
    """One micro-step of training."""

    cycle: int
    """Generation cycle, 0 for the first (printed A, B, ...)."""
    step: int
    """Micro-step inside the cycle, 0 .. steps_per_generation * num_iterations - 1."""
    iteration: int
    """Pass over the generation batch (0 .. num_iterations - 1)."""
    micro_batch: int
    """Which of the buffered micro-batches is used (step % steps_per_generation)."""
    global_step: int
    """Micro-step counted from the start of training."""
    prompts: list[int]
    """Prompt index of each completion, processes concatenated in process order."""
    per_process: list[list[int]] = field(repr=False)
    """The same indices, one list per process."""
    optimizer_step: bool
    """True when the optimizer steps after this micro-step."""
    accumulated: int
    """Micro-steps whose gradients have been summed so far (including this one)."""


def schedule_table(
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    steps_per_generation: int | None = None,
    num_processes: int = 1,
    num_iterations: int = 1,
    cycles: int = 2,
    generation_batch_size: int | None = None,
    shuffle_seed: int | None = None,
) -> list[ScheduleRow]:
    """List every micro-step of `cycles` generation cycles.

    Args:
        per_device_train_batch_size: completions per process per micro-step.
        gradient_accumulation_steps: micro-steps per optimizer step.
        num_generations: completions per prompt (G).
        steps_per_generation: micro-steps per generation batch; None = accumulation steps.
            Mutually exclusive with `generation_batch_size`.
        num_processes: number of training processes.
        num_iterations: passes over each generation batch (GRPO's mu).
        cycles: how many generation cycles to list.
        generation_batch_size: completions per generation batch (all processes).
        shuffle_seed: if given, shuffle each process's completions before cutting them
            into micro-batches, as TRL does (with its own random state).

    Returns:
        `cycles * steps_per_generation * num_iterations` rows. Prompts are numbered from
        0 across cycles: cycle c uses prompts `c * U .. (c + 1) * U - 1`, with U the
        unique prompts per generation.
    """
    _check_positive(per_device_train_batch_size=per_device_train_batch_size,
                    gradient_accumulation_steps=gradient_accumulation_steps, num_generations=num_generations,
                    steps_per_generation=steps_per_generation, num_processes=num_processes,
                    num_iterations=num_iterations, cycles=cycles, generation_batch_size=generation_batch_size)
    steps_per_generation = resolve_steps_per_generation(per_device_train_batch_size, gradient_accumulation_steps,
                                                        num_processes, steps_per_generation, generation_batch_size)
    batch = _generation_batch_size(per_device_train_batch_size, steps_per_generation, num_processes)
    prompts_per_cycle = unique_prompts_per_generation(batch, num_generations)
    local_size = per_device_train_batch_size * steps_per_generation
    generator = torch.Generator().manual_seed(shuffle_seed) if shuffle_seed is not None else None

    rows: list[ScheduleRow] = []
    global_step = 0
    for cycle in range(cycles):
        first_prompt = cycle * prompts_per_cycle
        # prompt-major: every prompt repeated num_generations times in a row
        completions = [first_prompt + i // num_generations for i in range(batch)]
        local_batches = [completions[p * local_size:(p + 1) * local_size] for p in range(num_processes)]
        if generator is not None:
            local_batches = [[local[i] for i in torch.randperm(local_size, generator=generator).tolist()]
                             for local in local_batches]
        for step in range(steps_per_generation * num_iterations):
            micro_batch = step % steps_per_generation
            cut = slice(micro_batch * per_device_train_batch_size, (micro_batch + 1) * per_device_train_batch_size)
            per_process = [local[cut] for local in local_batches]
            accumulated = global_step % gradient_accumulation_steps + 1
            rows.append(ScheduleRow(
                cycle=cycle, step=step, iteration=step // steps_per_generation, micro_batch=micro_batch,
                global_step=global_step, prompts=[i for piece in per_process for i in piece],
                per_process=per_process, optimizer_step=accumulated == gradient_accumulation_steps,
                accumulated=accumulated,
            ))
            global_step += 1
    return rows


def schedule_from_config(config, cycles: int = 2, shuffle_seed: int | None = None) -> list[ScheduleRow]:
    """`schedule_table` for a config of `course_lib.config` (its derived batch values)."""
    return schedule_table(
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        num_generations=config.num_generations,
        steps_per_generation=config.effective_steps_per_generation,
        num_processes=config.num_processes,
        num_iterations=config.num_iterations,
        cycles=cycles,
        shuffle_seed=shuffle_seed,
    )


def _cycle_name(cycle: int) -> str:
    letters = string.ascii_uppercase
    return letters[cycle] if cycle < len(letters) else str(cycle)


def _format_batch(row: ScheduleRow) -> str:
    return " | ".join("[" + ",".join(map(str, piece)) + "]" for piece in row.per_process)


def format_schedule(rows: list[ScheduleRow]) -> str:
    """Render rows as text tables, one per generation cycle, like Unsloth's documented examples.

    Columns: micro-step, iteration (only when some row has iteration > 0), the prompt
    indices of the micro-batch (processes separated by `|`), and the optimizer steps.
    """
    show_iteration = any(row.iteration > 0 for row in rows)
    width = max((len(_format_batch(row)) for row in rows), default=5)
    header = "step  " + ("iter  " if show_iteration else "") + "batch".ljust(width) + "  update"
    lines: list[str] = []
    for row in rows:
        if row.step == 0:
            if lines:
                lines.append("")
            lines += [f"Generation cycle {_cycle_name(row.cycle)}", header]
        update = f"-> optimizer step (accumulated {row.accumulated})" if row.optimizer_step else ""
        iteration = f"{row.iteration:<4}  " if show_iteration else ""
        lines.append(f"{row.step:<4}  {iteration}{_format_batch(row).ljust(width)}  {update}".rstrip())
    return "\n".join(lines)
