"""DAPO's dynamic sampling: groups with equal rewards dropped and refilled (hand-worked cases),
off = the trainer as it was, on with no zero-spread group = the same batch."""

import math

import pytest
import torch

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.rollout.base import RolloutBatch
from course_lib.run.dynamic_sampling import Sampled, concat_sampled, fill_groups, zero_spread_groups
from course_lib.run.history import WALL_CLOCK_KEYS
from course_lib.config.trl_fields import COURSE_ONLY, trl_grpo_fields
from course_lib.trainer import Trainer


def test_zero_spread_groups_ignore_nan_and_treat_all_nan_as_equal():
    total = torch.tensor([1.0, 1.0, 0.0, 1.0, float("nan"), 2.0, 2.0, float("nan"), float("nan"), float("nan")])
    # groups of 2: [1,1] equal, [0,1] spread, [nan,2] one value: equal, [2,nan] equal, [nan,nan] equal
    assert zero_spread_groups(total, 2).tolist() == [True, False, True, True, True]


def _round(rewards, prompt_width, completion_width, G=2, tag=0):
    B = len(rewards)
    rollout = RolloutBatch(prompt_ids=torch.full((B, prompt_width), 7 + tag), prompt_mask=torch.ones(B, prompt_width,
                                                                                                       dtype=torch.long),
                           completion_ids=torch.full((B, completion_width), 9 + tag),
                           completion_mask=torch.ones(B, completion_width, dtype=torch.long),
                           is_eos=torch.ones(B, dtype=torch.bool), texts=[f"{tag}:{i}" for i in range(B)],
                           sampling_logps=torch.full((B, completion_width), -0.5))
    total = torch.tensor(rewards, dtype=torch.float32)
    return Sampled(list(range(100 * tag, 100 * tag + B)), [f"p{tag}"] * B, {"answer": [str(tag)] * B}, rollout,
                   total.unsqueeze(1), total)


def test_a_first_round_without_zero_spread_groups_is_returned_as_it_is():
    first = _round([0.0, 1.0, 1.0, 0.0], 3, 4)
    batch, metrics, tokens = fill_groups(lambda r: first, groups=2, num_generations=2, max_rounds=5, pad_id=0)
    assert batch is first and metrics["dynamic_sampling/num_gen_batches"] == 1.0
    assert metrics["dynamic_sampling/groups_dropped"] == 0.0 and tokens == 4 * 3 + 4 * 4


def test_dropped_groups_are_refilled_from_the_next_rounds_with_padding_aligned():
    rounds = [_round([1.0, 1.0, 0.0, 1.0], 3, 4, tag=0),   # group 0 equal: dropped; group 1 kept
              _round([0.0, 0.0, 0.0, 0.0], 5, 2, tag=1),   # both equal: dropped
              _round([1.0, 0.0, 0.5, 0.5], 2, 6, tag=2)]   # group 0 kept (the batch is full), group 1 equal
    batch, metrics, tokens = fill_groups(lambda r: rounds[r], groups=2, num_generations=2, max_rounds=5, pad_id=0)
    assert batch.total.tolist() == [0.0, 1.0, 1.0, 0.0]
    assert batch.rows == [2, 3, 200, 201] and batch.rollout.texts == ["0:2", "0:3", "2:0", "2:1"]
    assert batch.columns == {"answer": ["0", "0", "2", "2"]}
    # Prompts left-padded to width 3, completions right-padded to width 6 (pad id 0, mask 0).
    assert batch.rollout.prompt_ids.tolist()[2] == [0, 9, 9] and batch.rollout.prompt_mask.tolist()[2] == [0, 1, 1]
    assert batch.rollout.completion_ids.tolist()[0] == [9, 9, 9, 9, 0, 0]
    assert batch.rollout.completion_mask.tolist()[0] == [1, 1, 1, 1, 0, 0]
    assert batch.rollout.sampling_logps.tolist()[0] == [-0.5] * 4 + [0.0, 0.0]
    # Zero-spread groups seen: 1 + 2 + 1 of 6 sampled.
    assert metrics == {"dynamic_sampling/num_gen_batches": 3.0, "dynamic_sampling/groups_dropped": 4.0,
                       "dynamic_sampling/frac_reward_zero_std_sampled": 4 / 6,
                       "dynamic_sampling/groups_refilled_with_zero_spread": 0.0}
    assert tokens == 4 * (3 + 4) + 4 * (5 + 2) + 4 * (2 + 6)


def test_at_the_cap_the_batch_is_completed_with_zero_spread_groups():
    rounds = [_round([1.0, 1.0, 0.0, 1.0], 3, 4, tag=0), _round([0.0, 0.0, 2.0, 2.0], 3, 4, tag=1)]
    batch, metrics, _ = fill_groups(lambda r: rounds[r], groups=2, num_generations=2, max_rounds=2, pad_id=0)
    assert batch.rows == [2, 3, 0, 1]  # the kept group, then the first dropped one
    assert metrics["dynamic_sampling/groups_refilled_with_zero_spread"] == 1.0


def test_concat_of_one_part_is_the_part():
    part = _round([0.0, 1.0], 3, 4)
    assert torch.equal(concat_sampled([part], 0).rollout.completion_ids, part.rollout.completion_ids)


def _trainer(tmp_path, rewards, **overrides):
    model, tokenizer = load_policy("tiny")
    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), per_device_train_batch_size=16,
                    num_generations=4, max_completion_length=6, learning_rate=3e-5, max_steps=4, save_steps=0, seed=0,
                    doctor="off")
    settings.update(overrides)
    return Trainer(make_config("grpo", **settings), rewards, get_task("arithmetic", split="train", n=200, seed=0),
                   model, tokenizer, progress=False)


def _position_reward(prompts, completions, **kwargs):
    """Different for every completion of a group: no group is ever zero-spread."""
    return [float(i) for i in range(len(completions))]


def test_on_with_no_zero_spread_group_trains_exactly_as_off(tmp_path):
    off = _trainer(tmp_path / "off", [_position_reward])
    on = _trainer(tmp_path / "on", [_position_reward], dynamic_sampling=True)
    rows_off, rows_on = off.train(), on.train()
    strip = lambda r: {k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS and not k.startswith("dynamic_")}  # noqa: E731
    assert [strip(r) for r in rows_on] == [strip(r) for r in rows_off]
    assert all(r["dynamic_sampling/num_gen_batches"] == 1.0 for r in rows_on)
    for a, b in zip(off.model.parameters(), on.model.parameters()):
        assert torch.equal(a, b)


def test_on_fills_the_batch_with_groups_that_differ(tmp_path):
    trainer = _trainer(tmp_path, get_reward_functions(["correctness_first_number_reward"]), dynamic_sampling=True,
                       max_num_gen_batches=8)
    rows = trainer.train()
    assert any(r["dynamic_sampling/groups_dropped"] > 0 for r in rows)
    for r in rows:
        if r["dynamic_sampling/groups_refilled_with_zero_spread"] == 0:
            assert r["frac_reward_zero_std"] == 0.0  # every group kept has a spread
    assert rows[-1]["num_tokens"] > 0 and all(math.isfinite(r["loss"]) for r in rows)


def test_a_constant_reward_stops_at_the_cap(tmp_path):
    from course_lib.museum import constant_reward

    rows = _trainer(tmp_path, [constant_reward], dynamic_sampling=True, max_num_gen_batches=3, max_steps=1).train()
    assert rows[0]["dynamic_sampling/num_gen_batches"] == 3.0
    assert rows[0]["dynamic_sampling/groups_refilled_with_zero_spread"] == 4.0  # 16 rows / G=4


def test_bad_settings_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="max_num_gen_batches"):
        make_config("grpo", max_num_gen_batches=0)
    with pytest.raises(ValueError, match="dynamic_sampling"):
        make_config("grpo", dynamic_sampling=True, num_processes=2)


def test_trl_has_no_dynamic_sampling_and_the_field_list_says_so():
    assert {"dynamic_sampling", "max_num_gen_batches"} <= set(COURSE_ONLY)
    assert not set(COURSE_ONLY) & set(trl_grpo_fields())
