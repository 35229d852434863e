"""GSM8K's prompt and its default rewards are one recipe: an answer in exactly the layout the
prompt asks for (its own worked example, and a real row answered the same way) earns the
maximum of the task's rewards, 2.0 + 0.5 + 0.5 + 0.5 + 0.5 = 4.0 (the table of
``course_lib.rewards.gsm8k``), and an answer in the format the prompt does not ask for earns less."""

from __future__ import annotations

import json

import pytest

from course_lib.data import GSM8K_EXAMPLE, get_task
from course_lib.presets import task_settings
from course_lib.rewards import compute_rewards, get_reward_functions

MAXIMUM = 2.0 + 0.5 + 0.5 + 0.5 + 0.5


def _total(completion: str, answer: str) -> float:
    functions = get_reward_functions(task_settings("gsm8k")["rewards"])
    _, total = compute_rewards(functions, [[{"role": "user", "content": "q"}]],
                               [[{"role": "assistant", "content": completion}]], {"answer": [answer]})
    return float(total[0])


@pytest.fixture()
def gsm8k_rows(tmp_path):
    rows = [{"question": "A farmer has 12 cows and buys 30 more. How many cows now?",
             "answer": "He has 12 + 30 = <<12+30=42>>42 cows.\n#### 42"},
            {"question": "Sam reads 15 pages a day for 4 days. How many pages?",
             "answer": "15 * 4 = <<15*4=60>>60\n#### 60"}]
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return get_task(f"gsm8k:{tmp_path}", split="train", n=2, seed=0)


def test_the_prompts_own_example_earns_the_maximum(gsm8k_rows):
    prompt = gsm8k_rows[0]["prompt"]
    example = [m["content"] for m in prompt if m["role"] == "assistant"]
    assert example == [GSM8K_EXAMPLE[1]["content"]]  # the prompt shows the layout it asks for
    assert _total(example[0], "7") == MAXIMUM


def test_a_real_row_answered_in_the_prompts_layout_earns_the_maximum(gsm8k_rows):
    for row in gsm8k_rows:
        reasoning = row["solution"].split("####")[0].strip()
        completion = f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{row['answer']}\n</answer>\n"
        assert _total(completion, row["answer"]) == MAXIMUM


def test_an_answer_tag_alone_earns_less_than_the_layout(gsm8k_rows):
    row = gsm8k_rows[0]
    assert _total(f"<answer>{row['answer']}</answer>", row["answer"]) < MAXIMUM
