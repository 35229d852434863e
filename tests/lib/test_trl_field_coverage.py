"""Every field of TRL 1.16's `GRPOConfig` is supported or deliberately left out, with a reason."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from course_lib.algos import GRPOConfig
from course_lib.config.trl_fields import LEFT_OUT, RENAMED, coverage, trl_grpo_fields

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl = pytest.importorskip("trl")


def test_every_trl_field_is_supported_or_left_out_with_a_reason():
    result = coverage(GRPOConfig)
    assert len(trl_grpo_fields()) == 77  # TRL 1.16
    assert result["unaccounted"] == [], (
        f"TRL fields neither supported nor in course_lib/config/trl_fields.py LEFT_OUT: {result['unaccounted']}")
    assert len(result["supported"]) >= 60, len(result["supported"])
    assert all(len(reason) > 20 for reason in LEFT_OUT.values())
    # nothing is both supported and listed as left out, and the lists name real TRL fields
    assert not set(result["supported"]) & set(LEFT_OUT)
    assert set(LEFT_OUT) | set(RENAMED) <= set(trl_grpo_fields())


def test_supported_fields_share_trl_defaults_and_reach_trl():
    """Same-named fields keep TRL's default, and `to_trl_grpo_config` passes a changed value through."""
    ours = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    theirs = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    # Where our default differs from TRL's, on purpose (documented on the field).
    deliberate = {"top_k": "None means disabled (TRL: 0)", "vllm_importance_sampling_correction":
                  "None = on exactly with vLLM", "vllm_importance_sampling_cap": "moved to clip_max at once"}

    def default(f):
        return f.default_factory() if f.default is dataclasses.MISSING else f.default

    for name in coverage(GRPOConfig)["supported"]:
        if name in RENAMED or name in deliberate:
            continue
        assert default(ours[name]) == default(theirs[name]), name
    config = GRPOConfig(output_dir="/tmp/course-trl-fields", dtype="float32", shuffle_dataset=False,
                        disable_dropout=True, num_generations_eval=4, chat_template_kwargs={"enable_thinking": False},
                        sync_ref_model=True, beta=0.04, ref_model_sync_steps=8, vespo_lambda_neg=1.5,
                        cache_implementation="static", log_unique_prompts=True, entropy_coef_max=0.5)
    converted = config.to_trl_grpo_config()
    for name in ("shuffle_dataset", "disable_dropout", "num_generations_eval", "chat_template_kwargs",
                 "sync_ref_model", "ref_model_sync_steps", "vespo_lambda_neg", "cache_implementation",
                 "log_unique_prompts", "entropy_coef_max"):
        assert getattr(converted, name) == getattr(config, name), name


def test_list_fields_prints_every_supported_field(capsys):
    import argparse

    from course_lib.cli.train import add_train_arguments, run_train

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert run_train(parser.parse_args(["--list-fields"])) == 0
    printed = {line.split(" = ")[0] for line in capsys.readouterr().out.splitlines() if " = " in line}
    supported = coverage(GRPOConfig)["supported"]
    assert {RENAMED.get(name, name) for name in supported} <= printed


def test_dict_fields_are_set_from_the_command_line_as_json():
    from course_lib.config import apply_overrides

    config = apply_overrides(GRPOConfig(), ['chat_template_kwargs={"enable_thinking": false}',
                                            'generation_kwargs={"suppress_tokens": [3]}'])
    assert config.chat_template_kwargs == {"enable_thinking": False}
    assert config.generation_kwargs == {"suppress_tokens": [3]}
    with pytest.raises(ValueError, match=r"chat_template_kwargs='\[1, 2\]' does not fit.*Fix:"):
        apply_overrides(GRPOConfig(), ["chat_template_kwargs=[1, 2]"])
