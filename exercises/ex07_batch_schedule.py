# This file is generated from solutions/ex07_batch_schedule.py by `python -m course_lib make-stubs`.
# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.
"""Lesson 07 exercises: the batch arithmetic of GRPO and its step-by-step schedule."""


def batch_arithmetic(per_device_train_batch_size: int, gradient_accumulation_steps: int, num_generations: int,
                     num_processes: int = 1, steps_per_generation: int | None = None,
                     generation_batch_size: int | None = None) -> dict:
    """The derived batch sizes of a GRPO configuration, as TRL resolves them.

    - `steps_per_generation`: as given; else `generation_batch_size / (per_device *
      num_processes)` when that is given; else `gradient_accumulation_steps`.
      Setting both `steps_per_generation` and `generation_batch_size` is an error.
    - `generation_batch_size`: completions generated at once,
      `per_device * num_processes * steps_per_generation`.
    - `effective_batch_size`: completions whose gradients make one optimizer step,
      `per_device * gradient_accumulation_steps * num_processes`.
    - `optimizer_steps_per_generation`: `steps_per_generation / gradient_accumulation_steps`
      (a float: 4 / 2 = 2.0).
    - `unique_prompts_per_generation`: `generation_batch_size / num_generations` (an int).

    Raise `ValueError` when both `steps_per_generation` and `generation_batch_size` are
    set, when `generation_batch_size` is not a multiple of `per_device * num_processes`,
    when `num_generations < 2`, or when `num_generations` does not divide the generation
    batch (a prompt's group would be split).

    Example: `batch_arithmetic(3, 2, 3, steps_per_generation=4)` returns
    `{"steps_per_generation": 4, "generation_batch_size": 12, "effective_batch_size": 6,
    "optimizer_steps_per_generation": 2.0, "unique_prompts_per_generation": 4}`.
    """
    raise NotImplementedError("Exercise: replace this line with your code.")


def micro_batches(per_device_train_batch_size: int, gradient_accumulation_steps: int, num_generations: int,
                  steps_per_generation: int | None = None, cycles: int = 2) -> list[tuple[list[int], bool]]:
    """Every micro-step of `cycles` generation cycles, on one process.

    Each generation cycle takes `U = generation batch / num_generations` new prompts
    (numbered on from the previous cycle: the first cycle uses 0 .. U-1, the second
    U .. 2U-1, ...), repeats each one `num_generations` times in a row (prompt-major),
    and cuts that list into `steps_per_generation` micro-batches of
    `per_device_train_batch_size` completions (`steps_per_generation=None` means
    `gradient_accumulation_steps`). The optimizer steps after every
    `gradient_accumulation_steps`-th micro-step, counted from the start of training
    (not from the start of the cycle).

    Example (Example 1 of the lesson): `micro_batches(3, 2, 3, 4, cycles=1)` returns
    `[([0, 0, 0], False), ([1, 1, 1], True), ([2, 2, 2], False), ([3, 3, 3], True)]`.

    Returns:
        One `(prompt indices of the micro-batch, optimizer step after it?)` per micro-step.
        Raise `ValueError` when `num_generations` does not divide the generation batch.
    """
    # HINT: build the generation batch as a list of prompt indices first, then slice it.
    raise NotImplementedError("Exercise: replace this line with your code.")
