"""The loop's resumable state (course_lib.run.loop_state): one object, saved in the layout checkpoints always had."""

from __future__ import annotations

from course_lib.run.batches import PromptSampler
from course_lib.run.checkpoint import trainer_state_problem
from course_lib.run.loop_state import LoopState

# trainer_state.json of a checkpoint written before the loop's state was one object: the counters and the
# sampler's position were top-level entries, beside the algorithm's name and state, the config and the rows.
OLD_LAYOUT = {"step": 3, "micro_step": 6, "cycle": 2, "tokens_seen": 912, "batch_position": 2,
              "sampler": {"epoch": 1, "position": 4}, "algo": "grpo", "algorithm_state": {}, "config": {}, "run": {}}


def test_the_counters_are_the_entries_checkpoints_always_held():
    state = LoopState(PromptSampler(10, seed=5))
    state.sampler.take(14)  # one epoch and 4 rows into the next
    state.step, state.micro_step, state.cycle, state.tokens_seen, state.batch_position = 3, 6, 2, 912, 2
    saved = state.counters()
    assert saved == {k: OLD_LAYOUT[k] for k in ("step", "micro_step", "cycle", "tokens_seen", "batch_position",
                                                "sampler")}
    assert trainer_state_problem(saved) is None  # what the checkpoint reader checks before a resume
    assert state.in_flight() is None  # no batch drawn: no rollout file


def test_an_old_checkpoint_restores_the_counters_and_the_samplers_next_rows():
    uninterrupted = PromptSampler(10, seed=5)
    uninterrupted.take(14)
    state = LoopState(PromptSampler(10, seed=5))
    batch, samples = object(), (["p"], ["c"], [1.0], [0.5])
    state.restore(OLD_LAYOUT, {"batch": batch, "samples": samples})
    assert (state.step, state.micro_step, state.cycle, state.tokens_seen, state.batch_position) == (3, 6, 2, 912, 2)
    assert state.sampler.take(9) == uninterrupted.take(9)  # the same permutation, from the same place
    assert state.batch is batch and state.last_samples == samples
    assert state.weights_dirty  # the engine gets the restored weights before it samples again
    assert not state.needs_batch(micro_steps_per_cycle=4) and state.needs_batch(micro_steps_per_cycle=2)


def test_a_window_is_open_between_the_micro_steps_of_one_optimizer_step():
    state = LoopState(PromptSampler(4, seed=0))
    assert state.between_steps(gradient_accumulation_steps=2)
    state.micro_step, state.window = 1, [{"loss": 1.0}]
    assert not state.between_steps(gradient_accumulation_steps=2)
    state.micro_step, state.window = 2, []
    assert state.between_steps(gradient_accumulation_steps=2)
    assert state.epoch() == 0.0
