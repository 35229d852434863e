"""Tests of course_lib.schedule: the seed's four tables, batch formulas, TRL's sampler."""

from __future__ import annotations

import pytest

from course_lib.schedule import (
    effective_batch_size,
    format_schedule,
    generation_batch_size,
    optimizer_steps_per_generation,
    schedule_from_config,
    schedule_table,
    unique_prompts_per_generation,
)


def _as_cycles(rows):
    """{cycle: [(prompts, optimizer_step), ...]} for comparison with the seed's tables."""
    cycles: dict[int, list] = {}
    for row in rows:
        cycles.setdefault(row.cycle, []).append((row.prompts, row.optimizer_step))
    return cycles


# The seed's tables, cycle A then cycle B; True marks "optimizer update" after the step.
EXAMPLE_1 = {  # per_device=3, grad_accum=2, num_generations=3, steps_per_generation=4
    0: [([0, 0, 0], False), ([1, 1, 1], True), ([2, 2, 2], False), ([3, 3, 3], True)],
    1: [([4, 4, 4], False), ([5, 5, 5], True), ([6, 6, 6], False), ([7, 7, 7], True)],
}
EXAMPLE_2 = {  # per_device=3, grad_accum=4, num_generations=3, steps_per_generation=4 (default)
    0: [([0, 0, 0], False), ([1, 1, 1], False), ([2, 2, 2], False), ([3, 3, 3], True)],
    1: [([4, 4, 4], False), ([5, 5, 5], False), ([6, 6, 6], False), ([7, 7, 7], True)],
}
# Example 3: per_device=3, grad_accum=4, num_generations=4, steps_per_generation=4.
# The seed prints cycle A as [0,0,0] [0,1,1] [1,1,3] [3,3,3] and cycle B as
# [4,4,4] [4,5,5] [5,5,6] [6,6,6]. That is a typo: 12 completions with 4 per prompt are
# 3 prompts, so cycle A holds prompts 0, 1 and 2, four completions each; the seed's
# cycle A has no prompt 2 and a fourth prompt "3" that a 3-prompt batch cannot hold.
# Cycle B then starts at prompt 3, not 4 (the seed's B carries the same skip).
EXAMPLE_3 = {
    0: [([0, 0, 0], False), ([0, 1, 1], False), ([1, 1, 2], False), ([2, 2, 2], True)],
    1: [([3, 3, 3], False), ([3, 4, 4], False), ([4, 4, 5], False), ([5, 5, 5], True)],
}
EXAMPLE_4 = {  # per_device=6, grad_accum=2, num_generations=3, steps_per_generation=2 (default)
    0: [([0, 0, 0, 1, 1, 1], False), ([2, 2, 2, 3, 3, 3], True)],
    1: [([4, 4, 4, 5, 5, 5], False), ([6, 6, 6, 7, 7, 7], True)],
}


@pytest.mark.parametrize("kwargs, expected", [
    (dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=3,
          steps_per_generation=4), EXAMPLE_1),
    (dict(per_device_train_batch_size=3, gradient_accumulation_steps=4, num_generations=3), EXAMPLE_2),
    (dict(per_device_train_batch_size=3, gradient_accumulation_steps=4, num_generations=4), EXAMPLE_3),
    (dict(per_device_train_batch_size=6, gradient_accumulation_steps=2, num_generations=3), EXAMPLE_4),
], ids=["example1", "example2", "example3", "example4"])
def test_seed_examples(kwargs, expected):
    assert _as_cycles(schedule_table(**kwargs, cycles=2)) == expected


def test_example_3_each_prompt_has_num_generations_completions():
    rows = schedule_table(3, 4, 4, cycles=1)
    flat = [p for row in rows for p in row.prompts]
    assert {p: flat.count(p) for p in set(flat)} == {0: 4, 1: 4, 2: 4}


def test_batch_formulas():
    assert effective_batch_size(3, 2, num_processes=1) == 6
    assert effective_batch_size(4, 8, num_processes=2) == 64
    assert generation_batch_size(3, steps_per_generation=4) == 12
    assert generation_batch_size(3, steps_per_generation=4, num_processes=2) == 24
    assert unique_prompts_per_generation(12, 3) == 4
    assert unique_prompts_per_generation(12, 4) == 3
    assert optimizer_steps_per_generation(4, 2) == 2.0  # the seed's "4 / 2 = 2"
    assert optimizer_steps_per_generation(4, 2, num_iterations=2) == 4.0
    assert optimizer_steps_per_generation(3, 2) == 1.5


def test_validation_messages():
    with pytest.raises(ValueError, match="num_generations=5 does not divide the generation batch of 12"):
        schedule_table(3, 2, 5, steps_per_generation=4)
    with pytest.raises(ValueError, match="per_device_train_batch_size=0"):
        schedule_table(0, 2, 3)
    with pytest.raises(ValueError, match="both set"):
        schedule_table(3, 2, 3, steps_per_generation=4, generation_batch_size=12)
    with pytest.raises(ValueError, match="generation_batch_size=10 is not a multiple of"):
        schedule_table(3, 2, 2, generation_batch_size=10)
    with pytest.raises(ValueError, match="num_generations=5"):
        unique_prompts_per_generation(12, 5)


def test_generation_batch_size_argument_sets_steps():
    rows = schedule_table(3, 2, 3, generation_batch_size=12, cycles=1)
    assert len(rows) == 4 and _as_cycles(rows)[0] == EXAMPLE_1[0]


def test_num_iterations_replays_the_same_micro_batches():
    rows = schedule_table(3, 2, 3, steps_per_generation=2, num_iterations=2, cycles=2)
    assert [row.prompts for row in rows] == [[0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1],
                                            [2, 2, 2], [3, 3, 3], [2, 2, 2], [3, 3, 3]]
    assert [row.iteration for row in rows[:4]] == [0, 0, 1, 1]
    assert [row.optimizer_step for row in rows] == [False, True] * 4


def test_optimizer_steps_straddle_cycles_when_not_aligned():
    # 3 micro-steps per generation, accumulation 2: the second update mixes two cycles
    rows = schedule_table(2, 2, 2, steps_per_generation=3, cycles=2)
    assert [(row.cycle, row.optimizer_step) for row in rows] == [
        (0, False), (0, True), (0, False), (1, True), (1, False), (1, True)]


def test_shuffle_keeps_each_process_multiset():
    plain = schedule_table(3, 2, 3, steps_per_generation=4, cycles=1)
    shuffled = schedule_table(3, 2, 3, steps_per_generation=4, cycles=1, shuffle_seed=0)
    assert sorted(p for r in shuffled for p in r.prompts) == sorted(p for r in plain for p in r.prompts)
    assert [r.prompts for r in shuffled] != [r.prompts for r in plain]


def _trl_emulation(per_device, grad_accum, num_generations, steps, num_processes, num_iterations, cycles):
    """Micro-batches as TRL builds them: its RepeatSampler, a DataLoader-style BatchSampler of
    per_device * steps_per_generation, Accelerate's per-process sharding, and the buffering
    of GRPOTrainer._prepare_inputs (regenerate every steps * num_iterations micro-steps,
    serve slice step % steps), without TRL's shuffle of the buffered completions."""
    import torch
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler
    from trl.trainer.utils import RepeatSampler, split_tensor_dict

    generation_batch = per_device * num_processes * steps
    unique = generation_batch // num_generations
    dataset = list(range(unique * cycles))
    sampler = RepeatSampler(dataset, mini_repeat_count=num_generations, batch_size=unique,
                            repeat_count=num_iterations * steps, shuffle=False)
    batches = BatchSampler(sampler, batch_size=per_device * steps, drop_last=False)
    loaders = [iter(BatchSamplerShard(batches, num_processes=num_processes, process_index=p))
               for p in range(num_processes)]
    buffers = [None] * num_processes
    micro_batches = []
    for step in range(cycles * steps * num_iterations):
        pieces = []
        for p in range(num_processes):
            local = next(loaders[p])  # one local generation batch is fetched every micro-step
            if step % (steps * num_iterations) == 0:
                buffers[p] = split_tensor_dict({"prompt": torch.tensor(local)}, steps)
            pieces.append(buffers[p][step % steps]["prompt"].tolist())
        micro_batches.append(pieces)
    return micro_batches


@pytest.mark.parametrize("per_device, grad_accum, num_generations, steps, num_processes, num_iterations", [
    (3, 2, 3, 4, 1, 1),
    (3, 4, 4, 4, 1, 1),
    (3, 2, 2, 4, 2, 1),
    (2, 1, 4, 3, 2, 2),
    (4, 3, 8, 4, 2, 3),
])
def test_matches_trl_sampler_and_buffering(per_device, grad_accum, num_generations, steps, num_processes,
                                           num_iterations):
    expected = _trl_emulation(per_device, grad_accum, num_generations, steps, num_processes, num_iterations,
                              cycles=2)
    rows = schedule_table(per_device, grad_accum, num_generations, steps_per_generation=steps,
                          num_processes=num_processes, num_iterations=num_iterations, cycles=2)
    assert [row.per_process for row in rows] == expected


def test_schedule_from_config_uses_derived_values():
    from course_lib.algos import GRPOConfig

    config = GRPOConfig(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=3,
                        steps_per_generation=4)
    assert _as_cycles(schedule_from_config(config)) == EXAMPLE_1


def test_format_schedule_text():
    text = format_schedule(schedule_table(3, 2, 3, steps_per_generation=4, cycles=1))
    assert text.splitlines() == [
        "Generation cycle A",
        "step  batch    update",
        "0     [0,0,0]",
        "1     [1,1,1]  -> optimizer step (accumulated 2)",
        "2     [2,2,2]",
        "3     [3,3,3]  -> optimizer step (accumulated 2)",
    ]
    two_processes = format_schedule(schedule_table(1, 1, 2, num_processes=2, num_iterations=2, cycles=2))
    assert "Generation cycle B" in two_processes
    assert "iter" in two_processes.splitlines()[1]
    assert "[0] | [0]" in two_processes


# The config's batch properties and the schedule table count the same micro-steps: the grid
# covers steps_per_generation set, generation_batch_size set, neither, several processes,
# replays, and accumulation that does not divide the generation batch.
CONFIG_GRID = [
    dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=4),
    dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=3, steps_per_generation=4),
    dict(per_device_train_batch_size=2, gradient_accumulation_steps=1, num_generations=4, generation_batch_size=8),
    dict(per_device_train_batch_size=2, gradient_accumulation_steps=3, num_generations=4, num_processes=2,
         steps_per_generation=2),
    dict(per_device_train_batch_size=4, gradient_accumulation_steps=4, num_generations=2, num_iterations=3,
         steps_per_generation=2),
    dict(per_device_train_batch_size=6, gradient_accumulation_steps=1, num_generations=3, num_processes=3,
         generation_batch_size=36, num_iterations=2),
]


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
@pytest.mark.parametrize("settings", CONFIG_GRID, ids=[str(i) for i in range(len(CONFIG_GRID))])
def test_config_batch_properties_count_what_the_schedule_table_lists(algo, settings):
    from course_lib.algos import make_config

    if algo == "rloo" and settings["num_generations"] < 2:
        pytest.skip("RLOO needs two completions per prompt")
    config = make_config(algo, **settings)
    cycles = 6
    rows = schedule_from_config(config, cycles=cycles)
    first = [row for row in rows if row.cycle == 0 and row.iteration == 0]
    assert config.effective_steps_per_generation == len(first)
    assert config.effective_generation_batch_size == sum(len(row.prompts) for row in first)
    assert config.unique_prompts_per_generation == len({p for row in first for p in row.prompts})
    updates = [row.global_step for row in rows if row.optimizer_step]
    assert config.effective_batch_size == sum(len(row.prompts) for row in rows if row.global_step <= updates[0])
    assert config.optimizer_steps_per_generation == pytest.approx(
        (len(rows) / cycles) / config.gradient_accumulation_steps)
    assert config.optimizer_steps_per_generation * cycles == pytest.approx(len(rows) / config.gradient_accumulation_steps)
    if (len(rows) % config.gradient_accumulation_steps) == 0:
        assert len(updates) == config.optimizer_steps_per_generation * cycles
    # the same values from schedule.py's formulas
    assert config.effective_batch_size == effective_batch_size(
        config.per_device_train_batch_size, config.gradient_accumulation_steps, config.num_processes)
    assert config.effective_generation_batch_size == generation_batch_size(
        config.per_device_train_batch_size, config.effective_steps_per_generation, config.num_processes)
    assert config.unique_prompts_per_generation == unique_prompts_per_generation(
        config.effective_generation_batch_size, config.num_generations)
    assert config.optimizer_steps_per_generation == optimizer_steps_per_generation(
        config.effective_steps_per_generation, config.gradient_accumulation_steps, config.num_iterations)
