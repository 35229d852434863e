"""A task of one's own, taken where a TRL user takes it: the command line, the Python API,
``eval``, ``export-trl`` and ``trl grpo`` (``tests/lib/own_task/next_letter.py``).

The tiny model is not expected to learn the task (it was trained on additions); what is
checked is that each step reads the user's functions and files the way TRL would, starts
from the model's measured settings and says so, holds the evaluation out, and leaves what
the next step reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from trl_child import env_for_trl_child

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = Path(__file__).resolve().parent / "own_task"
MODULE = TASK_DIR / "next_letter.py"
sys.path.insert(0, str(TASK_DIR))
import next_letter  # noqa: E402
sys.path.remove(str(TASK_DIR))


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "WANDB_DISABLED": "true"}


def _run(command: list[str], cwd: Path, ok: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    if ok:
        assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


PY = [sys.executable, "-m", "course_lib"]
REWARDS = f"{MODULE}:next_letter_reward,{MODULE}:short_reward"
CORRECT = f"{MODULE}:is_next_letter"


def test_the_task_functions_follow_their_own_rules():
    assert next_letter.next_letter_reward(None, ["b", "B.", " c", "", [{"role": "assistant", "content": "b!"}]],
                                          answer=["b"] * 5) == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert next_letter.short_reward(None, ["b", "bcd"]) == [0.2, 0.0]
    assert next_letter.is_next_letter("  B", "b") and not next_letter.is_next_letter("129", "b")
    train = {r["prompt"][0]["content"] for r in next_letter.next_letter_task("train", n=100)}
    test = {r["prompt"][0]["content"] for r in next_letter.next_letter_task("test", n=100)}
    assert train and test and not train & test


def test_a_single_jsonl_file_is_split_by_hash_and_keeps_standard_prompts(tmp_path):
    from course_lib.data import SplitNotice, get_task

    rows = tmp_path / "rows.jsonl"
    next_letter.write_rows(rows)
    with pytest.warns(SplitNotice, match="85% train and 15% test"):
        train = get_task(str(rows), split="train", n=None)
    with pytest.warns(SplitNotice):
        test = get_task(str(rows), split="test", n=None)
    assert len(train) + len(test) == 50 and len(test) >= 1
    assert not set(train["prompt"]) & set(test["prompt"])  # held out
    assert all(isinstance(p, str) for p in train["prompt"])  # TRL's standard format, kept as it is
    # The same rule on every call: the split is a function of the prompt.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SplitNotice)
        assert get_task(str(rows), split="test", n=None)["prompt"] == test["prompt"]


def test_the_command_line_trains_evaluates_and_exports_the_own_task(tmp_path):
    rows = tmp_path / "rows.jsonl"
    next_letter.write_rows(rows)
    trained = _run(PY + ["train", "--task", str(rows), "--rewards", REWARDS, "--correct", CORRECT, "--eval-n", "4",
                         "--max-steps", "2", "--set", "per_device_train_batch_size=16",
                         "--output-dir", str(tmp_path / "run")], cwd=tmp_path)
    err = trained.stderr
    # The settings a run starts from, and their source: the tiny model's measured ones, not TRL's 1e-6.
    assert "settings: learning_rate=3e-05, lr_scheduler_type='constant', per_device_train_batch_size=16" in err
    assert "max_completion_length=8" in err and "course_lib.presets.MODEL_SETTINGS" in err
    assert "then --max-steps; then --set per_device_train_batch_size" in err
    assert "SplitNotice: task" in err and "85% train and 15% test" in err and "return " not in err
    summary = _last_json(trained.stdout)
    assert summary["steps"] == 2 and summary["accuracy_after"] is not None
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert history[0]["learning_rate"] == 3e-05
    assert {"rewards/next_letter_reward/mean", "rewards/short_reward/mean"} <= set(history[-1])
    # save_steps is 500, yet the run's last step has its checkpoint (as TRL writes one).
    assert (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").is_file()
    evaluated = _run(PY + ["eval", "--model", str(tmp_path / "run" / "checkpoint-2"), "--task", str(rows),
                           "--correct", CORRECT, "--n", "4", "--max-new-tokens", "8"], cwd=tmp_path)
    assert _last_json(evaluated.stdout)["accuracy"] == summary["accuracy_after"]
    assert "Q: Letter after" in evaluated.stdout  # a string prompt is shown as it is


def test_a_reward_function_passed_as_correct_is_refused_before_the_model_loads(tmp_path):
    rows = tmp_path / "rows.jsonl"
    next_letter.write_rows(rows)
    result = _run(PY + ["train", "--task", str(rows), "--correct", f"{MODULE}:next_letter_reward", "--eval-n", "4",
                        "--max-steps", "1", "--output-dir", str(tmp_path / "run")], cwd=tmp_path, ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "cannot be called as next_letter_reward(completion, answer)" in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_python_api_takes_trls_way_of_writing_the_run(tmp_path):
    from datasets import Dataset

    from course_lib.algos import GRPOConfig
    from course_lib.evaluation import evaluate_accuracy
    from course_lib.rollout import SamplingConfig
    from course_lib.trainer import Trainer

    rows = [r for r in (json.loads(line) for line in _rows_text(tmp_path).splitlines())]
    train = Dataset.from_list(rows[:40])  # string prompts, as a TRL user builds them first
    seen = []

    def recording_reward(prompts, completions, answer, **kwargs):
        seen.append((prompts[0], completions[0]))
        return next_letter.next_letter_reward(prompts, completions, answer)

    config = GRPOConfig(output_dir=str(tmp_path / "api"), max_steps=2, per_device_train_batch_size=8,
                        num_generations=4, max_completion_length=6, learning_rate=3e-5, use_cpu=True)
    trainer = Trainer(config, recording_reward, train, "tiny")  # one function, the model by name
    assert trainer.config.model_name_or_path == "tiny" and trainer.config.device == "cpu"
    trainer.train()
    prompt, completion = seen[0]
    assert isinstance(prompt, str) and prompt.startswith("Letter after") and isinstance(completion, str)
    assert (tmp_path / "api" / "checkpoint-2").is_dir()
    # Greedy evaluation treats a string prompt exactly as training's engine does (no chat template).
    test = Dataset.from_list(rows[40:44])
    accuracy, completions = evaluate_accuracy(trainer.model, trainer.tokenizer, test, max_new_tokens=6,
                                              return_completions=True, correct_fn=next_letter.is_next_letter)
    engine = trainer.generate(test["prompt"], sampling=SamplingConfig(temperature=0.0, max_tokens=6)).texts
    assert completions == engine
    assert accuracy == sum(next_letter.is_next_letter(c, a) for c, a in zip(completions, test["answer"])) / 4


def _rows_text(tmp_path: Path) -> str:
    path = tmp_path / "rows.jsonl"
    next_letter.write_rows(path)
    return path.read_text()


def test_trl_trains_the_exported_own_task_in_a_moved_folder(tmp_path, tmp_path_factory, capsys, monkeypatch):
    """``trl grpo`` trains the command line's export of a task and rewards of one's own: the
    export folder moved, the user's module (a copy, here) deleted, course_lib off the path.
    The only run of ``trl grpo`` on an export with the user's own rewards in the suite. The
    export is ``python -m course_lib export-trl ...`` run in this process
    (``course_lib.__main__.main``); ``trl grpo`` runs as a command, in a fresh interpreter."""
    from course_lib.__main__ import main

    trl = shutil.which("trl", path=os.path.dirname(sys.executable))
    if trl is None:
        pytest.skip("the trl command is not installed beside this Python")
    user = tmp_path_factory.mktemp("user")  # outside tmp_path: the README may say where a module was copied from
    module = shutil.copy(MODULE, user / MODULE.name)
    task = f"{module}:next_letter_task"
    rewards = f"{module}:next_letter_reward,{module}:short_reward"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the user's folder, which the import appends, is dropped after
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # main() shortens warnings for good
    assert main(["export-trl", "--task", task, "--rewards", rewards, "--correct", f"{module}:is_next_letter",
                 "--max-steps", "2", "--set", "per_device_train_batch_size=8", "--set", "num_generations=4",
                 "--train-rows", "16", "--output", str(tmp_path / "export")]) == 0
    exported = capsys.readouterr()
    assert "--correct" in exported.err and "is not exported" in exported.err  # said, not dropped silently
    readme = (tmp_path / "export" / "README.txt").read_text()
    assert "from this folder" in readme and str(tmp_path) not in readme  # nothing points to the old place
    assert str(tmp_path) not in (tmp_path / "export" / "grpo.yaml").read_text()
    moved = tmp_path / "elsewhere" / "next-letter-trl"
    moved.parent.mkdir()
    shutil.move(str(tmp_path / "export"), moved)
    shutil.rmtree(user)  # the rewards must come from the export's own copy
    first = json.loads((moved / "data" / "train.jsonl").read_text().splitlines()[0])
    assert first["prompt"][0]["role"] == "user"  # the task's conversational prompts, as they were
    env = env_for_trl_child({k: v for k, v in _env().items() if k != "PYTHONPATH"})  # course_lib is not needed there
    handed = subprocess.run([trl, "grpo", "--config", "grpo.yaml", "--use_cpu", "true", "--report_to", "none",
                             "--logging_steps", "1"], cwd=moved, env=env, capture_output=True, text=True,
                            timeout=900)
    assert handed.returncode == 0, handed.stderr[-3000:]
    logged = handed.stdout + handed.stderr
    # logged at both steps: TRL called the user's rewards on each step's completions
    assert logged.count("rewards/next_letter_reward/mean") >= 2, logged[-3000:]
    assert "rewards/short_reward/mean" in logged
    assert (moved / "trl-output" / "checkpoint-2").is_dir()  # TRL's end-of-run checkpoint, as ours
