"""One line that names the file, field or value and the fix, never a traceback or a misleading hint.

- A reward file named after a standard module (``json.py``) is loaded under a private name:
  the standard module stays what it is for the rest of the process.
- A tool result whose ``__str__`` raises, or one nested 100,000 deep, is a failed call with
  its message, as other tool failures are.
- ``doctor`` on a malformed TRL ``trainer_state.json`` names the file and the field.
- ``export-trl --output <a file>``, a bytes column, a scalar ``reward_weights``, a dataset
  column the reward call already passes, a model without its tokenizer, ``get_task(None)``, a
  history row without ``step`` and GSM8K prompts longer than the tiny model reads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_lib.algos import make_config


# ------------------------------------------------------------------ 14. a reward file named json.py
def test_a_reward_file_named_like_a_standard_module_does_not_replace_it(tmp_path):
    from course_lib.common.user_code import resolve_callable

    standard = sys.modules["json"]
    (tmp_path / "json.py").write_text("def r(prompts, completions, **_):\n    return [1.0] * len(completions)\n"
                                      "def dumps(*a, **k):\n    raise RuntimeError('the user file')\n")
    reward = resolve_callable(f"{tmp_path / 'json.py'}:r", what="--rewards")
    assert reward(None, ["a", "b"]) == [1.0, 1.0]
    assert sys.modules["json"] is standard and json.dumps([1]) == "[1]"
    assert sys.path[0] != str(tmp_path)  # a later `import csv` etc. still finds the standard one
    assert resolve_callable(f"{tmp_path / 'json.py'}:r") is reward  # loaded once


# ------------------------------------------------------------------ 15. results that cannot be text
class _Unprintable:
    def __str__(self):
        raise RuntimeError("no text for you")

    __repr__ = __str__


def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("make, pattern", [
    (_Unprintable, r"returned a _Unprintable that cannot be written as text \(RuntimeError: no text for you\)"),
    (lambda: _deep(100_000), r"returned a list that cannot be written as text \(RecursionError"),
], ids=["__str__ raises", "nested 100,000 deep"])
def test_a_result_that_cannot_be_text_is_a_failed_call(make, pattern):
    from course_lib.rollout.tool_calls import ToolCall
    from course_lib.rollout.tools import ToolBox

    def lookup(key: str):
        """Look something up.

        Args:
            key: what
        """
        return make()

    result = ToolBox([lookup], timeout=None).call(ToolCall(name="lookup", arguments={"key": "k"}))
    assert result.failed
    import re

    assert re.search(pattern, result.content), result.content


def test_an_exception_whose_str_raises_is_a_failed_call():
    from course_lib.rollout.tool_calls import ToolCall
    from course_lib.rollout.tools import ToolBox

    class Odd(Exception):
        def __str__(self):
            raise ValueError("nope")

    def broken(key: str):
        """Fail oddly.

        Args:
            key: what
        """
        raise Odd()

    result = ToolBox([broken], timeout=None).call(ToolCall(name="broken", arguments={"key": "k"}))
    assert result.failed and "Odd" in result.content


# ------------------------------------------------------------------ 16. malformed TRL state files
@pytest.mark.parametrize("log_history, field", [
    ("not a list", r"log_history is str"),
    ([{"step": 1, "loss": 0.5}, 7], r"log_history\[1\] is int"),
    ([{"step": None, "loss": 0.5}], r"log_history\[0\]\.step is NoneType"),
    ([{"step": [1], "loss": 0.5}], r"log_history\[0\]\.step is list"),
    ([{"step": 1, "loss": "0.5"}, {"step": 2, "loss": 0.4}], r"log_history\[0\]\.loss is str '0\.5', not a number"),
], ids=["history a string", "entry an int", "step None", "step a list", "loss a string"])
def test_doctor_names_the_file_and_field_of_a_malformed_trl_state(tmp_path, log_history, field):
    from course_lib.doctor.report import doctor_run

    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": log_history}))
    with pytest.raises(ValueError, match=rf"{state}: {field}.*Fix:"):
        doctor_run(tmp_path)


def test_doctor_names_a_state_file_that_is_not_json(tmp_path):
    from course_lib.doctor.report import doctor_run

    (tmp_path / "trainer_state.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"trainer_state\.json: not a JSON file .*Fix:"):
        doctor_run(tmp_path)


def test_doctor_names_a_history_row_with_a_bad_step(tmp_path):
    from course_lib.doctor.report import doctor_run

    (tmp_path / "history.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": "2", "loss": 0.4}\n')
    with pytest.raises(ValueError, match=r"history\.jsonl: row 2 has step='2', not a whole number"):
        doctor_run(tmp_path)


# ------------------------------------------------------------------ 17 / 18. export
@pytest.fixture(scope="module")
def export_config(tmp_path_factory):
    return make_config("grpo", model_name_or_path="tiny", per_device_train_batch_size=4, num_generations=2,
                       max_completion_length=4, max_steps=2, save_steps=0,
                       output_dir=str(tmp_path_factory.mktemp("ours")))


def test_export_to_an_existing_file_is_one_line(tmp_path, export_config, capsys):
    from course_lib.__main__ import main
    from course_lib.data import get_task
    from course_lib.cli.export_trl import export_run

    target = tmp_path / "a_file"
    target.write_text("keep me")
    with pytest.raises(ValueError, match=r"is an existing file, not a folder\. Fix:"):
        export_run(export_config, ["format_reward"], get_task("arithmetic", n=4, seed=0), target, copy_model=False)
    code = main(["export-trl", "--model", "tiny", "--task", "arithmetic", "--output", str(target)])
    error = capsys.readouterr().err
    assert code == 2 and error.startswith("error: ") and "existing file" in error and "Traceback" not in error
    assert target.read_text() == "keep me"


def test_export_names_a_column_json_cannot_hold(tmp_path, export_config):
    from datasets import Dataset

    from course_lib.cli.export_trl import export_run

    rows = Dataset.from_dict({"prompt": ["1+1?", "2+2?"], "answer": ["2", "4"], "blob": [b"\x00\x01", b"\x02"]})
    with pytest.raises(ValueError, match=r"dataset row 0, column 'blob' holds a bytes .*Fix:"):
        export_run(export_config, ["format_reward"], rows, tmp_path / "out", copy_model=False)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ 18. other unclear errors
def test_a_scalar_reward_weight_asks_for_a_list():
    with pytest.raises(ValueError) as refused:
        make_config("grpo", model_name_or_path="tiny", reward_weights=1.0)
    message = str(refused.value)
    assert "reward_weights=[1.0]" in message and "whole number" not in message


@pytest.mark.parametrize("column", ["completion_ids", "completions", "prompts"])
def test_a_column_the_reward_call_passes_is_refused_up_front(tmp_path, column):
    from datasets import Dataset

    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    model, tokenizer = load_policy("tiny")
    rows = Dataset.from_dict({"prompt": ["1+1?"] * 4, "answer": ["2"] * 4, column: [[1]] * 4})
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=4)
    with pytest.raises(ValueError, match=rf"train_dataset has a column named '{column}'.*Fix: rename the column"):
        Trainer(config, get_reward_functions(["format_reward"]), rows, model, tokenizer, progress=False)


def test_a_model_without_its_tokenizer_is_refused(tmp_path):
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    model, _ = load_policy("tiny")
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=4)
    with pytest.raises(ValueError, match=r"tokenizer=None.*Fix: pass the model's tokenizer"):
        Trainer(config, get_reward_functions(["format_reward"]), get_task("arithmetic", n=8), model, None)


@pytest.mark.parametrize("name", [None, 3, ["arithmetic"]])
def test_get_task_of_a_non_name(name):
    from course_lib.data import get_task

    with pytest.raises(ValueError, match=r"get_task: name=.* is a \w+, not a task name\. Fix:"):
        get_task(name)


def test_a_history_row_without_step_names_the_file_on_resume(tmp_path):
    from tiny_runs import tiny_trainer

    run = tiny_trainer(tmp_path, max_steps=1, save_steps=1)
    run.train()
    history = tmp_path / "checkpoint-1" / "history.jsonl"
    history.write_text('{"loss": 0.5}\n')
    resumed = tiny_trainer(tmp_path, max_steps=2, save_steps=1)
    with pytest.raises(ValueError) as refused:
        resumed.train(resume_from="latest")
    message = str(refused.value)
    assert str(history) in message and "'step'" in message and "Fix:" in message


def test_gsm8k_evaluation_in_train_cuts_prompts_as_training_does():
    from course_lib.models import load_policy
    from course_lib.rollout.base import ContextLengthError
    from course_lib.cli.train import _evaluate

    data = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k"
    if not (data / "test.jsonl").is_file():
        pytest.skip(f"needs the GSM8K files at {data}")
    model, tokenizer = load_policy("tiny")  # reads at most 128 positions; GSM8K prompts are longer
    args = argparse.Namespace(task=f"gsm8k:{data}", eval_n=2, correct=None)
    untrimmed = SimpleNamespace(model=model, tokenizer=tokenizer,
                                config=SimpleNamespace(max_completion_length=4, max_prompt_length=None))
    with pytest.raises(ContextLengthError) as refused:
        _evaluate(untrimmed, args)
    message = str(refused.value)
    assert "--max-new-tokens" not in message and "max_prompt_length" in message and "max_completion_length" in message
    trimmed = SimpleNamespace(model=model, tokenizer=tokenizer,
                              config=SimpleNamespace(max_completion_length=4, max_prompt_length=64))
    assert 0.0 <= _evaluate(trimmed, args) <= 1.0
