"""Reward functions and verifiers: hand-worked values, TRL's None/NaN rules, error messages.

Every expected number below is worked out by hand from the documented rule, in the
comment or the test name, not by calling the implementation.
"""

from __future__ import annotations

import math
import warnings
from decimal import Decimal

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.rewards import (
    REWARD_FUNCTIONS,
    RewardFunctionError,
    UnscorableSampleWarning,
    answer_tag_format_reward,
    code_execution_reward,
    completion_text,
    compute_rewards,
    correctness_reward,
    extract_answer_tag,
    extract_code_block,
    extract_first_number,
    extract_hash_answer,
    extract_last_number,
    extract_xml_answer,
    format_reward,
    get_reward_functions,
    gsm8k_correctness_reward,
    gsm8k_int_reward,
    gsm8k_soft_format_reward,
    gsm8k_strict_format_reward,
    gsm8k_xmlcount_reward,
    length_reward,
    make_correctness_reward,
    normalize_number,
    number_reward,
    numbers_equal,
    parse_number,
    parse_tests,
    predicate_reward,
    proximity_reward,
    rubric,
    think_answer_format_reward,
)


def chat(text: str) -> list[dict[str, str]]:
    """The conversational form of a completion."""
    return [{"role": "assistant", "content": text}]


def both_formats(texts: list[str]) -> list[list]:
    return [list(texts), [chat(t) for t in texts]]


# --- extraction ------------------------------------------------------------------------


def test_completion_text_reads_both_formats_and_content_blocks():
    assert completion_text("plain") == "plain"
    assert completion_text(chat("hi")) == "hi"
    two_turns = [{"role": "assistant", "content": "first"}, {"role": "tool", "content": "42"},
                 {"role": "assistant", "content": "final"}]
    assert completion_text(two_turns) == "final"
    blocks = [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert completion_text(blocks) == "ab"
    with pytest.raises(TypeError, match="completion must be"):
        completion_text(42)


def test_extract_answer_tag_takes_the_last_complete_pair():
    assert extract_answer_tag("<answer> 7 </answer> no, <answer>8</answer>") == "8"
    assert extract_answer_tag("<answer>\n12\n</answer>") == "12"
    assert extract_answer_tag("<answer>12") is None
    assert extract_answer_tag("no tags") is None


def test_extract_xml_answer_is_lenient_like_the_gsm8k_recipe():
    assert extract_xml_answer("<reasoning>\nr\n</reasoning>\n<answer>\n72\n</answer>\n") == "72"
    assert extract_xml_answer("<answer>5") == "5"
    assert extract_xml_answer("  72 ") == "72"  # no tag: the whole text


def test_extract_hash_answer():
    assert extract_hash_answer("48/2 = 24\n48+24 = 72\n#### 72") == "72"
    assert extract_hash_answer("#### 1,080") == "1,080"
    assert extract_hash_answer("no marker") is None


@pytest.mark.parametrize(
    "text, first, last",
    [
        ("I have 3 apples and 1,234.50 pears.", "3", "1234.5"),
        ("10-3=7", "10", "7"),  # binary minus is not a sign
        ("x = -3, so y = -0.5", "-3", "-0.5"),
        ("1,2,3", "1", "3"),  # not thousands groups
        ("costs $1,000,000 in 2024", "1000000", "2024"),
        ("no digits here", None, None),
    ],
)
def test_first_and_last_number(text, first, last):
    assert extract_first_number(text) == first
    assert extract_last_number(text) == last


@pytest.mark.parametrize(
    "raw, expected",
    [("1,234.50", "1234.5"), ("$72.00", "72"), ("-0", "0"), ("+5", "5"), ("1e3", "1000"), ("12.", "12"),
     (" 50% ", "50"), (7, "7"), (2.50, "2.5"), ("abc", None), ("1,2", None), ("", None), ("inf", None),
     ("nan", None), (True, None), (None, None)],
)
def test_normalize_number(raw, expected):
    assert normalize_number(raw) == expected


def test_numbers_equal_uses_tolerance_for_fractions_only():
    assert numbers_equal("1,080", "1080.0")
    assert numbers_equal(0.1 + 0.2, "0.3")
    assert not numbers_equal("1", "1.01")
    assert not numbers_equal("1000000", "1000001")  # a relative tolerance would accept this
    assert numbers_equal("12345678901234567890", "12345678901234567890.0")
    assert not numbers_equal("abc", "abc")


def test_extract_code_block_takes_the_last_python_block():
    text = "sketch:\n```python\nx = 1\n```\nfinal:\n```py\nx = 2\n```\n```bash\nls\n```"
    assert extract_code_block(text) == "x = 2\n"
    assert extract_code_block("```\nprint(1)\n```") == "print(1)\n"
    assert extract_code_block("no code") is None


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=-10**15, max_value=10**15), st.integers(min_value=0, max_value=99))
def test_numbers_survive_thousands_commas_in_text(whole, cents):
    written = f"{whole:,}.{cents:02d}"  # e.g. -1,234.05
    found = extract_last_number(f"The total is {written} dollars.")
    assert "," not in found
    assert parse_number(found) == Decimal(f"{whole}.{cents:02d}")


# --- format and length rewards -----------------------------------------------------------


@pytest.mark.parametrize("completions", both_formats(["x" * 25, "", "x" * 20]))
def test_length_reward_chars(completions):
    assert length_reward(ideal_length=20)(prompts=None, completions=completions) == [-5.0, -20.0, 0.0]


def test_length_reward_words_and_tokens():
    assert length_reward(2, unit="words")(completions=["a b c", "a"]) == [-1.0, -1.0]
    tokens = length_reward(5, unit="tokens")
    assert tokens(completions=["ignored", "ignored"], completion_ids=[[1, 2, 3], list(range(9))]) == [-2.0, -4.0]
    with pytest.raises(ValueError, match="completion_ids"):
        tokens(completions=["abc"])
    assert length_reward().__name__ == "length_reward"


@pytest.mark.parametrize(
    "completions",
    both_formats([
        "<think>step 1\nstep 2</think><answer>4</answer>",  # 1: multi-line reasoning is fine
        "<think>a</think>\n<answer>4</answer>",  # 0: nothing allowed between the blocks
        " <think>a</think><answer>4</answer>",  # 0: nothing before
        "<think>a</think><answer>4</answer>\n",  # 0: nothing after
        "<think>a</think>",  # 0: no answer
        "<think>a</think><answer>1</answer><answer>2</answer>",  # 0: two answers
    ]),
)
def test_format_reward_is_strict(completions):
    assert format_reward(prompts=None, completions=completions) == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "completions",
    both_formats([
        "<think>" + "r" * 21 + "</think>\n<answer>4</answer>",  # > 20 chars and an answer: 1.0
        "<think>" + "r" * 20 + "</think><answer>4</answer>",  # exactly 20: thin, 0.5
        "<think>" + "r" * 30 + "</think><answer>  </answer>",  # empty answer: 0.5
        "Sure! <think>" + "r" * 30 + "</think> <answer>4</answer> done",  # search, not match: 1.0
        "just 4",  # 0.0
    ]),
)
def test_think_answer_format_reward_gives_partial_credit(completions):
    assert think_answer_format_reward(completions=completions) == [1.0, 0.5, 0.5, 1.0, 0.0]


@pytest.mark.parametrize(
    "completions",
    both_formats(["12 + 7 = 19. <answer>19</answer>", "<answer> $1,200 </answer>",
                  "<answer>about 12</answer>", "19"]),
)
def test_answer_tag_format_reward(completions):
    assert answer_tag_format_reward(completions=completions) == [1.0, 1.0, 0.0, 0.0]


# --- answer rewards -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "completions",
    both_formats(["so <answer>1,080</answer>", "<answer>41</answer>", "42", "<answer>42.0</answer>",
                  "<answer>Paris</answer>"]),
)
def test_correctness_reward_reads_the_tag_and_the_answer_column(completions):
    answers = ["1080", "42", "42", "#### 42", " Paris"]
    # 1,080 == 1080; 41 != 42; no tag -> wrong; 42.0 == GSM8K "#### 42"; strings compare stripped
    assert correctness_reward(prompts=None, completions=completions, answer=answers) == [1.0, 0.0, 0.0, 1.0, 1.0]


def test_correctness_reward_none_reference_and_missing_column():
    assert correctness_reward(completions=["<answer>1</answer>"], answer=[None]) == [None]
    with pytest.raises(KeyError, match="'answer'.*columns given: \\['solution'\\]"):
        correctness_reward(completions=["<answer>1</answer>"], solution=["1"])


def test_correctness_extractors_and_the_plus_minus_three_example():
    completions = ["2 + 2 is 4", "4? no, 5"]
    last = make_correctness_reward("last_number")
    first = make_correctness_reward("first_number")
    assert last(completions=completions, answer=["4", "4"]) == [1.0, 0.0]  # 4; 5
    assert first(completions=completions, answer=["4", "4"]) == [0.0, 1.0]  # 2; 4
    either = make_correctness_reward("tag_or_first_number")
    assert either(completions=["7 or <answer>4</answer>", "4 then 7"], answer=["4", "4"]) == [1.0, 1.0]
    pm3 = make_correctness_reward("last_number", correct=3.0, incorrect=-3.0, name="pm3")
    assert pm3(completions=completions, answer=["4", "4"]) == [3.0, -3.0]
    assert pm3.__name__ == "pm3"
    with pytest.raises(ValueError, match="extractor must be one of"):
        make_correctness_reward("middle_number")


@pytest.mark.parametrize("completions", both_formats(["4", "C", "it is -10", "cat"]))
def test_number_reward_plus_one_for_any_number(completions):
    assert number_reward(completions=completions) == [1.0, -1.0, 1.0, -1.0]


def test_proximity_reward_shape():
    # y = 10: 1 - |x - 10| / 10, floored at -0.5; no number -> -1
    completions = ["10", "9", "3", "0", "20", "25", "1000", "cat"]
    expected = [1.0, 0.9, 0.3, 0.0, 0.0, -0.5, -0.5, -1.0]
    got = proximity_reward(completions=completions, answer=["10"] * len(completions))
    assert got == pytest.approx(expected)
    # y = 0: absolute distance (denominator max(|y|, 1) = 1)
    assert proximity_reward(completions=["0.5", "-2"], answer=["0", "0"]) == pytest.approx([0.5, -0.5])
    assert proximity_reward(completions=[chat("about 9")], answer=["#### 10"]) == pytest.approx([0.9])


# --- GSM8K family -----------------------------------------------------------------------

PERFECT = "<reasoning>\nStep 1: 48 / 2 = 24\nStep 2: 48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"


def _gsm8k_scores(text: str, answer: str) -> list[float]:
    funcs = [gsm8k_correctness_reward, gsm8k_int_reward, gsm8k_strict_format_reward,
             gsm8k_soft_format_reward, gsm8k_xmlcount_reward]
    return [f(prompts=["q"], completions=[chat(text)], answer=[answer])[0] for f in funcs]


@pytest.mark.parametrize(
    "text, answer, expected",
    [
        # correctness, int, strict, soft, xmlcount
        (PERFECT, "72", [2.0, 0.5, 0.5, 0.5, 0.5]),
        (PERFECT, "Natalia sold ... #### 72", [2.0, 0.5, 0.5, 0.5, 0.5]),
        (PERFECT.rstrip("\n"), "72", [2.0, 0.5, 0.0, 0.5, 0.5]),  # strict needs the final newline
        (PERFECT + "extra", "72", [2.0, 0.5, 0.0, 0.5, 0.5 - 0.005]),  # 5 trailing chars
        ("<reasoning>r</reasoning> <answer>72</answer>", "72", [2.0, 0.5, 0.0, 0.5, 0.0]),
        ("72", "72", [2.0, 0.5, 0.0, 0.0, 0.0]),  # the lenient extraction counts a bare answer
        ("<reasoning>\nr\n</reasoning>\n<answer>\n-3\n</answer>\n", "-3", [2.0, 0.0, 0.5, 0.5, 0.5]),
        ("<reasoning>\nr\n</reasoning>\n<answer>\n1080\n</answer>\n", "1,080", [2.0, 0.5, 0.5, 0.5, 0.5]),
        ("<reasoning>\nr\n</reasoning>\n<answer>\n71\n</answer>\n", "72", [0.0, 0.5, 0.5, 0.5, 0.5]),
        ("<reasoning>\n<reasoning>\nr\n</reasoning>\n<answer>\n7\n</answer>\n", "7", [2.0, 0.5, 0.0, 0.0, 0.375]),
    ],
)
def test_gsm8k_family_scores(text, answer, expected):
    assert _gsm8k_scores(text, answer) == pytest.approx(expected)


def test_gsm8k_family_accepts_string_completions():
    assert gsm8k_strict_format_reward(completions=[PERFECT]) == [0.5]
    assert gsm8k_xmlcount_reward(completions=[PERFECT]) == [0.5]


# --- rubric -----------------------------------------------------------------------------


def test_rubric_sums_weighted_checks_like_the_email_example():
    keywords = predicate_reward(lambda t: "invoice" in t.lower(), name="mentions_invoice")
    name = predicate_reward(lambda t: "Dear Ana" in t, name="greets_recipient")
    too_long = predicate_reward(lambda t: len(t) > 60, name="too_long")
    email = rubric(keywords, name, (-1.0, too_long), name="email_rubric")
    replies = ["Dear Ana, the invoice is attached.", "Hi, see attached.",
               "Dear Ana, the invoice is attached. " + "More words. " * 5]
    # 1 + 1 + 0 ; 0 + 0 + 0 ; 1 + 1 - 1
    assert email(completions=replies) == [2.0, 0.0, 1.0]
    assert email.__name__ == "email_rubric"


def test_rubric_skips_none_and_returns_none_when_nothing_applies():
    def only_first(completions, **kwargs):
        return [1.5] + [None] * (len(completions) - 1)

    def never(completions, **kwargs):
        return [None] * len(completions)

    combined = rubric((2.0, only_first), never)
    assert combined(completions=["a", "b"]) == [3.0, None]
    with pytest.raises(ValueError, match="at least one check"):
        rubric()


# --- compute_rewards: TRL's rules -------------------------------------------------------


def _constant(values, name):
    def reward(prompts, completions, **kwargs):
        return list(values)

    reward.__name__ = name
    return reward


def test_compute_rewards_weighted_nansum_and_unscorable_rows():
    f1 = _constant([1.0, None, 2.0, None], "f1")
    f2 = _constant([0.5, 3.0, float("nan"), None], "f2")
    f3 = _constant([None, None, 1.0, None], "f3")
    prompts, completions = ["p"] * 4, ["a", "b", "c", "d"]
    with pytest.warns(UnscorableSampleWarning, match="1 of 4 samples.*sample index 3"):
        per_func, total = compute_rewards([f1, f2, f3], prompts, completions, {}, weights=[2.0, 1.0, -1.0])
    nan = float("nan")
    expected = torch.tensor([[1.0, 0.5, nan], [nan, 3.0, nan], [2.0, nan, 1.0], [nan, nan, nan]])
    torch.testing.assert_close(per_func, expected, equal_nan=True)
    # row 0: 2*1 + 1*0.5 = 2.5; row 1: 3; row 2: 2*2 - 1*1 = 3; row 3: unscorable -> NaN (TRL 1.16)
    torch.testing.assert_close(total, torch.tensor([2.5, 3.0, 3.0, nan]), equal_nan=True)
    assert per_func.dtype == torch.float32 and per_func.shape == (4, 3) and total.shape == (4,)


def test_compute_rewards_default_weights_and_columns_by_name():
    completions = ["<answer>4</answer>", chat("<answer>5</answer>")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unscorable rows here: no warning
        per_func, total = compute_rewards([answer_tag_format_reward, correctness_reward],
                                          ["2+2?", "2+3?"], completions, {"answer": ["4", "6"]})
    torch.testing.assert_close(per_func, torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    torch.testing.assert_close(total, torch.tensor([2.0, 1.0]))


def test_compute_rewards_accepts_numpy_torch_and_bool_values_and_passes_extras():
    seen = {}

    def reads_everything(prompts, completions, completion_ids, trainer_state, **kwargs):
        seen["ids"], seen["state"] = completion_ids, trainer_state
        return [np.float64(0.25), torch.tensor(0.5), True]

    per_func, _ = compute_rewards([reads_everything], ["p"] * 3, ["a", "b", "c"],
                                  completion_ids=[[1], [2], [3]], extra_kwargs={"trainer_state": "s"})
    torch.testing.assert_close(per_func[:, 0], torch.tensor([0.25, 0.5, 1.0]))
    assert seen == {"ids": [[1], [2], [3]], "state": "s"}


def test_infinite_reward_becomes_nan_with_a_warning():
    with pytest.warns(RuntimeWarning, match="'blows_up' returned inf at sample index 1"):
        per_func, total = compute_rewards([_constant([1.0, math.inf], "blows_up"), _constant([0.0, 2.0], "ok")],
                                          ["p", "p"], ["a", "b"])
    assert math.isnan(per_func[1, 0]) and total.tolist() == [1.0, 2.0]


def test_raising_reward_names_function_sample_prompt_and_completion():
    def picky_reward(prompts, completions, **kwargs):
        scores = []
        for completion in completions:
            if "boom" in completion_text(completion):
                raise ValueError("cannot parse this one")
            scores.append(1.0)
        return scores

    long_tail = "x" * 500
    completions = ["fine", "also fine", "boom " + long_tail]
    prompts = ["first prompt", "second prompt", [{"role": "user", "content": "what is 6 * 7?"}]]
    with pytest.raises(RewardFunctionError) as caught:
        compute_rewards([picky_reward], prompts, completions, {"answer": ["1", "2", "42"]})
    message = str(caught.value)
    assert "'picky_reward'" in message and "ValueError: cannot parse this one" in message
    assert "sample index 2" in message and "what is 6 * 7?" in message and "boom xxx" in message
    assert "more chars" in message and len(message) < 1000  # the completion is truncated
    assert "'42'" in message  # the row's columns are shown
    assert isinstance(caught.value.__cause__, ValueError)


def test_batch_only_failure_is_reported_without_a_sample():
    def small_batches_only(prompts, completions, **kwargs):
        if len(completions) > 2:
            raise RuntimeError("batch too large")
        return [0.0] * len(completions)

    with pytest.raises(RewardFunctionError, match="(?s)'small_batches_only'.*too large.*no single sample fails"):
        compute_rewards([small_batches_only], ["p"] * 3, ["a", "b", "c"])


def test_wrong_length_and_bad_values_are_clear_errors():
    with pytest.raises(RewardFunctionError, match="'short' returned 1 rewards for 3 completions"):
        compute_rewards([_constant([1.0], "short")], ["p"] * 3, ["a", "b", "c"])
    with pytest.raises(RewardFunctionError, match="'wordy' returned 'high'.*sample index 1"):
        compute_rewards([_constant([1.0, "high"], "wordy")], ["p"] * 2, ["a", "b"])
    with pytest.raises(RewardFunctionError, match="'scalar' returned float"):
        compute_rewards([_scalar], ["p"], ["a"])


def _scalar(prompts, completions, **kwargs):
    return 1.0


_scalar.__name__ = "scalar"


def test_argument_errors_name_the_argument():
    with pytest.raises(ValueError, match="2 weights for 1 reward functions"):
        compute_rewards([number_reward], ["p"], ["1"], weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="column 'answer' has 1 values for 2 completions"):
        compute_rewards([number_reward], ["p", "p"], ["1", "2"], {"answer": ["1"]})
    with pytest.raises(ValueError, match="1 prompts for 2 completions"):
        compute_rewards([number_reward], ["p"], ["1", "2"])


# --- registry ----------------------------------------------------------------------------


def test_registry_names_match_function_names_and_lookup():
    assert all(name == function.__name__ for name, function in REWARD_FUNCTIONS.items())
    funcs = get_reward_functions(["answer_tag_format_reward", "gsm8k_int_reward", number_reward])
    assert funcs == [answer_tag_format_reward, gsm8k_int_reward, number_reward]
    with pytest.raises(ValueError, match="unknown reward function 'corectness'.*correctness_reward"):
        get_reward_functions(["corectness"])


def test_every_registered_reward_takes_both_formats_and_unknown_kwargs():
    texts = ["<think>" + "r" * 25 + "</think><answer>4</answer>", "nothing"]
    columns = {"answer": ["4", "5"], "tests": [None, None], "unrelated_column": [1, 2]}
    for name, function in REWARD_FUNCTIONS.items():
        as_text = function(prompts=["q", "q"], completions=texts, **columns)
        as_chat = function(prompts=[chat("q"), chat("q")], completions=[chat(t) for t in texts], **columns)
        assert as_text == as_chat and len(as_text) == 2, name


# --- code execution ----------------------------------------------------------------------


def test_code_execution_reward_fraction_of_tests_passed(working_sandbox):
    good = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"
    buggy = "```python\ndef add(a, b):\n    return a * b\n```"  # passes add(2, 2) only
    tests = ["assert add(2, 3) == 5", "assert add(2, 2) == 4"]
    completions = [good, chat(buggy), "no code at all", good]
    rewards = code_execution_reward(prompts=["p"] * 4, completions=completions,
                                    tests=[tests, tests, tests, None])
    assert rewards == [1.0, 0.5, 0.0, None]


def test_code_execution_reward_parses_tests_stored_as_json():
    assert parse_tests('[["3", "9"], ["4", "15"]]') == [("3", "9"), ("4", "15")]
    assert parse_tests("assert f(1) == 2") == ["assert f(1) == 2"]


def test_code_execution_reward_with_stdin_tests_stored_as_json(working_sandbox):
    program = "```python\nprint(int(input()) ** 2)\n```"
    tests = '[["3", "9"], ["4", "15"]]'
    assert code_execution_reward(completions=[program], tests=[tests]) == [0.5]


# --- against TRL on identical inputs -------------------------------------------------------


@pytest.mark.slow
def test_rewards_per_func_match_trl_calculate_rewards():
    """TRL 1.16's ``GRPOTrainer._calculate_rewards`` on a minimal stand-in trainer."""
    import types

    grpo = pytest.importorskip("trl.trainer.grpo_trainer")

    def partial_reward(prompts, completions, answer, **kwargs):
        return [None if a == "skip" else float(len(completion_text(c))) for c, a in zip(completions, answer)]

    funcs = [answer_tag_format_reward, correctness_reward, partial_reward, gsm8k_xmlcount_reward]
    prompts = [chat("q1"), chat("q1"), chat("q2"), chat("q2")]
    completions = [chat("<answer>4</answer>"), chat("4"), chat(PERFECT), chat("<answer>7</answer>x")]
    answers = ["4", "4", "skip", "72"]
    fake_trainer = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        reward_funcs=funcs, reward_processing_classes=[None] * len(funcs),
        reward_func_names=[f.__name__ for f in funcs], state=types.SimpleNamespace(global_step=0),
        args=types.SimpleNamespace(report_to=[]), _log_completion_extra=None, _log_metric=None,
        environments=None,
    )
    inputs = [{"prompt": p, "answer": a} for p, a in zip(prompts, answers)]
    trl_per_func = grpo.GRPOTrainer._calculate_rewards(fake_trainer, inputs, prompts, completions, [[0]] * 4)
    weights = torch.tensor([0.5, 2.0, 0.01, 1.0])
    trl_total = (trl_per_func * weights.unsqueeze(0)).nansum(dim=1)  # TRL's weighted sum

    per_func, total = compute_rewards(funcs, prompts, completions, {"answer": answers},
                                      weights=weights.tolist(), completion_ids=[[0]] * 4)
    torch.testing.assert_close(per_func, trl_per_func, equal_nan=True)
    torch.testing.assert_close(total, trl_total)
