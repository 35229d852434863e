"""Embedded tasks: format, correctness of answers, disjoint splits, GSM8K loader."""
import re
from pathlib import Path

import pytest

from course_lib.data import TAGGED_EXAMPLE, arithmetic_dataset, get_task, gsm8k_answer, load_gsm8k, word_problem_dataset

GSM8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k"


def test_arithmetic_rows_are_conversational_with_correct_answers():
    data = arithmetic_dataset(50, operations=("+", "-", "*"), seed=1)
    assert set(data.column_names) >= {"prompt", "answer"}
    for row in data:
        assert row["prompt"] == [{"role": "user", "content": row["question"]}]
        a, op, b = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", row["question"]).groups()
        assert int(row["answer"]) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def test_splits_are_disjoint_and_seeds_reproducible():
    train = set(arithmetic_dataset(None, split="train")["question"])
    test = set(arithmetic_dataset(None, split="test")["question"])
    assert not train & test and len(train) + len(test) == 90 * 90
    assert 0.07 < len(test) / 8100 < 0.13
    assert arithmetic_dataset(20, seed=5)["question"] == arithmetic_dataset(20, seed=5)["question"]
    assert arithmetic_dataset(20, seed=5)["question"] != arithmetic_dataset(20, seed=6)["question"]


def test_tagged_prompts_carry_one_worked_example():
    row = get_task("arithmetic-tagged", n=1)[0]
    assert row["prompt"][0]["role"] == "system" and "<answer>" in row["prompt"][0]["content"]
    assert tuple(row["prompt"][1:3]) == TAGGED_EXAMPLE
    assert row["prompt"][-1]["role"] == "user"


def test_word_problems_answers_follow_the_story():
    data = word_problem_dataset(200, seed=0)
    for row in data:
        numbers = [int(n) for n in re.findall(r"\d+", row["question"])]
        assert int(row["answer"]) >= 0 and len(numbers) == 3
        a, b, c = numbers
        assert int(row["answer"]) in (a + b - c, a * b - c, a * b + c, a - b + c)


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="Known tasks"):
        get_task("nope")
    with pytest.raises(ValueError, match="operations"):
        arithmetic_dataset(5, operations=("/",))
    with pytest.raises(ValueError, match="lower n"):
        arithmetic_dataset(10_000, split="test")
    with pytest.raises(ValueError, match="####"):
        gsm8k_answer("no final answer")


def test_gsm8k_local_file_in_course_format():
    if not GSM8K.exists():
        pytest.skip("the shared GSM8K files are not beside this checkout")
    data = load_gsm8k(GSM8K, split="test", n=20, seed=0)
    assert len(data) == 20
    for row in data:
        assert row["solution"].rstrip().endswith(row["answer"]) or row["answer"] in row["solution"]
        assert re.fullmatch(r"-?[\d.]+", row["answer"])
    assert len(get_task(f"gsm8k:{GSM8K}", n=None)) == 7473  # the folder's own train.jsonl
    # one file is split by question: the held-out part never appears in training
    with pytest.warns(UserWarning, match="single file"):
        train = get_task(f"gsm8k:{GSM8K / 'train.jsonl'}", split="train", n=None)
    test = get_task(f"gsm8k:{GSM8K / 'train.jsonl'}", split="test", n=None)
    assert len(train) + len(test) == 7473 and 0.12 < len(test) / 7473 < 0.18
    assert not {p[-1]["content"] for p in train["prompt"]} & {p[-1]["content"] for p in test["prompt"]}


def test_sorting_rows_hold_the_sorted_list_and_splits_are_disjoint():
    train = get_task("sorting", split="train", n=300, seed=0)
    test = get_task("sorting", split="test", n=50, seed=0)
    for row in train:
        numbers = [int(n) for n in row["question"].removeprefix("Sort: ").split(", ")]
        assert len(numbers) == 3 and len(set(numbers)) == 3
        assert row["answer"] == ", ".join(str(n) for n in sorted(numbers))
        assert row["prompt"][-1] == {"role": "user", "content": row["question"]}
        assert "<answer>" in row["prompt"][0]["content"]
    assert not set(train["question"]) & set(test["question"])
    assert get_task("sorting", split="test", n=50, seed=0)["question"] == test["question"]
