"""Bad input, table-driven: every case ends in a clear error or a documented behaviour.

A clear error is an exception of the named type whose message names the culprit (the
field, the value or the function) and, where the table asks for it, the fix. A
documented behaviour is what the library's docstrings promise for that input (NaN for
"not applicable", a warning for an infinite reward...), checked here. No case may end in
an unrelated traceback, and none may produce a NaN that reaches the weights.

The tables are counted at the end of the module (``test_every_table_case_has_an_outcome``),
which is where the numbers in the reliability notes come from.

The second half covers what a run leaves behind and what it reads: resuming runs no code
from a checkpoint and refuses a changed config, an output folder holds one run, held-out
data is held out, sizes are counts, inputs are read as meant, and models fail with the
file at fault, fast. Those cases start from one short run on the tiny model, trained once
per module (``first_run``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from course_lib.run import checkpoint as ckpt
from course_lib.algos import make_config
from course_lib.config import apply_overrides
from course_lib.data import DataError, SplitNotice, get_task, load_gsm8k
from course_lib.run.nonfinite import NonFiniteTrainingError, check_finite_update
from course_lib.evaluation import evaluate_accuracy
from course_lib.models import ModelNotAvailableError, load_policy
from course_lib.rewards import RewardFunctionError, compute_rewards
from course_lib.rewards.combine import UnscorableSampleWarning
from course_lib.rollout import ContextLengthError, HFEngine, PromptTruncationWarning, SamplingConfig
from course_lib.run.folder import OutputDirError, ResumeConfigWarning, claim_output_dir
from course_lib.tiny import TINY_DIR


@dataclass(frozen=True)
class Error:
    """Expect ``kind`` raised with a message matching ``match`` (a regex)."""

    kind: type[BaseException]
    match: str


@dataclass(frozen=True)
class Documented:
    """Expect no error; ``check(result)`` asserts the documented behaviour."""

    what: str
    check: Callable[[Any], None]


def _expect(outcome, call: Callable[[], Any]) -> None:
    if isinstance(outcome, Error):
        with pytest.raises(outcome.kind, match=outcome.match):
            call()
    else:
        assert outcome.check(call()) is not False, outcome.what  # a check returns a bool or asserts itself


# --- configs -----------------------------------------------------------------------------

NON_FINITE = "is not a finite number.*Fix: set {0} to a finite value"
CONFIG_CASES = {
    "learning_rate=inf": ({"learning_rate": math.inf}, Error(ValueError, NON_FINITE.format("learning_rate"))),
    "learning_rate=-inf": ({"learning_rate": -math.inf}, Error(ValueError, NON_FINITE.format("learning_rate"))),
    "beta=nan": ({"beta": math.nan}, Error(ValueError, NON_FINITE.format("beta"))),
    "max_grad_norm=nan": ({"max_grad_norm": math.nan}, Error(ValueError, NON_FINITE.format("max_grad_norm"))),
    "epsilon=nan": ({"epsilon": math.nan}, Error(ValueError, NON_FINITE.format("epsilon"))),
    "epsilon_high=inf": ({"epsilon_high": math.inf}, Error(ValueError, NON_FINITE.format("epsilon_high"))),
    "delta=nan": ({"delta": math.nan}, Error(ValueError, NON_FINITE.format("delta"))),
    "reward_weights=[nan]": ({"reward_weights": [math.nan]}, Error(ValueError, NON_FINITE.format("reward_weights"))),
    "reward_weights=[1, inf]": ({"reward_weights": [1.0, math.inf]},
                                Error(ValueError, NON_FINITE.format("reward_weights"))),
    "temperature=nan": ({"temperature": math.nan}, Error(ValueError, NON_FINITE.format("temperature"))),
    "top_p=nan": ({"top_p": math.nan}, Error(ValueError, NON_FINITE.format("top_p"))),
    "adam_epsilon=nan": ({"adam_epsilon": math.nan}, Error(ValueError, NON_FINITE.format("adam_epsilon"))),
    "weight_decay=inf": ({"weight_decay": math.inf}, Error(ValueError, NON_FINITE.format("weight_decay"))),
    "num_train_epochs=inf": ({"num_train_epochs": math.inf}, Error(ValueError, NON_FINITE.format("num_train_epochs"))),
    "learning_rate=-1": ({"learning_rate": -1.0}, Error(ValueError, r"learning_rate=-1.0 must be non-negative")),
    "num_generations=1": ({"num_generations": 1}, Error(ValueError, r"num_generations=1 .*Fix: set num_generations")),
    "delta=1.0": ({"delta": 1.0}, Error(ValueError, r"delta=1.0 .*Fix: use delta > 1")),
    "save_total_limit=0": ({"save_total_limit": 0}, Error(ValueError, r"save_total_limit=0 must be None or at least 1")),
    "save_total_limit=None": ({"save_total_limit": None},
                              Documented("keeps every checkpoint", lambda c: c.save_total_limit is None)),
    "reward_weights=[0.5, 2]": ({"reward_weights": [0.5, 2]},
                                Documented("ints become floats", lambda c: c.reward_weights == [0.5, 2.0])),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_config_values(case):
    values, outcome = CONFIG_CASES[case]
    _expect(outcome, lambda: make_config("grpo", **values))


ALGO_CASES = {
    "rloo reward_clip_range=nan": ("rloo", {"reward_clip_range": math.nan},
                                   Error(ValueError, NON_FINITE.format("reward_clip_range"))),
    "ppo gamma=nan": ("ppo", {"gamma": math.nan}, Error(ValueError, NON_FINITE.format("gamma"))),
    "ppo vf_coef=inf": ("ppo", {"vf_coef": math.inf}, Error(ValueError, NON_FINITE.format("vf_coef"))),
    "ppo lam=1.5": ("ppo", {"lam": 1.5}, Error(ValueError, r"lam.*must lie in \[0, 1\]")),
}


@pytest.mark.parametrize("case", list(ALGO_CASES))
def test_algorithm_config_values(case):
    algo, values, outcome = ALGO_CASES[case]
    _expect(outcome, lambda: make_config(algo, **values))


OVERRIDE_CASES = {
    "--set beta=nan": (["beta=nan"], Error(ValueError, NON_FINITE.format("beta"))),
    "--set learning_rate=inf": (["learning_rate=inf"], Error(ValueError, NON_FINITE.format("learning_rate"))),
    "--set learning_rate=abc": (["learning_rate=abc"], Error(ValueError, r"learning_rate='abc' does not fit")),
    "--set nosuch=1": (["nosuch=1"], Error(ValueError, r"has no field 'nosuch'")),
    "--set beta": (["beta"], Error(ValueError, r"not of the form key=value")),
}


@pytest.mark.parametrize("case", list(OVERRIDE_CASES))
def test_config_overrides(case):
    overrides, outcome = OVERRIDE_CASES[case]
    _expect(outcome, lambda: apply_overrides(make_config("grpo"), overrides))


# --- rewards -------------------------------------------------------------------------------

B = 4


def _returns(value):
    def reward(prompts=None, completions=(), **kwargs):
        return value() if callable(value) else value

    reward.__name__ = "probe_reward"
    return reward


def _all_nan_with_warning(result):
    per_func, total = result
    assert torch.isnan(total).all()


REWARD_CASES = {
    "a dict": ({i: 1.0 for i in range(B)}, Error(RewardFunctionError, r"'probe_reward' returned dict.*expected a list")),
    "a set": ({0.0, 1.0, 2.0, 3.0}, Error(RewardFunctionError, r"returned set")),
    "a string": ("1234", Error(RewardFunctionError, r"returned str")),
    "a float": (1.0, Error(RewardFunctionError, r"returned float")),
    "None for the batch": (None, Error(RewardFunctionError, r"returned NoneType")),
    "a (B, 1) array": (np.ones((B, 1)), Error(RewardFunctionError, r"ndarray of shape \(4, 1\).*shape \(4,\)")),
    "a (1, B) array": (np.ones((1, B)), Error(RewardFunctionError, r"ndarray of shape \(1, 4\)")),
    "a (B, 2) tensor": (torch.ones(B, 2), Error(RewardFunctionError, r"Tensor of shape \(4, 2\)")),
    "a 0-d tensor": (torch.tensor(1.0), Error(RewardFunctionError, r"Tensor of shape \(\)")),
    "too few values": ([1.0] * (B - 1), Error(RewardFunctionError, r"returned 3 rewards for 4 completions")),
    "list of 1-element lists": ([[1.0]] * B, Error(RewardFunctionError, r"returned \[1.0\] \(list\) at sample index 0")),
    "list of 1-element arrays": ([np.ones(1)] * B, Error(RewardFunctionError, r"ndarray of shape \(1,\)")),
    "a string value": ([1.0, "high", 0.0, 0.0], Error(RewardFunctionError, r"returned 'high' \(str\) at sample index 1")),
    "a complex value": ([1j] * B, Error(RewardFunctionError, r"\(complex\)")),
    "it raises": (lambda: 1 / 0, Error(RewardFunctionError, r"raised ZeroDivisionError")),
    "a 1-D tensor": (torch.arange(B, dtype=torch.float32),
                     Documented("accepted", lambda r: r[1].tolist() == [0.0, 1.0, 2.0, 3.0])),
    "a 1-D array": (np.arange(B), Documented("accepted", lambda r: r[1].tolist() == [0.0, 1.0, 2.0, 3.0])),
    "NumPy scalars and 0-d tensors": ([np.float32(0.5), np.int64(1), torch.tensor(2.0), np.bool_(True)],
                                      Documented("accepted", lambda r: r[1].tolist() == [0.5, 1.0, 2.0, 1.0])),
    "bools": ([True, False, True, False], Documented("True is 1.0", lambda r: r[1].tolist() == [1.0, 0.0, 1.0, 0.0])),
    "a generator": (lambda: (float(i) for i in range(B)), Documented("accepted", lambda r: r[1].tolist() == [0, 1, 2, 3])),
    "all None": ([None] * B, Documented("unscorable: total NaN, with a warning", _all_nan_with_warning)),
    "NaN values": ([math.nan, 1.0, math.nan, 0.0],
                   Documented("NaN is not applicable", lambda r: torch.isnan(r[0][:, 0]).tolist() == [True, False, True, False])),
}


@pytest.mark.parametrize("case", list(REWARD_CASES))
def test_reward_function_outputs(case):
    value, outcome = REWARD_CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnscorableSampleWarning)
        _expect(outcome, lambda: compute_rewards([_returns(value)], ["p"] * B, ["c"] * B))


def test_an_infinite_reward_becomes_nan_with_a_warning():
    with pytest.warns(RuntimeWarning, match=r"'probe_reward' returned inf at sample index 2; treated as NaN"):
        per_func, total = compute_rewards([_returns([0.0, 1.0, math.inf, 0.0])], ["p"] * B, ["c"] * B)
    assert torch.isnan(per_func[2, 0]) and total[:2].tolist() == [0.0, 1.0]


# --- data, models, training numerics ---------------------------------------------------------

OTHER_CASES = {
    "unknown task": (lambda: get_task("no-such-task"), Error(ValueError, r"Unknown task 'no-such-task'. Known tasks")),
    "missing GSM8K file": (lambda: get_task("gsm8k:/no/such/file.jsonl"),
                           Error(DataError, r"No GSM8K file or folder at /no/such/file.jsonl.*Fix")),
    "unknown model": (lambda: load_policy("no-such-model"), Error(ModelNotAvailableError, r"Unknown model 'no-such-model'")),
    "NaN loss before the update": (
        lambda: check_finite_update(torch.tensor(1.0), [{"loss": 0.1}, {"loss": math.nan}], step=7, output_dir=None),
        Error(NonFiniteTrainingError, r"step 7: loss=nan \(micro-batch 1\).*no checkpoint was saved yet")),
    "infinite gradient norm": (
        lambda: check_finite_update(torch.tensor(math.inf), [{"loss": 0.1}], step=3, output_dir=None),
        Error(NonFiniteTrainingError, r"step 3: grad_norm=inf.*update was not applied")),
    "finite step": (lambda: check_finite_update(torch.tensor(2.0), [{"loss": 0.3}], step=1, output_dir=None),
                    Documented("passes silently", lambda r: r is None)),
}


@pytest.mark.parametrize("case", list(OTHER_CASES))
def test_data_models_and_numerics(case):
    call, outcome = OTHER_CASES[case]
    _expect(outcome, call)


def _tiny_trainer(tmp_path, dataset, **overrides):
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4,
                    num_generations=4, max_completion_length=4, save_steps=1, seed=0)
    model, tokenizer = load_policy("tiny")
    return Trainer(make_config("grpo", **{**settings, **overrides}), get_reward_functions(["proximity_reward"]),
                   dataset, model, tokenizer, progress=False)


def test_dataset_without_a_prompt_column_is_refused(tmp_path):
    dataset = get_task("arithmetic", n=8, seed=0).rename_column("prompt", "question_text")
    with pytest.raises(ValueError, match=r"train_dataset has no 'prompt' column"):
        _tiny_trainer(tmp_path, dataset)


def test_a_diverging_run_stops_before_the_update_and_names_the_last_checkpoint(tmp_path):
    trainer = _tiny_trainer(tmp_path, get_task("arithmetic", n=16, seed=0), max_steps=3)
    original = trainer._micro_step
    calls = {"n": 0}

    def poisoned(mb):  # the second optimizer step's loss turns NaN
        metrics = original(mb)
        calls["n"] += 1
        if trainer.step == 1:
            for parameter in trainer.model.parameters():
                if parameter.grad is not None:
                    parameter.grad.fill_(math.nan)
            metrics["loss"] = math.nan
        return metrics

    trainer._micro_step = poisoned
    with pytest.raises(NonFiniteTrainingError, match=r"step 2: loss=nan.*checkpoint-1 \(resume with Trainer\.train\(resume_from='latest'\)\)"):
        trainer.train()
    assert trainer.step == 1
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())  # weights untouched


# --- the command line ------------------------------------------------------------------------

CLI_CASES = {
    "--set beta=nan": (["--set", "beta=nan"], r"beta=nan is not a finite number"),
    "--set nosuch=1": (["--set", "nosuch=1"], r"has no field 'nosuch'"),
    "--rewards nosuch": (["--rewards", "nosuch_reward"], r"unknown reward function 'nosuch_reward'"),
    "--task nosuch": (["--task", "nosuch"], r"Unknown task 'nosuch'"),
    "--task gsm8k:missing": (["--task", "gsm8k:/no/such.jsonl"], r"No GSM8K file or folder at /no/such.jsonl"),
    "--model missing": (["--model", "/no/such/model"], r"No model folder at '/no/such/model': no such folder"),
    "--resume-from latest, none saved": (["--resume-from", "latest"], r"no complete checkpoint-<step> folder"),
    "--resume-from missing folder": (["--resume-from", "/no/such/checkpoint-3"],
                                     r"cannot resume from /no/such/checkpoint-3: it does not exist"),
    "--train-rows 0": (["--train-rows", "0"], r"argument --train-rows: 0 is below 1"),
    "--train-rows -5": (["--train-rows", "-5"], r"argument --train-rows: -5 is below 1"),
    "--eval-n -1": (["--eval-n", "-1"], r"argument --eval-n: -1 is below 0"),
    "--max-steps 0": (["--max-steps", "0"], r"max_steps=0"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_command_line_mistakes_end_in_one_clear_line(case, tmp_path):
    from course_lib.__main__ import main

    extra, message = CLI_CASES[case]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["train", "--max-steps", "1", "--output-dir", str(tmp_path / "run"), *extra])
        except SystemExit as stop:  # argparse's own checks (counts, choices)
            code = stop.code
    text = err.getvalue()
    assert code == 2
    assert "Traceback" not in text
    assert "error: " in text and any(re.search(message, line) for line in text.splitlines()), text


def test_command_line_argument_types_are_checked_by_argparse():
    from course_lib.__main__ import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        main(["train", "--algo", "a2c"])
    assert exit_info.value.code == 2 and "invalid choice: 'a2c'" in err.getvalue()


# =============================================================================================
# Runs, checkpoints and output folders
# =============================================================================================

RUN = dict(model_name_or_path="tiny", max_steps=2, learning_rate=1e-3, per_device_train_batch_size=4,
           num_generations=4, max_completion_length=4, logging_steps=1, save_steps=1, seed=5)
_LOADED: dict = {}


def _trainer(output_dir: Path, **overrides):
    """A trainer on a private copy of the tiny model (loaded once per module)."""
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    if not _LOADED:
        _LOADED.update(policy=load_policy("tiny"), data=get_task("arithmetic", n=16, seed=0),
                       rewards=get_reward_functions(["correctness_first_number_reward"]))
    model, tokenizer = _LOADED["policy"]
    config = make_config("grpo", output_dir=str(output_dir), **{**RUN, **overrides})
    return Trainer(config, _LOADED["rewards"], _LOADED["data"], copy.deepcopy(model), tokenizer, progress=False)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> Path:
    """The output folder of a finished 2-step run: history.jsonl, checkpoint-1, checkpoint-2, final/."""
    folder = tmp_path_factory.mktemp("first-run")
    _trainer(folder).train()
    return folder


def _checkpoint_copy(first_run: Path, tmp: Path) -> Path:
    target = tmp / "run" / "checkpoint-1"
    shutil.copytree(first_run / "checkpoint-1", target)
    return target


class _RunsCode:
    """A pickle payload: unpickling it creates the folder ``marker``, the proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _poisoned(file: str):
    """Resume from a checkpoint whose ``file`` holds a pickle that would run code."""

    def run(tmp: Path, first_run: Path):
        folder = _checkpoint_copy(first_run, tmp)
        torch.save({"state": _RunsCode(tmp / "code-ran")}, folder / file)
        return _trainer(folder.parent).train(resume_from=folder)

    return run


def _older_pickled_checkpoint(tmp: Path, first_run: Path):
    """A checkpoint as the previous version wrote it: RNG and rollout state as pickles."""
    folder = _checkpoint_copy(first_run, tmp)
    for name in ("rng.json", "rng.safetensors", "rollout.json", "rollout.safetensors"):
        (folder / name).unlink()
    torch.save(_RunsCode(tmp / "code-ran"), folder / "rng.pt")
    torch.save(_RunsCode(tmp / "code-ran"), folder / "rollout.pt")
    return _trainer(folder.parent).train(resume_from=folder)


def _no_code_ran(tmp: Path) -> None:
    assert not (tmp / "code-ran").exists(), "a pickle in the checkpoint ran code"


def _tampered_rng(tmp: Path, first_run: Path):
    folder = _checkpoint_copy(first_run, tmp)
    state = json.loads((folder / "rng.json").read_text())
    state["python"]["state"] = state["python"]["state"][:10]
    (folder / "rng.json").write_text(json.dumps(state))
    return _trainer(folder.parent).train(resume_from=folder)


def _resume_with(**changes):
    def run(tmp: Path, first_run: Path):
        folder = _checkpoint_copy(first_run, tmp)
        return _trainer(folder.parent, **changes).train(resume_from=folder)

    return run


def _resume_for_one_more_step(tmp: Path, first_run: Path):
    with pytest.warns(ResumeConfigWarning, match=r"max_steps 2 -> 3: the linear learning-rate schedule is recomputed"):
        return _resume_with(max_steps=3)(tmp, first_run)


def _train_again(**overrides):
    def run(tmp: Path, first_run: Path):
        shutil.copytree(first_run, tmp / "run")
        (tmp / "history-before").write_bytes((tmp / "run" / "history.jsonl").read_bytes())
        return _trainer(tmp / "run", **overrides).train()

    return run


def _killed_before_saving(tmp: Path, first_run: Path):
    (tmp / "run").mkdir()
    shutil.copy(first_run / "history.jsonl", tmp / "run" / "history.jsonl")
    (tmp / "history-before").write_bytes((tmp / "run" / "history.jsonl").read_bytes())
    return _trainer(tmp / "run").train()


def _history_untouched(tmp: Path) -> None:
    assert (tmp / "run" / "history.jsonl").read_bytes() == (tmp / "history-before").read_bytes()


def _only_the_new_run(tmp: Path) -> None:
    assert [c.name for c in ckpt.list_checkpoints(tmp / "run")] == ["checkpoint-1"]  # the old checkpoint-2 is gone
    rows = [json.loads(line) for line in (tmp / "run" / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "type" not in r] == [1]  # one metric row: the earlier run's are gone
    assert all(r["step"] <= 1 for r in rows)  # event rows (the doctor's config, findings) are the new run's


def _resume_into_another_run(tmp: Path, first_run: Path):
    shutil.copytree(first_run, tmp / "run")
    (tmp / "history-before").write_bytes((tmp / "run" / "history.jsonl").read_bytes())
    return _trainer(tmp / "run").train(resume_from=first_run / "checkpoint-1")


def _two_runs_at_once(tmp: Path, first_run: Path):
    with claim_output_dir(tmp / "shared"), claim_output_dir(tmp / "shared"):
        pass


RUN_CASES = {
    # resuming runs no code from the checkpoint
    "a pickle in optimizer.pt": (_poisoned("optimizer.pt"), Error(
        ckpt.CheckpointError, r"optimizer.pt holds something other than tensors.*never resume from a checkpoint you "
                              r"did not write"), _no_code_ran),
    "a pickle in scheduler.pt": (_poisoned("scheduler.pt"), Error(ckpt.CheckpointError, r"scheduler.pt holds"),
                                 _no_code_ran),
    "rng.pt and rollout.pt pickles (older checkpoints)": (_older_pickled_checkpoint, Error(
        ckpt.CheckpointError, r"older version that stored RNG and rollout state as pickles"), _no_code_ran),
    "a tampered rng.json": (_tampered_rng, Error(ckpt.CheckpointError, r"rng.json / rng.safetensors do not hold RNG"),
                            None),
    # resuming compares the config
    "resume with another learning_rate": (_resume_with(learning_rate=0.01), Error(
        ValueError, r"learning_rate: 0\.001 in the checkpoint, 0\.01 now.*Fields that may change on resume: max_steps"),
        None),
    "resume with another seed and G": (_resume_with(seed=6, num_generations=2), Error(
        ValueError, r"num_generations: 4 in the checkpoint, 2 now; seed: 5 in the checkpoint, 6 now"), None),
    "resume with more max_steps": (_resume_for_one_more_step, Documented(
        "allowed, with a warning about the schedule", lambda rows: [r["step"] for r in rows] == [1, 2, 3]), None),
    # an output folder holds one run
    "train again into a used folder": (_train_again(), Error(
        OutputDirError, r"is not empty \(it holds checkpoint-1, checkpoint-2, final, history.jsonl\).*"
                        r"resume_from='latest'.*overwrite_output_dir=True"), _history_untouched),
    "train again where a killed run saved no checkpoint": (_killed_before_saving, Error(
        OutputDirError, r"it holds history.jsonl\).*Fix: \(it holds no complete checkpoint to continue from\) "
                        r"replace it with overwrite_output_dir=True"), _history_untouched),
    "overwrite_output_dir=True": (_train_again(overwrite_output_dir=True, max_steps=1), Documented(
        "the earlier run's files are deleted first", lambda rows: [r["step"] for r in rows] == [1]),
        _only_the_new_run),
    "resume into the folder of another run": (_resume_into_another_run, Error(OutputDirError, r"is not empty"),
                                              _history_untouched),
    "two runs in one folder at once": (_two_runs_at_once, Error(OutputDirError, r"in use by another training run"),
                                       None),
}


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_runs_checkpoints_and_output_folders(case, tmp_path, first_run):
    run, outcome, after = RUN_CASES[case]
    _expect(outcome, lambda: run(tmp_path, first_run))
    if after is not None:
        after(tmp_path)


# =============================================================================================
# Data: held out, counted, read with the file and line at fault
# =============================================================================================
def _gsm8k_rows(count: int) -> list[dict]:
    return [{"question": f"Ann has {i} apples and buys {i % 7 + 1} more. How many now?",
             "answer": f"{i} + {i % 7 + 1} = {i + i % 7 + 1}\n#### {i + i % 7 + 1}"} for i in range(count)]


def _jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _questions(dataset) -> set[str]:
    return {prompt[-1]["content"] for prompt in dataset["prompt"]}


def _split_one_file(tmp: Path):
    file = _jsonl(tmp / "gsm8k.jsonl", _gsm8k_rows(200))
    with pytest.warns(SplitNotice, match=r"single file.*85% train and 15% test"):
        train = load_gsm8k(file, split="train")
    return train, load_gsm8k(file, split="test"), load_gsm8k(file, split="test")


def _held_out(result) -> bool:
    train, test, again = result
    return (len(train) + len(test) == 200 and 15 <= len(test) <= 45 and not _questions(train) & _questions(test)
            and _questions(again) == _questions(test))


def _folder_with_both(tmp: Path):
    rows = _gsm8k_rows(30)
    _jsonl(tmp / "g" / "train.jsonl", rows[:20])
    _jsonl(tmp / "g" / "test.jsonl", rows[20:])
    return [len(get_task(f"gsm8k:{tmp / 'g'}", split=split, n=None)) for split in ("train", "test")]


DATA_CASES = {
    "gsm8k:<one file> is split": (_split_one_file, Documented("disjoint, the same every time", _held_out)),
    "gsm8k:<folder> uses its files": (_folder_with_both, Documented("train.jsonl / test.jsonl",
                                                                    lambda sizes: sizes == [20, 10])),
    "gsm8k:<folder> without test.jsonl": (
        lambda tmp: load_gsm8k(_jsonl(tmp / "g" / "train.jsonl", _gsm8k_rows(5)).parent, split="test"),
        Error(DataError, r"No GSM8K file at .*test.jsonl.*Fix")),
    "an empty file": (lambda tmp: load_gsm8k(_jsonl(tmp / "e.jsonl", []), split="test"),
                      Error(DataError, r"holds no test rows")),
    "n=0": (lambda tmp: get_task(f"gsm8k:{_jsonl(tmp / 'g.jsonl', _gsm8k_rows(50))}", split="test", n=0),
            Error(DataError, r"n=0 is not a row count")),
    "n=-5 (not 'all but 5')": (lambda tmp: get_task("arithmetic", n=-5), Error(DataError, r"n=-5 is not a row count")),
    "n=2.5": (lambda tmp: get_task("arithmetic", n=2.5), Error(DataError, r"n=2.5 is not a whole number")),
    "n above the rows": (lambda tmp: load_gsm8k(_jsonl(tmp / "d" / "test.jsonl", _gsm8k_rows(3)).parent, split="test",
                                                n=10), Error(DataError, r"n=10 is more than the 3 test rows")),
    "accuracy of no rows": (lambda tmp: evaluate_accuracy(*load_policy("tiny"), get_task("arithmetic", n=3).select([])),
                            Error(ValueError, r"no rows, which has no accuracy")),
    "a malformed line": (lambda tmp: load_gsm8k(_jsonl(tmp / "bad.jsonl", [_gsm8k_rows(1)[0], '{"question": "2+2?"'])),
                         Error(DataError, r"bad.jsonl: line 2 is not JSON")),
    "a row without question": (lambda tmp: load_gsm8k(_jsonl(tmp / "bad.jsonl",
                                                             [{"prompt": "2+2?", "answer": "#### 4"}])),
                               Error(DataError, r"line 1 lacks 'question' \(it holds \['answer', 'prompt'\]\)")),
    "an answer without '####'": (lambda tmp: load_gsm8k(_jsonl(tmp / "bad.jsonl",
                                                               [{"question": "2+2?", "answer": "4"}])),
                                 Error(DataError, r"line 1: the answer has no '####")),
}


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_held_out_and_malformed_data(case, tmp_path):
    call, outcome = DATA_CASES[case]
    _expect(outcome, lambda: call(tmp_path))


# =============================================================================================
# Inputs read as they are meant; models that fail with the file at fault, fast
# =============================================================================================
def _long_prompt(max_prompt_length: int | None):
    def run(tmp: Path):
        model, tokenizer = load_policy("tiny")
        prompt = "What is " + " + ".join(str(i) for i in range(60)) + "?"  # ~240 tokens; the model has 128 positions
        sampling = SamplingConfig(max_tokens=8, seed=0, max_prompt_length=max_prompt_length)
        if max_prompt_length is None:
            return HFEngine(model, tokenizer).generate([prompt], n=2, sampling=sampling)
        with pytest.warns(PromptTruncationWarning, match=f"max_prompt_length={max_prompt_length}"):
            return HFEngine(model, tokenizer).generate([prompt], n=2, sampling=sampling)

    return run


def _model_copy(tmp: Path, damage: str) -> Path:
    folder = tmp / "model"
    shutil.copytree(TINY_DIR, folder)
    if damage == "weights":
        (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
    else:
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            (folder / name).unlink(missing_ok=True)
    return folder


def _hub_id(offline: bool):
    """Load a hub id that is not cached, offline or with the hub unreachable (a closed local port)."""

    def run(tmp: Path):
        started = time.monotonic()
        os.environ.update({"HF_HUB_OFFLINE": "1"} if offline else {
            "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"})
        try:
            load_policy("course-lib-tests/no-such-model")
        finally:
            (tmp / "seconds").write_text(str(time.monotonic() - started))

    return run


INPUT_CASES = {
    "a prompt past the model's positions": (_long_prompt(None), Error(
        ContextLengthError, r"prompts\[0\] has \d+ tokens; with max_tokens=8 .* at most 128\. Fix: set "
                            r"max_prompt_length <= 120")),
    "the same prompt with max_prompt_length": (_long_prompt(100), Documented(
        "left-truncated with a warning", lambda batch: batch.prompt_ids.shape[1] == 100)),
    "lora_target_modules='q_proj'": (lambda tmp: make_config("grpo", lora_target_modules="q_proj"), Error(
        ValueError, r"lora_target_modules='q_proj' is a str, not list\[str\]\. Fix: .*\['q_proj'\]")),
    "num_generations=2.5": (lambda tmp: make_config("grpo", num_generations=2.5),
                            Error(ValueError, r"num_generations=2.5 is a float, not int")),
    "num_generations=8.0": (lambda tmp: make_config("grpo", num_generations=8.0),
                            Error(ValueError, r"Fix: write it as a whole number, num_generations=8")),
    "use_lora='false'": (lambda tmp: make_config("grpo", use_lora="false"),
                         Error(ValueError, r"use_lora='false' is a str, not bool")),
    "ppo num_generations=0": (lambda tmp: make_config("ppo", num_generations=0), Error(
        ValueError, r"num_generations=0 is below 1: every prompt needs at least one completion\. Fix: set "
                    r"num_generations >= 1\.$")),
    "a truncated weight file": (lambda tmp: load_policy(_model_copy(tmp, "weights")), Error(
        ModelNotAvailableError, r"Could not read the weights .* damaged or truncated")),
    "a folder without tokenizer": (lambda tmp: load_policy(_model_copy(tmp, "tokenizer")), Error(
        ModelNotAvailableError, r"has no tokenizer files.*Fix")),
    "a hub id, offline": (_hub_id(offline=True), Error(ModelNotAvailableError, r"offline mode is on")),
    "a hub id, hub unreachable": (_hub_id(offline=False), Error(ModelNotAvailableError, r"the hub cannot be reached")),
}


@pytest.mark.parametrize("case", list(INPUT_CASES))
def test_inputs_read_as_meant(case, tmp_path, monkeypatch):
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the case, whatever it sets
    call, outcome = INPUT_CASES[case]
    _expect(outcome, lambda: call(tmp_path))
    if case.startswith("a hub id"):  # refused at once, not after a minute of retries
        assert float((tmp_path / "seconds").read_text()) < 10


# =============================================================================================
# The command line: status 2, ``error: ...`` with the fix, no traceback
# =============================================================================================
def _train_args(*extra: str) -> list[str]:
    return ["train", "--model", "tiny", "--task", "arithmetic", "--train-rows", "16", "--max-steps", "1",
            "--set", "per_device_train_batch_size=4", "--set", "num_generations=4", "--set", "max_completion_length=4",
            *extra]


CLI_RUN_CASES = {
    "train into a used --output-dir": (lambda tmp, first: _train_args("--output-dir", str(first)),
                                       r"is not empty.*Fix"),
    "--resume-from latest --set learning_rate=0.5": (lambda tmp, first: _train_args(
        "--output-dir", str(first), "--resume-from", "latest", "--set", "learning_rate=0.5"),
        r"learning_rate: 0\.001 in the checkpoint, 0\.5 now"),
    "--algo ppo --set num_generations=0": (lambda tmp, first: _train_args("--algo", "ppo",
                                                                          "--set", "num_generations=0"),
                                           r"num_generations >= 1\.\n"),
    "eval on malformed JSONL": (lambda tmp, first: ["eval", "--n", "1", "--task", "gsm8k:" + str(_jsonl(
        tmp / "g.jsonl", ['{"question": "1+1?", "answer": "#### 2"}', "{not json"]))], r"g.jsonl: line 2 is not JSON"),
    "eval on rows without answer": (lambda tmp, first: ["eval", "--n", "1", "--task", "gsm8k:" + str(_jsonl(
        tmp / "g.jsonl", [{"question": "1+1?"}]))], r"line 1 lacks 'answer'"),
    "eval a truncated weight file": (lambda tmp, first: ["eval", "--n", "1", "--model",
                                                         str(_model_copy(tmp, "weights"))],
                                     r"damaged or truncated"),
    "eval a folder without tokenizer": (lambda tmp, first: ["eval", "--n", "1", "--model",
                                                            str(_model_copy(tmp, "tokenizer"))], r"has no tokenizer"),
    "eval a hub id offline": (lambda tmp, first: ["eval", "--n", "1", "--model", "course-lib-tests/none"],
                              r"offline mode is on"),
    "eval --n 0": (lambda tmp, first: ["eval", "--n", "0"], r"argument --n: 0 is below 1"),
    "eval --n -3": (lambda tmp, first: ["eval", "--n", "-3"], r"argument --n: -3 is below 1"),
}


@pytest.mark.parametrize("case", list(CLI_RUN_CASES))
def test_command_line_runs_and_files(case, tmp_path, first_run, monkeypatch):
    from course_lib.__main__ import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv, message = CLI_RUN_CASES[case]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv(tmp_path, first_run))
        except SystemExit as stop:
            code = stop.code
    text = err.getvalue()
    assert code == 2, text
    assert "Traceback" not in text and "error: " in text and "sentencepiece" not in text
    assert re.search(message, text, re.S), text


def test_debug_shows_the_traceback():
    from course_lib.__main__ import main

    with pytest.raises(ValueError, match="learning_rate='fast'"):
        main(["--debug", *_train_args("--set", "learning_rate=fast")])


def test_every_table_case_has_an_outcome():
    """The count of cases by outcome (quoted in the reliability notes)."""
    outcomes = [o for _, o in CONFIG_CASES.values()] + [o for *_, o in ALGO_CASES.values()] + \
               [o for _, o in OVERRIDE_CASES.values()] + [o for _, o in REWARD_CASES.values()] + \
               [o for _, o in OTHER_CASES.values()] + [o for _, o, _ in RUN_CASES.values()] + \
               [o for _, o in DATA_CASES.values()] + [o for _, o in INPUT_CASES.values()]
    errors = sum(isinstance(o, Error) for o in outcomes) + len(CLI_CASES) + len(CLI_RUN_CASES)
    documented = sum(isinstance(o, Documented) for o in outcomes)
    assert errors + documented == len(outcomes) + len(CLI_CASES) + len(CLI_RUN_CASES)
    assert (errors, documented) == (99, 15)
