"""Your own task, rewards and correctness rule by name: ``.jsonl`` files, ``module:function`` and
``file.py:function`` resolve to the rows and functions they name, and a name that does not
resolve says which and how to fix it."""

from __future__ import annotations

import json

import pytest

from course_lib.data import get_task
from course_lib.evaluation import evaluate_accuracy
from course_lib.rewards import get_reward_functions
from course_lib.common.user_code import UserCodeError, resolve_callable
from course_lib.common.user_tasks import TaskError

MODULE = '''
def rows(split="train", n=None):
    base = 0 if split == "train" else 100
    return [{"prompt": f"what is {base + i}?", "answer": base + i} for i in range(n or 5)]

def exact(prompts, completions, answer, **kw):
    return [1.0 if c == str(a) else 0.0 for c, a in zip(completions, answer)]

def always(completion, answer):
    return True

NOT_CALLABLE = 3
'''


@pytest.fixture()
def module_file(tmp_path):
    path = tmp_path / "my_task_mod.py"
    path.write_text(MODULE)
    return path


def test_a_jsonl_file_is_a_task_and_train_jsonl_finds_its_test_split(tmp_path):
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps({"prompt": f"q{i}", "answer": i}) for i in range(4)))
    (tmp_path / "test.jsonl").write_text(json.dumps({"prompt": [{"role": "user", "content": "t"}], "answer": 9}))
    train = get_task(str(tmp_path / "train.jsonl"), split="train", n=3)
    # A string prompt is TRL's standard format: kept as it is (no chat template), in training and evaluation.
    assert train["prompt"] == [f"q{i}" for i in range(3)] and train["answer"] == [0, 1, 2]
    test = get_task(str(tmp_path / "train.jsonl"), split="test", n=10)
    assert test["answer"] == [9]


def test_a_malformed_jsonl_line_is_named(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a", "answer": 1}\n{"answer": 2}\n')
    with pytest.raises(TaskError, match=r"rows.jsonl, line 2: no 'prompt' field"):
        get_task(str(path))
    path.write_text('{"prompt": "a"\n')
    with pytest.raises(TaskError, match=r"line 1 is not JSON"):
        get_task(str(path))


def test_a_task_function_gets_the_split_and_count_it_accepts(module_file):
    train = get_task(f"{module_file}:rows", split="train", n=3)
    test = get_task(f"{module_file}:rows", split="test", n=2, seed=4)  # seed not accepted: not passed
    assert train["answer"] == [0, 1, 2] and test["answer"] == [100, 101]


def test_own_rewards_and_correctness_resolve_by_file_or_module(module_file, monkeypatch):
    exact, = get_reward_functions([f"{module_file}:exact"])
    assert exact(None, ["1", "2"], answer=[1, 3]) == [1.0, 0.0]
    monkeypatch.syspath_prepend(str(module_file.parent))
    assert resolve_callable("my_task_mod.exact") is resolve_callable("my_task_mod:exact")


@pytest.mark.parametrize("reference, message", [
    ("nosuchmodule_xyz:f", r"no module 'nosuchmodule_xyz'"),
    ("{file}:missing", r"has no 'missing' \(its functions: always, exact, rows\)"),
    ("{file}:NOT_CALLABLE", r"is a int, not a function"),
    ("{dir}/absent.py:f", r"no file"),
    ("a b:c", r"is not module:function"),
])
def test_a_reference_that_does_not_resolve_says_why(reference, message, module_file):
    with pytest.raises(UserCodeError, match=message):
        resolve_callable(reference.format(file=module_file, dir=module_file.parent))


def test_evaluate_accuracy_takes_a_correctness_function(module_file):
    from course_lib.models import load_policy

    model, tokenizer = load_policy("tiny")
    rows = get_task(f"{module_file}:rows", n=3)
    always = resolve_callable(f"{module_file}:always")
    assert evaluate_accuracy(model, tokenizer, rows, max_new_tokens=2, correct_fn=always) == 1.0
    assert evaluate_accuracy(model, tokenizer, rows, max_new_tokens=2, correct_fn=lambda c, a: False) == 0.0


def test_in_loop_evaluation_uses_the_given_correctness_function(module_file, tmp_path):
    from course_lib.algos import make_config
    from course_lib.trainer import Trainer

    rows = get_task(f"{module_file}:rows", n=8)
    rewards = get_reward_functions([f"{module_file}:exact"])
    for name, rule, expected in (("a", resolve_callable(f"{module_file}:always"), 1.0), ("b", lambda c, a: False, 0.0)):
        config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path / name), max_steps=1,
                             per_device_train_batch_size=4, num_generations=2, max_completion_length=3,
                             eval_strategy="steps", eval_steps=1)
        trainer = Trainer(config, rewards, rows, eval_dataset=get_task(f"{module_file}:rows", split="test", n=3),
                          progress=False, correct_fn=rule)
        assert trainer.train()[-1]["eval/greedy_accuracy"] == expected
