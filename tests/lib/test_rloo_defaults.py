"""Switching GRPO to RLOO is like for like: RLOO's defaults are TRL 1.16's ``RLOOConfig`` defaults,
read from the installed TRL; the older RLOOTrainer's defaults are the named preset
``older_trl_rloo``, on the command line too."""

from __future__ import annotations

import dataclasses

import pytest

from course_lib.algos import make_config
from course_lib.algos.rloo import RLOOConfig

SHARED = ("num_generations", "beta", "num_iterations", "temperature", "epsilon", "epsilon_high", "top_p",
          "learning_rate", "max_grad_norm", "mask_truncated_completions")


def _trl_defaults() -> dict:
    from trl import RLOOConfig as TRLRLOOConfig

    return {f.name: f.default for f in dataclasses.fields(TRLRLOOConfig) if f.default is not dataclasses.MISSING}


@pytest.mark.parametrize("name", SHARED)
def test_rloo_defaults_are_trl_1_16s(name):
    assert getattr(RLOOConfig(), name) == _trl_defaults()[name], name


def test_the_older_trainers_defaults_are_a_named_preset_and_values_still_win():
    older = make_config("rloo", preset="older_trl_rloo")
    assert (older.beta, older.num_iterations, older.temperature) == (0.05, 4, 0.7)
    assert make_config("rloo", preset="older_trl_rloo", num_ppo_epochs=2).num_iterations == 2
    with pytest.raises(ValueError, match=r"preset='older_trl_rloo' is for 'rloo', not 'grpo'"):
        make_config("grpo", preset="older_trl_rloo")
    with pytest.raises(ValueError, match=r"Did you mean 'older_trl_rloo'\?"):
        make_config("rloo", preset="older_trl_rlo")


def test_the_command_line_takes_the_preset_and_set_wins(tmp_path):
    from course_lib.__main__ import build_parser
    from course_lib.cli.train import build_run

    args = build_parser().parse_args(["train", "--algo", "rloo", "--model", "tiny", "--preset", "older_trl_rloo",
                                      "--set", "temperature=0.9", "--train-rows", "8",
                                      "--output-dir", str(tmp_path / "r")])
    config, _, _ = build_run(args)
    assert (config.num_iterations, config.beta, config.temperature) == (4, 0.05, 0.9)


@pytest.mark.parametrize("spelling", [(-1.0, 1.0), [-1.0, 1.0]])
def test_trls_min_max_reward_clip_range_is_refused_with_the_difference_named(spelling):
    """TRL 1.16's reward_clip_range is a (min, max) clip of the raw rewards; the course's is the older
    trainer's +-c on normalized scores. The pair must not die on a bare 'not float' type error."""
    with pytest.raises(ValueError) as caught:
        make_config("rloo", reward_clip_range=spelling)
    message = str(caught.value)
    assert "reward_clip_range" in message and "(min, max)" in message and "raw rewards" in message
    assert "normalize_reward=True" in message and "not float" not in message
