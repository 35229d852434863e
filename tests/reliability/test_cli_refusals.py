"""Inputs a user can get wrong end in one ``error:`` line naming the cause and the fix, never a traceback.

Each case runs ``python -m course_lib ...`` in this process (``course_lib.__main__.main``) and
checks the exit code, that stderr holds exactly one line starting with ``error:``, that it
matches what the case expects, and that no traceback was printed. The library-level
refusals behind them (the data file reader, the config, the trainer's dataset check) are
checked directly at the end.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from course_lib.__main__ import main
from course_lib.algos import make_config
from course_lib.data import DataError, load_gsm8k
from course_lib.tiny import TINY_DIR

TRAIN = ["train", "--model", "tiny", "--max-steps", "1", "--train-rows", "8", "--set", "per_device_train_batch_size=4",
         "--set", "num_generations=4", "--set", "max_completion_length=4", "--set", "save_steps=1"]


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse refusals
        code = exit_.code
    err = capsys.readouterr().err
    return code, err


def _one_error_line(argv, capsys, pattern: str) -> str:
    code, err = _run(argv, capsys)
    assert "Traceback" not in err, err[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("error:") or ": error:" in line]
    assert code == 2 and len(errors) == 1, (code, err[-2000:])
    assert re.search(pattern, errors[0]), errors[0][:1000]
    assert len(errors[0]) < 1500, "the error line repeats a huge input"
    return err


# ------------------------------------------------------------------------------ model folders


def _tiny_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(TINY_DIR, folder)
    return folder


def _nan_weights(tmp_path: Path) -> Path:
    folder = _tiny_copy(tmp_path)
    weights = load_file(folder / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = math.nan
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def _other_shapes(tmp_path: Path) -> Path:
    folder = _tiny_copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] += 8
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("command", ["eval", "train"])
def test_nan_weights_in_a_model_folder(tmp_path, capsys, command):
    folder = _nan_weights(tmp_path)
    argv = (["eval", "--model", str(folder), "--n", "2"] if command == "eval"
            else [*TRAIN[:1], "--model", str(folder), *TRAIN[3:], "--output-dir", str(tmp_path / "run")])
    _one_error_line(argv, capsys, r"hold NaN or infinity")


#: Runs each ``python -m course_lib`` command given as JSON ``{name: argv}`` through ``main``, in order,
#: each after a line ``=== name`` on stderr; prints the exit codes as JSON.
COMMANDS_IN_ONE_CHILD = """
import json, sys
from course_lib.__main__ import main

codes = {}
for name, argv in json.loads(sys.argv[1]).items():
    print(f"=== {name}", file=sys.stderr, flush=True)
    try:
        codes[name] = main(argv)
    except SystemExit as exit_:  # argparse refusals
        codes[name] = exit_.code
    sys.stderr.flush()
print(json.dumps(codes))
"""


def test_weights_that_do_not_fit_the_config(tmp_path):
    """``eval`` and ``train`` on a model folder whose weights have other shapes than its
    config.json. In a child process: transformers prints its load report through a logging
    handler bound to the first stderr it saw, which pytest's capture replaces between tests.
    One child runs both commands, as this file runs the others, through ``main``; each
    command's stderr is what it printed after its ``=== <command>`` line."""
    import subprocess
    import sys

    folder = _other_shapes(tmp_path)
    commands = {"eval": ["eval", "--model", str(folder), "--n", "2"],
                "train": [*TRAIN[:1], "--model", str(folder), *TRAIN[3:], "--output-dir", str(tmp_path / "run")]}
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", COMMANDS_IN_ONE_CHILD, json.dumps(commands)], capture_output=True,
                            text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    codes = json.loads(result.stdout.splitlines()[-1])
    parts = re.split(r"^=== (\w+)\n", result.stderr, flags=re.M)[1:]
    stderr = dict(zip(parts[::2], parts[1::2]))
    assert list(codes) == list(stderr) == list(commands), result.stderr[-2000:]
    for command in commands:
        errors = [line for line in stderr[command].splitlines() if line.startswith("error:")]
        assert codes[command] == 2 and len(errors) == 1, (command, stderr[command][-2000:])
        assert "do not fit its config.json" in errors[0]


def test_a_resumed_checkpoint_of_another_shape(tmp_path, capsys):
    run = tmp_path / "run"
    assert _run([*TRAIN, "--output-dir", str(run)], capsys)[0] == 0
    from course_lib.models import load_policy

    model, _ = load_policy(TINY_DIR)
    state = {k: v.clone() for k, v in model.state_dict().items() if "lm_head" not in k}
    name = next(k for k in state if "mlp" in k and k.endswith("weight"))
    state[name] = torch.zeros(state[name].shape[0] + 1, *state[name].shape[1:])
    save_file(state, run / "checkpoint-1" / "model" / "model.safetensors", metadata={"format": "pt"})
    _one_error_line([*TRAIN[:4], "2", *TRAIN[5:], "--output-dir", str(run), "--resume-from", "latest"], capsys,
                    r"model weights do not fit this model")


# ------------------------------------------------------------------------------ data files


def _gsm8k_folder(tmp_path: Path, train_rows: list, test_rows: list | None = None) -> Path:
    folder = tmp_path / "gsm8k"
    folder.mkdir(exist_ok=True)
    good = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(12)]
    test_rows = test_rows if test_rows is not None else good[:4]
    for split, rows in (("train", [*good[4:], *train_rows]), ("test", test_rows)):
        lines = [r if isinstance(r, (str, bytes)) else json.dumps(r) for r in rows]
        (folder / f"{split}.jsonl").write_bytes(b"\n".join(l if isinstance(l, bytes) else l.encode() for l in lines))
    return folder


@pytest.mark.parametrize("row, pattern", [
    ({"question": None, "answer": "#### 3"}, r"train\.jsonl: line 9: question=None is not text"),
    ({"question": "q", "answer": "so it is\n#### banana"}, r"line 9: the final answer 'banana' .* is not a number"),
    ('{"question": "q", "answer": NaN}', r"line 9: answer=nan is not text"),
    ({"question": "q", "answer": ["#### 3"]}, r"line 9: answer=\['#### 3'\] is not text"),
    (b'{"question": "caf\xe9", "answer": "#### 3"}', r"line 9 is not UTF-8 text"),
])
def test_a_bad_gsm8k_row_is_named_by_file_and_line(tmp_path, capsys, row, pattern):
    folder = _gsm8k_folder(tmp_path, [row])
    _one_error_line([*TRAIN, "--task", f"gsm8k:{folder}", "--output-dir", str(tmp_path / "run")], capsys, pattern)


def test_a_gsm8k_folder_whose_test_rows_are_train_rows(tmp_path, capsys):
    rows = [{"question": f"What is {i} + 2?", "answer": f"#### {i + 2}"} for i in range(8)]
    folder = _gsm8k_folder(tmp_path, rows, test_rows=rows)
    (folder / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    _one_error_line(["eval", "--model", "tiny", "--task", f"gsm8k:{folder}", "--n", "2"], capsys,
                    r"every test question is also in .*train\.jsonl")


# ------------------------------------------------------------------------------ arguments


def test_a_value_nested_100k_deep(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    for field in ("generation_kwargs", "reward_weights"):
        _one_error_line([*TRAIN, "--set", f"{field}={deep}", "--output-dir", str(tmp_path / "run")], capsys,
                        rf"{field}=.*\(200000 characters\)")


def test_an_output_path_of_5000_characters(tmp_path, capsys):
    _one_error_line([*TRAIN, "--output-dir", str(tmp_path / ("x" * 5000))], capsys,
                    r"cannot create output_dir=.*\(\d+ characters\).*shorter path")


def test_an_output_dir_holding_nul(tmp_path, capsys):
    _one_error_line([*TRAIN, "--output-dir", str(tmp_path / "a\0b")], capsys, r"output_dir=.*NUL character")


def test_build_tiny_into_a_file_or_with_no_steps(tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("x")
    _one_error_line(["build-tiny", "--output-dir", str(file)], capsys, r"is a file, not a folder")
    for steps in ("0", "-3"):
        _one_error_line(["build-tiny", "--steps", steps, "--output-dir", str(tmp_path / "t")], capsys,
                        r"argument --steps: -?\d+ is below 1")


@pytest.mark.parametrize("extra, pattern", [
    (["--rewards", ""], r"--rewards '' names no reward function"),
    (["--rewards", ","], r"--rewards ',' names no reward function"),
    (["--resume-from", ""], r"--resume-from '' names no checkpoint"),
    (["--set", "num_processes=2"], r"--set num_processes=2 conflicts with the processes that run \(this command "
                                   r"starts --num-processes 1\)"),
    (["--set", "use_lora=true", "--set", "lora_target_modules=[]"], r"lora_target_modules=\[\] is empty"),
])
def test_arguments_that_would_be_misread(tmp_path, capsys, extra, pattern):
    _one_error_line([*TRAIN, *extra, "--output-dir", str(tmp_path / "run")], capsys, pattern)


def test_set_num_processes_is_the_outside_launchers_count(tmp_path, capsys, monkeypatch):
    """``accelerate launch ... train --set num_processes=2`` (README) stays valid; a count other than the
    launcher's is refused."""
    from course_lib.cli.train import add_train_arguments, check_run_arguments
    import argparse

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    check_run_arguments(parser.parse_args(["--set", "num_processes=2"]))
    with pytest.raises(ValueError, match=r"the launcher started WORLD_SIZE=2"):
        check_run_arguments(parser.parse_args(["--set", "num_processes=4"]))


def test_a_one_process_checkpoint_resumed_on_two_processes(tmp_path, capsys):
    run = tmp_path / "run"
    assert _run([*TRAIN, "--output-dir", str(run)], capsys)[0] == 0
    _one_error_line([*TRAIN[:4], "2", *TRAIN[5:], "--output-dir", str(run), "--resume-from", "latest",
                     "--num-processes", "2"], capsys, r"num_processes: 1 in the checkpoint, 2 now")


def test_more_processes_than_cores_warns(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("someone else's")  # refused after the warning: nothing is launched
    err = _one_error_line([*TRAIN, "--output-dir", str(run), "--num-processes", str((os.cpu_count() or 1) + 1)],
                          capsys, r"is not empty")
    assert re.search(r"warning: --num-processes \d+ on a machine with \d+ CPU cores", err)


# ------------------------------------------------------------------------------ library refusals


def test_the_trainer_refuses_rows_it_cannot_prompt_with():
    from datasets import Dataset

    from course_lib.trainer import Trainer

    config = make_config("grpo", max_steps=1, per_device_train_batch_size=4, num_generations=4)
    reward = [lambda prompts, completions, **k: [0.0] * len(completions)]
    good = {"role": "user", "content": "2+2?"}
    cases = {
        "is a list, not a datasets.Dataset": [{"prompt": [good]}] * 4,
        "message 0 has no 'role'": Dataset.from_list([{"prompt": [{"content": "2+2?"}]}] * 4),
        "message 0 has content=None": Dataset.from_list([{"prompt": [{"role": "user", "content": None}]}] * 4),
    }
    for message, dataset in cases.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            Trainer(config, reward, dataset)


def test_a_tests_cell_holding_a_dict_is_refused():
    from course_lib.rewards.execution import parse_tests

    with pytest.raises(ValueError, match="must be a list of tests"):
        parse_tests({"assert f(1) == 2": True})


def test_a_gsm8k_test_file_sharing_some_questions_warns(tmp_path):
    rows = [{"question": f"What is {i} + 2?", "answer": f"#### {i + 2}"} for i in range(8)]
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:6]))
    (folder / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows[4:]))
    with pytest.warns(UserWarning, match=r"2 of 4 test questions are also in train\.jsonl"):
        load_gsm8k(folder, split="test")
    with pytest.raises(DataError):
        (folder / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:2]))
        load_gsm8k(folder, split="test")


def test_eval_refuses_what_the_model_cannot_read(tmp_path, capsys):
    # The tiny model reads 128 positions.
    _one_error_line(["eval", "--model", "tiny", "--n", "2", "--max-new-tokens", "100000"], capsys,
                    r"needs 100\d\d\d positions, but the model reads at most 128")
    long_question = {"question": "How many apples? " + "There are many apples in the basket. " * 40,
                     "answer": "#### 3"}
    folder = _gsm8k_folder(tmp_path, [], test_rows=[long_question])
    _one_error_line(["eval", "--model", "tiny", "--task", f"gsm8k:{folder}", "--n", "1"], capsys,
                    r"prompt 0 has \d+ tokens.*at most 128")


@pytest.mark.parametrize("package", ["wandb", "tensorboard"])
def test_report_to_without_its_package(tmp_path, capsys, monkeypatch, package):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    _one_error_line([*TRAIN, "--set", f"report_to={package}", "--output-dir", str(tmp_path / "run")], capsys,
                    rf"report_to='{package}' needs the {package} package, which is not installed.*pip install {package}")


def test_a_task_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    # A byte that is not UTF-8 on the third line of a task of your own: the error names that
    # line (before, a text-mode reader named a byte offset inside its read buffer).
    from course_lib.common.user_tasks import TaskError, load_user_task
    task = tmp_path / "train.jsonl"
    task.write_bytes(b'{"prompt": "a", "answer": 1}\n{"prompt": "b", "answer": 2}\n{"prompt": "caf\xe9", "answer": 3}\n')
    with pytest.raises(TaskError, match=r"train\.jsonl: line 3 is not UTF-8 text .* Fix: save the file as UTF-8"):
        load_user_task(str(task))
