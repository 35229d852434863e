"""TRL's ways of writing a run: accepted where they mean the same, answered with the course's
equivalent where they do not; and the small things a TRL user trips on (a folder left by a
run that never stepped, a missing model folder, the context-length fix, the doctor's numbers)."""

from __future__ import annotations

import pytest
from datasets import Dataset

from course_lib.algos import GRPOConfig, RLOOConfig
from course_lib.config import apply_overrides
from course_lib.config.tools import UnknownFieldError


@pytest.mark.parametrize("given, field, value", [
    (dict(use_vllm=True), "engine", "vllm"),
    (dict(use_vllm=False), "engine", "hf"),
    (dict(use_cpu=True), "device", "cpu"),
    (dict(no_cuda=True), "device", "cpu"),
])
def test_trl_fields_with_the_same_meaning_are_accepted(given, field, value):
    assert getattr(GRPOConfig(**given), field) == value
    assert getattr(RLOOConfig(**given), field) == value
    key, flag = next(iter(given.items()))
    assert getattr(apply_overrides(GRPOConfig(), [f"{key}={str(flag).lower()}"]), field) == value  # --set


@pytest.mark.parametrize("given, pointer", [
    (dict(bf16=True), r"mixed precision .* Fix: set dtype instead"),
    (dict(fp16=True), r"Fix: set dtype instead"),
    (dict(deepspeed="ds.json"), r"export-trl"),
    (dict(push_to_hub=True), r"upload_folder"),
    (dict(vllm_mode="server"), r"leaves out: Only colocated vLLM"),
    (dict(use_vllm="maybe"), r"True or False"),
])
def test_trl_fields_that_differ_name_the_course_equivalent(given, pointer):
    with pytest.raises(UnknownFieldError, match=pointer) as error:
        GRPOConfig(**given)
    assert "use_lora" not in str(error.value)  # no misleading "did you mean"


def test_use_vllm_and_engine_together_are_one_field_given_twice():
    with pytest.raises(ValueError, match="given twice"):
        GRPOConfig(use_vllm=True, engine="vllm")


@pytest.fixture(scope="module")
def rows():
    return Dataset.from_list([{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)])


def _reward(prompts, completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def test_the_trainer_takes_a_model_name_a_single_reward_and_trls_keywords(rows, tmp_path):
    from course_lib.trainer import Trainer

    config = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1)
    positional = Trainer(config, _reward, rows, "tiny")
    assert positional.reward_funcs == [_reward] and positional.config.model_name_or_path == "tiny"
    keywords = Trainer(model="tiny", reward_funcs=_reward, args=config, train_dataset=rows,
                       processing_class=positional.tokenizer)
    assert keywords.tokenizer is positional.tokenizer  # processing_class is the tokenizer, as in TRL


def test_trls_argument_order_is_answered_with_the_call_to_write(rows):
    from course_lib.trainer import Trainer

    with pytest.raises(TypeError, match=r"Trainer\(config, reward_funcs, train_dataset, model\)"):
        Trainer("tiny", _reward, GRPOConfig(), rows)


def test_correct_fn_without_in_loop_evaluation_warns(rows, tmp_path):
    from course_lib.trainer import Trainer

    config = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1)
    with pytest.warns(UserWarning, match="correct_fn is read only by the evaluation during training"):
        Trainer(config, [_reward], rows, "tiny", correct_fn=lambda completion, answer: True)
    with pytest.raises(ValueError, match=r"cannot be called as _reward\(completion, answer\)"):
        Trainer(config, [_reward], rows, "tiny", correct_fn=_reward)


def test_a_folder_left_by_a_run_that_never_stepped_is_free(tmp_path):
    from course_lib.run.folder import OutputDirError, claim_output_dir

    (tmp_path / "history.jsonl").write_text("")
    with claim_output_dir(tmp_path):
        pass
    assert not (tmp_path / "history.jsonl").exists()
    (tmp_path / "history.jsonl").write_text('{"step": 1}\n')  # a logged step is a run: still refused
    with pytest.raises(OutputDirError, match="is not empty"):
        with claim_output_dir(tmp_path):
            pass


def test_a_missing_local_folder_is_named_as_missing(tmp_path, monkeypatch):
    from course_lib.models import ModelNotAvailableError, resolve_model_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "digits" / "checkpoint-20").mkdir(parents=True)
    with pytest.raises(ModelNotAvailableError, match=r"No model folder at 'runs/digits/checkpoint-100': no such "
                                                     r"folder; runs/digits holds checkpoint-20"):
        resolve_model_path("runs/digits/checkpoint-100")
    with pytest.raises(ModelNotAvailableError, match="runs/nothere'.*no such folder"):
        resolve_model_path("runs/nothere")
    assert resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_the_context_length_fixes_are_the_ones_that_work():
    from course_lib.rollout.base import ContextLengthError, check_context

    # 42 prompt tokens with 100 completion tokens in 128 positions: at most 86 completion tokens fit.
    with pytest.raises(ContextLengthError, match=r"max_prompt_length <= 28 .* or lower max_completion_length to "
                                                 r"at most 86"):
        check_context([[0] * 42], 100, 128)
    # A prompt that fills the positions alone: no completion length helps.
    with pytest.raises(ContextLengthError, match="shorten the prompts") as error:
        check_context([[0] * 130], 8, 128)
    assert "lower max_completion_length" not in str(error.value)


def test_evaluation_names_the_train_option_and_the_length_that_fits():
    from course_lib.evaluation import evaluate_accuracy
    from course_lib.models import load_policy
    from course_lib.rollout.base import ContextLengthError
    from course_lib.common.wording import use_command_line

    model, tokenizer = load_policy("tiny")
    rows = Dataset.from_list([{"prompt": "x" * 100, "answer": "1"}])
    use_command_line(True)
    try:
        with pytest.raises(ContextLengthError, match=r"--set max_completion_length=N \(train\).* to at most 2[0-9]"):
            evaluate_accuracy(model, tokenizer, rows, max_new_tokens=64)
    finally:
        use_command_line(False)


def test_a_reward_constant_within_each_batch_is_not_called_constant():
    from course_lib.doctor.rules import dead_reward_function

    rows = [{"step": i + 1, "rewards/first_char/std": 0.0, "rewards/first_char/mean": m}
            for i, m in enumerate([0.0, 0.0, 0.5, 0.0, 0.5])]
    message = dead_reward_function(rows, {}).message
    assert "always 0.2" not in message and "batch means 0 to 0.5" in message
    rows = [{**r, "rewards/first_char/mean": 0.0} for r in rows]
    assert "first_char (always 0)" in dead_reward_function(rows, {}).message


def test_a_log_file_gets_every_signal_of_the_bar(monkeypatch):
    import io

    from course_lib.run.step_report import bar_postfix

    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal
    row = {"reward": 0.5, "frac_reward_zero_std": 0.25, "entropy": 0.8, "kl": 0.01, "clip_ratio/region_mean": 0.0,
           "completions/clipped_ratio": 0.1, "timing/step_s": 1.5}
    text = bar_postfix(row)
    assert "trunc=0.100" in text and "s/step=1.500" in text


def test_equal_groups_at_trls_learning_rate_name_the_rate_too():
    from course_lib.doctor.rules import zero_spread_groups

    rows = [{"step": i + 1, "frac_reward_zero_std": 1.0, "reward": 0.1} for i in range(5)]
    assert "learning_rate=1e-06 is TRL's default" in zero_spread_groups(rows, {"learning_rate": 1e-6}).message
    assert "learning_rate" not in zero_spread_groups(rows, {"learning_rate": 3e-5}).message.split("Fixes")[0]


def test_train_rows_default_to_a_files_rows_and_export_help_hides_run_only_options(capsys):
    import argparse

    from course_lib.__main__ import build_parser
    from course_lib.cli.train import GENERATED_ROWS, train_rows

    for task, expected in [("rows.jsonl", None), ("gsm8k:mini.jsonl", None), ("arithmetic", GENERATED_ROWS),
                           ("task.py:rows", GENERATED_ROWS)]:
        assert train_rows(argparse.Namespace(train_rows=None, task=task)) == expected
    assert train_rows(argparse.Namespace(train_rows=7, task="rows.jsonl")) == 7
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export-trl", "--help"])
    shown = capsys.readouterr().out
    assert "--rewards" in shown and not any(flag in shown for flag in ("--resume-from", "--overwrite-output-dir",
                                                                       "--eval-n", "--correct"))


def test_the_start_up_line_names_the_settings_and_their_source():
    import argparse

    from course_lib.algos import make_config
    from course_lib.presets import run_settings
    from course_lib.cli.train import describe_settings

    args = argparse.Namespace(model="tiny", task="mine.jsonl", algo="grpo", overrides=["learning_rate=1e-4"],
                              preset=None, max_steps=None)
    config = apply_overrides(make_config("grpo", **run_settings("tiny", "mine.jsonl", "grpo")), args.overrides)
    line = describe_settings(config, args)
    assert line.startswith("settings: learning_rate=0.0001, lr_scheduler_type='constant', "
                           "per_device_train_batch_size=32, num_generations=8, max_completion_length=8")
    assert "measured for tiny with grpo" in line and line.endswith("then --set learning_rate")
    args = argparse.Namespace(model="tiny", task="mine.jsonl", algo="ppo", overrides=[], preset=None, max_steps=None)
    assert "no measured settings for tiny with ppo" in describe_settings(make_config("ppo"), args)
