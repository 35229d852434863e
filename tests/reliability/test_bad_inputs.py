"""Bad inputs and faults, tried as a careless user and a hostile one would: each case ends in
a clear error (the field or file, the value, and the fix) or in a documented behaviour,
never in a traceback, a NaN, a silent misreading or lost work.

Two tables:

- ``LIBRARY_CASES``: calls into the library, grouped by what they protect (resume safety,
  output folders, held-out data, inputs read as meant). Each names the exception and a
  regular expression its message must match.
- ``CLI_CASES``: ``python -m course_lib ...`` run in-process through ``main``; a user error
  must exit with status 2 and print ``error: ...`` with its fix, with no traceback.

Everything runs on the tiny model; one short run, trained once per module, provides the
checkpoint the resume cases start from.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from course_lib import checkpoint as ckpt
from course_lib.__main__ import main
from course_lib.algos import make_config
from course_lib.data import DataError, get_task, load_gsm8k
from course_lib.evaluation import evaluate_accuracy
from course_lib.models import ModelNotAvailableError, load_policy
from course_lib.rewards import RewardFunctionError, compute_rewards, get_reward_functions
from course_lib.rollout import ContextLengthError, HFEngine, PromptTruncationWarning, SamplingConfig
from course_lib.run_folder import OutputDirError, ResumeConfigWarning, claim_output_dir
from course_lib.tiny import TINY_DIR
from course_lib.trainer import Trainer

pytestmark = pytest.mark.xdist_group("bad-inputs")

SETTINGS = dict(model_name_or_path="tiny", max_steps=2, learning_rate=1e-3, per_device_train_batch_size=4,
                num_generations=4, max_completion_length=4, logging_steps=1, save_steps=1, seed=5)
_LOADED: dict = {}


def _trainer(output_dir: Path, **overrides) -> Trainer:
    """A trainer on a private copy of the tiny model (loaded once per module)."""
    if not _LOADED:
        _LOADED["policy"] = load_policy("tiny")
        _LOADED["rewards"] = get_reward_functions(["correctness_first_number_reward"])
        _LOADED["data"] = get_task("arithmetic", n=16, seed=0)
    model, tokenizer = _LOADED["policy"]
    config = make_config("grpo", output_dir=str(output_dir), **{**SETTINGS, **overrides})
    return Trainer(config, _LOADED["rewards"], _LOADED["data"], copy.deepcopy(model), tokenizer, progress=False)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> Path:
    """The output folder of a finished 2-step run: history.jsonl, checkpoint-1, checkpoint-2, final/."""
    folder = tmp_path_factory.mktemp("first-run")
    _trainer(folder).train()
    return folder


def _copy_checkpoint(first_run: Path, tmp: Path, step: int = 1) -> Path:
    target = tmp / "run" / f"checkpoint-{step}"
    shutil.copytree(first_run / f"checkpoint-{step}", target)
    return target


class _RunsCode:
    """A pickle payload: unpickling it creates the folder ``marker`` (proof that code ran)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _gsm8k_rows(count: int) -> list[dict]:
    return [{"question": f"Ann has {i} apples and buys {i % 7 + 1} more. How many now?",
             "answer": f"{i} + {i % 7 + 1} = {i + i % 7 + 1}\n#### {i + i % 7 + 1}"} for i in range(count)]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# =====================================================================================
# Library cases. Each ``run(tmp, first_run)`` does the bad thing; ``check(result, tmp)``,
# when given, asserts the documented outcome or what must not have happened.
# =====================================================================================
@dataclass
class Case:
    id: str
    run: Callable[[Path, Path], Any]
    error: type[BaseException] | None = None
    match: str = ""
    check: Callable[[Any, Path], None] | None = None
    warns: type[Warning] | None = None


def _poisoned_resume(file: str) -> Callable[[Path, Path], Any]:
    """Resume from a checkpoint whose ``file`` holds a pickle that would create a folder."""

    def run(tmp: Path, first_run: Path):
        folder = _copy_checkpoint(first_run, tmp)
        torch.save({"state": _RunsCode(tmp / "code-ran")}, folder / file)
        return _trainer(folder.parent).train(resume_from=folder)

    return run


def _older_pickled_checkpoint(tmp: Path, first_run: Path):
    """A checkpoint as older versions wrote it: RNG and rollout state as pickles."""
    folder = _copy_checkpoint(first_run, tmp)
    for name in ("rng.json", "rng.safetensors", "rollout.json", "rollout.safetensors"):
        (folder / name).unlink()
    torch.save(_RunsCode(tmp / "code-ran"), folder / "rng.pt")
    torch.save(_RunsCode(tmp / "code-ran"), folder / "rollout.pt")
    return _trainer(folder.parent).train(resume_from=folder)


def _no_code_ran(result, tmp: Path) -> None:
    assert not (tmp / "code-ran").exists(), "a pickle in the checkpoint ran code"


def _tampered_rng(tmp: Path, first_run: Path):
    folder = _copy_checkpoint(first_run, tmp)
    state = json.loads((folder / "rng.json").read_text())
    state["python"]["state"] = state["python"]["state"][:10]
    (folder / "rng.json").write_text(json.dumps(state))
    return _trainer(folder.parent).train(resume_from=folder)


def _resume_with(**changes) -> Callable[[Path, Path], Any]:
    def run(tmp: Path, first_run: Path):
        folder = _copy_checkpoint(first_run, tmp)
        return _trainer(folder.parent, **changes).train(resume_from=folder)

    return run


def _continued_to_three_steps(rows, tmp: Path) -> None:
    assert [r["step"] for r in rows] == [1, 2, 3]


def _train_again(tmp: Path, first_run: Path, **overrides):
    run = tmp / "run"
    shutil.copytree(first_run, run)
    tmp.joinpath("history-before").write_bytes((run / "history.jsonl").read_bytes())
    return _trainer(run, **overrides).train()


def _history_untouched(result, tmp: Path) -> None:
    assert (tmp / "run" / "history.jsonl").read_bytes() == (tmp / "history-before").read_bytes()


def _overwritten(rows, tmp: Path) -> None:
    run = tmp / "run"
    assert [c.name for c in ckpt.list_checkpoints(run)] == ["checkpoint-1"]  # the old checkpoint-2 is gone
    assert [r["step"] for r in rows] == [1] and len((run / "history.jsonl").read_text().splitlines()) == 1


def _resume_into_another_run(tmp: Path, first_run: Path):
    other = tmp / "other"
    shutil.copytree(first_run, other)
    tmp.joinpath("history-before").write_bytes((other / "history.jsonl").read_bytes())
    (tmp / "run").symlink_to(other)  # so that _history_untouched reads the other run
    return _trainer(other).train(resume_from=first_run / "checkpoint-1")


def _two_runs_at_once(tmp: Path, first_run: Path):
    with claim_output_dir(tmp / "shared"):
        with claim_output_dir(tmp / "shared"):
            pass


def _single_file_split(tmp: Path, first_run: Path):
    file = _write_jsonl(tmp / "gsm8k.jsonl", _gsm8k_rows(200))
    with pytest.warns(UserWarning, match="single file.*85% train and 15% test"):
        train = load_gsm8k(file, split="train")
    return train, load_gsm8k(file, split="test")


def _held_out(result, tmp: Path) -> None:
    train, test = result
    questions = lambda d: {p[-1]["content"] for p in d["prompt"]}  # noqa: E731
    assert len(train) + len(test) == 200 and 15 <= len(test) <= 45
    assert not questions(train) & questions(test)
    again = load_gsm8k(tmp / "gsm8k.jsonl", split="test")  # the same split every time
    assert questions(again) == questions(test)


def _folder_split(tmp: Path, first_run: Path):
    rows = _gsm8k_rows(30)
    _write_jsonl(tmp / "g" / "train.jsonl", rows[:20])
    _write_jsonl(tmp / "g" / "test.jsonl", rows[20:])
    return len(get_task(f"gsm8k:{tmp / 'g'}", split="train", n=None)), len(get_task(f"gsm8k:{tmp / 'g'}",
                                                                                    split="test", n=None))


def _long_prompt(max_prompt_length: int | None):
    def run(tmp: Path, first_run: Path):
        model, tokenizer = load_policy("tiny")
        prompt = "What is " + " + ".join(str(i) for i in range(60)) + "?"  # ~240 tokens, the model has 128 positions
        sampling = SamplingConfig(max_tokens=8, seed=0, max_prompt_length=max_prompt_length)
        return HFEngine(model, tokenizer).generate([prompt], n=2, sampling=sampling)

    return run


def _dict_reward(tmp: Path, first_run: Path):
    def by_name(prompts, completions, **kwargs):
        return {"a": 1.0, "b": 0.0}

    return compute_rewards([by_name], ["p", "q"], ["x", "y"])


def _truncated_weights(tmp: Path, first_run: Path):
    folder = tmp / "model"
    shutil.copytree(TINY_DIR, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return load_policy(folder)


def _no_tokenizer(tmp: Path, first_run: Path):
    folder = tmp / "model"
    shutil.copytree(TINY_DIR, folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)
    return load_policy(folder)


def _hub_id(offline: bool):
    def run(tmp: Path, first_run: Path):
        started = time.monotonic()
        os.environ.update({"HF_HUB_OFFLINE": "1"} if offline else {  # a closed port: refused at once
            "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"})
        try:
            load_policy("course-lib-tests/no-such-model")
        finally:
            tmp.joinpath("seconds").write_text(str(time.monotonic() - started))

    return run


LIBRARY_CASES = [
    # --- resuming runs no code from the checkpoint -----------------------------------------
    Case("pickle-in-optimizer.pt", _poisoned_resume("optimizer.pt"), ckpt.CheckpointError,
         r"optimizer.pt holds something other than tensors.*never resume from a checkpoint you did not write",
         _no_code_ran),
    Case("pickle-in-scheduler.pt", _poisoned_resume("scheduler.pt"), ckpt.CheckpointError,
         r"scheduler.pt holds something other", _no_code_ran),
    Case("older-pickled-rng-and-rollout", _older_pickled_checkpoint, ckpt.CheckpointError,
         r"older version that stored RNG and rollout state as pickles", _no_code_ran),
    Case("tampered-rng.json", _tampered_rng, ckpt.CheckpointError, r"rng.json / rng.safetensors do not hold RNG"),
    # --- resume compares the config -------------------------------------------------------
    Case("resume-with-another-learning-rate", _resume_with(learning_rate=0.01), ValueError,
         r"learning_rate: 0\.001 in the checkpoint, 0\.01 now.*Fields that may change on resume: max_steps"),
    Case("resume-with-another-seed-and-G", _resume_with(seed=6, num_generations=2), ValueError,
         r"num_generations: 4 in the checkpoint, 2 now; seed: 5 in the checkpoint, 6 now"),
    Case("resume-with-more-steps-is-allowed", _resume_with(max_steps=3), None, "",
         _continued_to_three_steps, warns=ResumeConfigWarning),
    # --- an output folder holds one run -----------------------------------------------------
    Case("train-again-into-a-used-folder", _train_again, OutputDirError,
         r"is not empty \(it holds checkpoint-1, checkpoint-2, final, history.jsonl\).*--resume-from latest.*"
         r"--overwrite-output-dir", _history_untouched),
    Case("overwrite-replaces-the-old-run", lambda tmp, first: _train_again(tmp, first, overwrite_output_dir=True,
                                                                           max_steps=1),
         None, "", _overwritten),
    Case("resume-into-a-folder-of-another-run", _resume_into_another_run, OutputDirError, r"is not empty",
         _history_untouched),
    Case("two-runs-in-one-folder-at-once", _two_runs_at_once, OutputDirError, r"in use by another training run"),
    # --- held-out data is held out; sizes are counts ----------------------------------------
    Case("gsm8k-single-file-is-split", _single_file_split, None, "", _held_out),
    Case("gsm8k-folder-uses-its-files", _folder_split, None, "", lambda r, tmp: r == (20, 10) or pytest.fail(r)),
    Case("gsm8k-folder-without-test", lambda tmp, first: load_gsm8k(_write_jsonl(tmp / "g" / "train.jsonl",
                                                                                 _gsm8k_rows(5)).parent, split="test"),
         DataError, r"No GSM8K file at .*test.jsonl.*Fix"),
    Case("gsm8k-empty-file", lambda tmp, first: load_gsm8k(_write_jsonl(tmp / "e.jsonl", []), split="test"),
         DataError, r"holds no test rows"),
    Case("gsm8k-n-zero", lambda tmp, first: get_task(f"gsm8k:{_write_jsonl(tmp / 'g.jsonl', _gsm8k_rows(50))}",
                                                     split="test", n=0), DataError, r"n=0 is not a row count"),
    Case("arithmetic-n-negative", lambda tmp, first: get_task("arithmetic", n=-5), DataError,
         r"n=-5 is not a row count"),
    Case("arithmetic-n-float", lambda tmp, first: get_task("arithmetic", n=2.5), DataError, r"n=2.5 is not a whole"),
    Case("accuracy-of-nothing", lambda tmp, first: evaluate_accuracy(*load_policy("tiny"),
                                                                     get_task("arithmetic", n=3).select([])),
         ValueError, r"no rows.*Fix"),
    Case("gsm8k-malformed-line", lambda tmp, first: load_gsm8k(_write_jsonl(
        tmp / "bad.jsonl", [_gsm8k_rows(1)[0], '{"question": "2+2?", "answer": '])), DataError,
         r"bad.jsonl: line 2 is not JSON"),
    Case("gsm8k-row-without-question", lambda tmp, first: load_gsm8k(_write_jsonl(
        tmp / "bad.jsonl", [{"prompt": "2+2?", "answer": "#### 4"}])), DataError,
         r"line 1 lacks 'question' \(it holds \['answer', 'prompt'\]\)"),
    Case("gsm8k-answer-without-final-line", lambda tmp, first: load_gsm8k(_write_jsonl(
        tmp / "bad.jsonl", [{"question": "2+2?", "answer": "4"}])), DataError, r"line 1: the answer has no '####"),
    # --- inputs are read as they are meant -----------------------------------------------------
    Case("prompt-past-the-model-positions", _long_prompt(None), ContextLengthError,
         r"prompts\[0\] has \d+ tokens; with max_tokens=8 .* at most 128\. Fix: set max_prompt_length <= 120"),
    Case("prompt-fitted-by-max_prompt_length", _long_prompt(100), None, "",
         lambda batch, tmp: batch.prompt_ids.shape[1] == 100 or pytest.fail(batch.prompt_ids.shape),
         warns=PromptTruncationWarning),
    Case("lora-target-modules-as-a-string", lambda tmp, first: make_config("grpo", lora_target_modules="q_proj"),
         ValueError, r"lora_target_modules='q_proj' is a str, not list\[str\]\. Fix: .*\['q_proj'\]"),
    Case("num-generations-2.5", lambda tmp, first: make_config("grpo", num_generations=2.5), ValueError,
         r"num_generations=2.5 is a float, not int"),
    Case("use-lora-as-a-string", lambda tmp, first: make_config("grpo", use_lora="false"), ValueError,
         r"use_lora='false' is a str, not bool"),
    Case("ppo-num-generations-0", lambda tmp, first: make_config("ppo", num_generations=0), ValueError,
         r"num_generations=0 is below 1: every prompt needs at least one completion\. Fix: set num_generations >= 1\.$"),
    Case("reward-returns-a-dict", _dict_reward, RewardFunctionError, r"by_name.*dict"),
    # --- models: the file at fault, fast ---------------------------------------------------------
    Case("truncated-safetensors", _truncated_weights, ModelNotAvailableError,
         r"Could not read the weights .* damaged or truncated"),
    Case("folder-without-tokenizer", _no_tokenizer, ModelNotAvailableError, r"has no tokenizer files.*Fix"),
    Case("hub-id-offline", _hub_id(offline=True), ModelNotAvailableError, r"offline mode is on",
         lambda r, tmp: float((tmp / "seconds").read_text()) < 5 or pytest.fail("slow")),
    Case("hub-id-unreachable", _hub_id(offline=False), ModelNotAvailableError, r"the hub cannot be reached",
         lambda r, tmp: float((tmp / "seconds").read_text()) < 10 or pytest.fail("slow")),
]


@pytest.mark.parametrize("case", LIBRARY_CASES, ids=[c.id for c in LIBRARY_CASES])
def test_library_case(case: Case, tmp_path, first_run, monkeypatch):
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the case, whatever it sets
    warns = pytest.warns(case.warns) if case.warns else _nothing()
    if case.error is not None:
        with pytest.raises(case.error) as caught, warns:
            case.run(tmp_path, first_run)
        message = str(caught.value.args[0] if caught.value.args else caught.value)
        assert re.search(case.match, message, re.S), message
        assert "nan" not in message.lower().split()
        result = caught.value
    else:
        with warns:
            result = case.run(tmp_path, first_run)
    if case.check is not None:
        case.check(result, tmp_path)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# =====================================================================================
# CLI cases: exit status 2, ``error: ...`` with the fix on stderr, no traceback.
# =====================================================================================
@dataclass
class CliCase:
    id: str
    argv: Callable[[Path, Path], list[str]]
    match: str
    env: dict = field(default_factory=dict)


def _train(*extra: str) -> list[str]:
    return ["train", "--model", "tiny", "--task", "arithmetic", "--train-rows", "16", "--max-steps", "1",
            "--set", "per_device_train_batch_size=4", "--set", "num_generations=4",
            "--set", "max_completion_length=4", *extra]


CLI_CASES = [
    CliCase("set-a-word-as-learning-rate", lambda tmp, first: _train("--set", "learning_rate=fast"),
            r"error: learning_rate='fast' does not fit the field's type"),
    CliCase("set-unknown-field", lambda tmp, first: _train("--set", "learnign_rate=1e-4"),
            r"has no field 'learnign_rate'\. Did you mean 'learning_rate'\?"),
    CliCase("ppo-num-generations-0", lambda tmp, first: _train("--algo", "ppo", "--set", "num_generations=0"),
            r"num_generations >= 1\.\n"),
    CliCase("used-output-dir", lambda tmp, first: _train("--output-dir", str(first)), r"is not empty.*Fix"),
    CliCase("resume-from-nothing", lambda tmp, first: _train("--output-dir", str(tmp / "o"), "--resume-from",
                                                             str(tmp / "o" / "checkpoint-9")),
            r"cannot resume from .*checkpoint-9: it does not exist\. Fix"),
    CliCase("resume-with-another-learning-rate", lambda tmp, first: _train(
        "--output-dir", str(first), "--resume-from", "latest", "--set", "learning_rate=0.5"),
            r"learning_rate: 0\.001 in the checkpoint, 0\.5 now"),
    CliCase("gsm8k-malformed-jsonl", lambda tmp, first: ["eval", "--task", "gsm8k:" + str(_write_jsonl(
        tmp / "g.jsonl", ['{"question": "1+1?", "answer": "#### 2"}', "{not json"])), "--n", "1"],
            r"g.jsonl: line 2 is not JSON"),
    CliCase("gsm8k-missing-answer", lambda tmp, first: ["eval", "--task", "gsm8k:" + str(_write_jsonl(
        tmp / "g.jsonl", [{"question": "1+1?"}])), "--n", "1"], r"line 1 lacks 'answer'"),
    CliCase("unknown-task", lambda tmp, first: ["eval", "--task", "gms8k", "--n", "1"], r"Unknown task 'gms8k'"),
    CliCase("unknown-reward", lambda tmp, first: _train("--rewards", "corectness_reward"),
            r"corectness_reward"),
    CliCase("truncated-weights", lambda tmp, first: ["eval", "--model", str(_broken_model(tmp, "weights")),
                                                     "--n", "1"], r"damaged or truncated"),
    CliCase("no-tokenizer", lambda tmp, first: ["eval", "--model", str(_broken_model(tmp, "tokenizer")), "--n", "1"],
            r"has no tokenizer files"),
    CliCase("hub-id-offline", lambda tmp, first: ["eval", "--model", "course-lib-tests/none", "--n", "1"],
            r"offline mode is on", env={"HF_HUB_OFFLINE": "1"}),
    CliCase("eval-n-zero", lambda tmp, first: ["eval", "--n", "0"], r"argument --n: 0 is below 1"),
    CliCase("eval-n-negative", lambda tmp, first: ["eval", "--n", "-3"], r"argument --n: -3 is below 1"),
    CliCase("eval-n-negative-in-train", lambda tmp, first: _train("--eval-n", "-1"), r"argument --eval-n: -1 is below 0"),
    CliCase("train-rows-negative", lambda tmp, first: _train("--train-rows", "-5"),
            r"argument --train-rows: -5 is below 1"),
]


def _broken_model(tmp: Path, what: str) -> Path:
    folder = tmp / "model"
    shutil.copytree(TINY_DIR, folder)
    if what == "weights":
        (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
    else:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).unlink()
    return folder


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_case(case: CliCase, tmp_path, first_run, capsys, monkeypatch):
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    try:
        status = main(case.argv(tmp_path, first_run))
    except SystemExit as stop:  # argparse's own errors
        status = stop.code
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    assert "Traceback" not in out + err and "error:" in err
    assert re.search(case.match, err, re.S), err
    assert "sentencepiece" not in err


def test_debug_shows_the_traceback(tmp_path, first_run):
    with pytest.raises(ValueError, match="learning_rate='fast'"):
        main(["--debug", *_train("--set", "learning_rate=fast")])
