"""Bad input, table-driven: every case ends in a clear error or a documented behaviour.

A clear error is an exception of the named type whose message names the culprit (the
field, the value or the function) and, where the table asks for it, the fix. A
documented behaviour is what the library's docstrings promise for that input (NaN for
"not applicable", a warning for an infinite reward...), checked here. No case may end in
an unrelated traceback, and none may produce a NaN that reaches the weights.

The tables are counted at the end of the module (``test_every_table_case_has_an_outcome``),
which is where the numbers in the reliability notes come from.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch

from course_lib.config import apply_overrides
from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.divergence import NonFiniteTrainingError, check_finite_update
from course_lib.models import ModelNotAvailableError, load_policy
from course_lib.rewards import RewardFunctionError, compute_rewards
from course_lib.rewards.combine import UnscorableSampleWarning


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
        outcome.check(call())


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
    "missing GSM8K file": (lambda: get_task("gsm8k:/no/such/file.jsonl"), Error(FileNotFoundError, r"/no/such/file.jsonl")),
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
    with pytest.raises(NonFiniteTrainingError, match=r"step 2: loss=nan.*checkpoint-1 \(resume with --resume-from latest\)"):
        trainer.train()
    assert trainer.step == 1
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())  # weights untouched


# --- the command line ------------------------------------------------------------------------

CLI_CASES = {
    "--set beta=nan": (["--set", "beta=nan"], r"beta=nan is not a finite number"),
    "--set nosuch=1": (["--set", "nosuch=1"], r"has no field 'nosuch'"),
    "--rewards nosuch": (["--rewards", "nosuch_reward"], r"unknown reward function 'nosuch_reward'"),
    "--task nosuch": (["--task", "nosuch"], r"Unknown task 'nosuch'"),
    "--task gsm8k:missing": (["--task", "gsm8k:/no/such.jsonl"], r"No GSM8K file at /no/such.jsonl"),
    "--model missing": (["--model", "/no/such/model"], r"Unknown model '/no/such/model'"),
    "--resume-from latest, none saved": (["--resume-from", "latest"], r"no complete checkpoint-<step> folder"),
    "--resume-from missing folder": (["--resume-from", "/no/such/checkpoint-3"],
                                     r"cannot resume from /no/such/checkpoint-3: it does not exist"),
    "--train-rows 0": (["--train-rows", "0"], r"train_dataset has 0 rows"),
    "--max-steps 0": (["--max-steps", "0"], r"max_steps=0"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_command_line_mistakes_end_in_one_clear_line(case, tmp_path):
    from course_lib.__main__ import main

    extra, message = CLI_CASES[case]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "--max-steps", "1", "--output-dir", str(tmp_path / "run"), *extra])
    text = err.getvalue()
    assert code == 2
    assert "Traceback" not in text
    assert "error: " in text and any(__import__("re").search(message, line) for line in text.splitlines()), text


def test_command_line_argument_types_are_checked_by_argparse():
    from course_lib.__main__ import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        main(["train", "--algo", "dpo"])
    assert exit_info.value.code == 2 and "invalid choice: 'dpo'" in err.getvalue()


def test_every_table_case_has_an_outcome():
    """The count of cases by outcome (quoted in the reliability notes)."""
    outcomes = [o for _, o in CONFIG_CASES.values()] + [o for *_, o in ALGO_CASES.values()] + \
               [o for _, o in OVERRIDE_CASES.values()] + [o for _, o in REWARD_CASES.values()] + \
               [o for _, o in OTHER_CASES.values()]
    errors = sum(isinstance(o, Error) for o in outcomes) + len(CLI_CASES)
    documented = sum(isinstance(o, Documented) for o in outcomes)
    assert errors + documented == len(outcomes) + len(CLI_CASES)
    assert (errors, documented) == (57, 10)

