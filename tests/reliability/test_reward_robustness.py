"""Model text cannot stop a run through a reward, and a reward function cannot hang it or skew the others.

- The shipped rewards never raise on what a model writes: a number of any size
  (``1e999999999``, ten million digits) is read exactly, and ``2e5`` is 200000.
- ``compute_rewards`` gives every reward function a time limit naming it, private copies of
  its inputs, and turns values or weighted totals that overflow float32 into NaN with a
  warning instead of an ``OverflowError`` or a silent ``inf``.
"""

from __future__ import annotations

import threading
import time
import warnings

import pytest

from course_lib.algos import make_config
from course_lib.rewards import RewardFunctionError, compute_rewards
from course_lib.rewards import combine
from course_lib.rewards.extract import extract_first_number, extract_last_number, normalize_number, numbers_equal
from course_lib.rewards.registry import REWARD_FUNCTIONS

HOSTILE_TEXTS = {
    "huge exponent in the tag": "<answer>1e999999999</answer>",
    "huge exponent, upper case": "<answer>1E+999999999</answer>",
    "huge exponent in running text": "the answer is 1e999999999",
    "tiny exponent": "x 1.5e-999999999 y",
    "ten million digits in the tag": "<answer>" + "9" * 10_000_000 + "</answer>",
    "ten million digits": "9" * 10_000_000,
    "thirty digits": "123456789012345678901234567891",
}
TEXT_REWARDS = sorted(name for name in REWARD_FUNCTIONS if name != "code_execution_reward")


@pytest.mark.parametrize("name", TEXT_REWARDS)
def test_shipped_rewards_never_raise_on_model_text(name):
    function = REWARD_FUNCTIONS[name]
    for label, text in HOSTILE_TEXTS.items():
        forms = [text] if len(text) > 1000 else [text, [{"role": "assistant", "content": text}]]
        for completion in forms:
            try:
                scores = function(prompts=["p"], completions=[completion], answer=["72"])
            except Exception as error:  # noqa: BLE001 - the failure is the finding
                pytest.fail(f"{name} raised {type(error).__name__} on {label}: {error}")
            assert len(scores) == 1 and (scores[0] is None or isinstance(scores[0], float)), (label, scores)


def test_a_huge_number_is_a_number_and_a_wrong_answer():
    # number_reward: +1 when a number is present; correctness: wrong (72 is the reference).
    scores = REWARD_FUNCTIONS["number_reward"](completions=["<answer>1e999999999</answer>"])
    assert scores == [1.0]
    for name in ("correctness_reward", "correctness_first_number_reward", "correctness_last_number_reward"):
        assert REWARD_FUNCTIONS[name](completions=["<answer>1e999999999</answer>"], answer=["72"]) == [0.0], name
    # proximity: infinitely far is the floor (-0.5), never an error.
    assert REWARD_FUNCTIONS["proximity_reward"](completions=["1e999999999"], answer=["72"]) == [-0.5]


def test_scientific_notation_is_read_as_its_value():
    assert extract_first_number("so 2e5 apples") == "200000"
    assert extract_last_number("about 1.5E-3, or 2e5") == "200000"
    for name in ("correctness_first_number_reward", "correctness_last_number_reward", "correctness_reward"):
        assert REWARD_FUNCTIONS[name](completions=["<answer>2e5</answer>"], answer=["200000"]) == [1.0], name
    assert REWARD_FUNCTIONS["proximity_reward"](completions=["2e5"], answer=["200000"]) == [1.0]


def test_numbers_are_normalized_exactly_whatever_their_size():
    # Decimal.normalize() rounds to 28 digits: two different 30-digit numbers must stay apart.
    a, b = "123456789012345678901234567891", "123456789012345678901234567892"
    assert normalize_number(a) == a and normalize_number(b) == b
    assert not numbers_equal(a, b)
    assert normalize_number("1e999999999") == "1E+999999999"
    assert normalize_number("-2.50e-1200") == "-2.5E-1200"
    assert normalize_number("1,234.50") == "1234.5" and normalize_number("0.050") == "0.05"
    assert normalize_number("1e3") == "1000"


# --------------------------------------------------------------------------- compute_rewards


def test_a_reward_function_that_never_returns_is_stopped_and_named():
    release = threading.Event()

    def stuck_judge(prompts, completions, **kwargs):
        release.wait()  # a remote judge that never answers
        return [1.0] * len(completions)

    started = time.monotonic()
    try:
        with pytest.raises(RewardFunctionError, match=r"'stuck_judge' did not return within 0.5 s.*reward_timeout_s"):
            compute_rewards([stuck_judge], ["p"], ["c"], timeout_s=0.5)
    finally:
        release.set()
    assert time.monotonic() - started < 5


def test_an_async_reward_function_that_never_returns_is_stopped_and_named():
    import asyncio

    async def slow_async_judge(prompts, completions, **kwargs):
        await asyncio.sleep(3600)
        return [1.0] * len(completions)

    started = time.monotonic()
    with pytest.raises(RewardFunctionError, match=r"'slow_async_judge'.*did not return within 0.5 s"):
        compute_rewards([slow_async_judge], ["p"], ["c"], timeout_s=0.5)
    assert time.monotonic() - started < 5


def test_the_time_limit_is_a_config_field_and_is_checked():
    assert make_config("grpo").reward_timeout_s > 0
    assert make_config("grpo", reward_timeout_s=None).reward_timeout_s is None
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="reward_timeout_s"):
            make_config("grpo", reward_timeout_s=bad)
    with pytest.raises(ValueError, match="timeout_s"):
        compute_rewards([lambda prompts, completions, **k: [1.0]], ["p"], ["c"], timeout_s=0)


def test_a_reward_of_ten_to_the_400_is_nan_with_a_warning():
    def enormous(prompts, completions, **kwargs):
        return [10**400, 1.0, 1e39]

    with pytest.warns(combine.RewardOverflowWarning, match=r"'enormous' returned .* at sample index 0; treated as NaN"):
        per_func, total = compute_rewards([enormous], ["p"] * 3, ["a", "b", "c"])
    assert per_func[:, 0].isnan().tolist() == [True, False, True]
    assert total[1].item() == 1.0


def test_a_reward_function_that_edits_its_inputs_does_not_change_the_next_ones():
    seen = {}

    def vandal(prompts, completions, answer, **kwargs):
        answer[0] = "999"
        completions[0][0]["content"] = "edited"
        prompts[0][0]["content"] = "edited"
        return [0.0] * len(completions)

    def reader(prompts, completions, answer, **kwargs):
        seen.update(answer=list(answer), completion=completions[0][0]["content"], prompt=prompts[0][0]["content"])
        return [1.0] * len(completions)

    prompts = [[{"role": "user", "content": "2+2?"}]]
    completions = [[{"role": "assistant", "content": "4"}]]
    columns = {"answer": ["4"]}
    compute_rewards([vandal, reader], prompts, completions, columns)
    assert seen == {"answer": ["4"], "completion": "4", "prompt": "2+2?"}
    assert columns["answer"] == ["4"] and completions[0][0]["content"] == "4" and prompts[0][0]["content"] == "2+2?"


@pytest.mark.parametrize("weights, values", [([1e308, 1e308], [1.0, 1.0]), ([1.0, 1.0], [3e38, 3e38])])
def test_a_weighted_total_that_overflows_is_nan_with_a_warning(weights, values):
    first = lambda prompts, completions, **kwargs: [values[0]] * len(completions)  # noqa: E731
    second = lambda prompts, completions, **kwargs: [values[1]] * len(completions)  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, total = compute_rewards([first, second], ["p"], ["c"], weights=weights)
    assert any(issubclass(w.category, combine.RewardOverflowWarning) and "overflows float32" in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    assert total.isnan().all()


def test_a_training_run_stops_on_a_reward_that_never_returns(tmp_path):
    from tiny_runs import tiny_trainer

    release = threading.Event()

    def never_answers(prompts, completions, **kwargs):
        release.wait()
        return [0.0] * len(completions)

    trainer = tiny_trainer(tmp_path / "run", rewards=(never_answers,), reward_timeout_s=1.0, max_steps=1)
    try:
        with pytest.raises(RewardFunctionError, match=r"'never_answers' did not return within 1 s"):
            trainer.train()
    finally:
        release.set()


def test_a_reference_answer_of_nan_is_refused_naming_the_column():
    for name in ("correctness_reward", "proximity_reward", "correctness_first_number_reward"):
        with pytest.raises(RewardFunctionError, match=r"column 'answer' holds nan at row 1"):
            compute_rewards([REWARD_FUNCTIONS[name]], ["p", "p"], ["<answer>1</answer>", "1"],
                            {"answer": ["1", float("nan")]})


def test_the_time_limit_runs_the_call_in_place_in_the_main_thread_and_on_a_thread_elsewhere():
    import signal

    from course_lib.rewards.calling import RewardTimeout, call_with_timeout

    if not hasattr(signal, "setitimer") or signal.getsignal(signal.SIGALRM) != signal.SIG_DFL:
        pytest.skip("no free SIGALRM here: every call takes the thread path, tested above")
    ran_in = []
    assert call_with_timeout(lambda: ran_in.append(threading.current_thread()) or 7, 5.0, "f") == 7
    assert ran_in == [threading.main_thread()]  # no handoff to another thread
    release = threading.Event()
    started = time.monotonic()
    try:
        with pytest.raises(RewardTimeout, match="'stuck' did not return within 0.3 s"):
            call_with_timeout(release.wait, 0.3, "'stuck'")
    finally:
        release.set()
    assert time.monotonic() - started < 5
    # the signal and the timer are the program's again
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)

    # from another thread: the daemon-thread path, same error
    outcome = {}
    stuck = threading.Event()

    def from_a_thread():
        try:
            call_with_timeout(stuck.wait, 0.3, "'stuck'")
        except RewardTimeout as error:
            outcome["error"] = error

    worker = threading.Thread(target=from_a_thread)
    worker.start()
    worker.join(5)
    stuck.set()
    assert "did not return within 0.3 s" in str(outcome["error"])
