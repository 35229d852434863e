"""Held-out evaluation of a tool-calling policy: final answers, call statistics, pairing.

The policy is a scripted engine whose turns are fixed per problem, so the expected
outcome of every problem is worked out by hand from its script.
"""

from __future__ import annotations

import re

import pytest
from datasets import Dataset

from course_lib.evaluation import lift_interval
from course_lib.models import load_policy
from course_lib.rollout.warmup import ScriptedPolicy
from course_lib.tool_evaluation import evaluate_tool_accuracy


def mul(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def call(a, b) -> str:
    return f'<tool_call>{{"name": "mul", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'


# Per question: the model's turns, in order. Expected outcome, worked by hand:
SCRIPTS = {
    "6*7": [call(6, 7), "It is 42."],          # call -> 42, answer 42: correct, 1 call
    "3*5": ["16"],                             # no call, wrong answer: wrong, 0 calls
    "2*9": ["<answer>18</answer>"],            # no call, tagged right answer: correct
    "4*4": ["<tool_call>{oops</tool_call>", "16"],  # malformed: plain text as in TRL, the final answer: wrong
    "8*3": [call(8, 3), call(3, 8)],           # calls again after the cap (1 round): no final answer: wrong
}
QUESTIONS = list(SCRIPTS)
ANSWERS = ["42", "15", "18", "16", "24"]
EXPECTED_CORRECT = [True, False, True, False, False]
EXPECTED_CALLS = [1, 0, 0, 0, 1]  # the capped call of "8*3" is not run
EXPECTED_FAILURES = [0, 0, 0, 0, 0]
EXPECTED_STOPS = ["eos", "eos", "eos", "eos", "iteration_cap"]


def respond(text: str) -> str:
    question = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", text)[-1]
    turn = text.count("<|im_start|>assistant\n") - 1
    return SCRIPTS[question][turn]


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny")


def _dataset(questions=QUESTIONS, answers=ANSWERS):
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q in questions], "answer": answers})


@pytest.mark.parametrize("batch_size", [1, 2, 32])
def test_outcomes_match_hand_worked_scripts(tiny, batch_size):
    model, tokenizer = tiny
    result = evaluate_tool_accuracy(model, tokenizer, _dataset(), tools=[mul], max_completion_length=200,
                                    max_tool_calling_iterations=1, batch_size=batch_size,
                                    engine=ScriptedPolicy(tokenizer, respond, context_limit=512))
    assert result.correct == EXPECTED_CORRECT
    assert result.calls == EXPECTED_CALLS
    assert result.failures == EXPECTED_FAILURES
    assert result.stops == EXPECTED_STOPS
    assert result.answers[0] == "It is 42." and result.answers[4] == ""
    assert result.accuracy == pytest.approx(2 / 5)
    assert result.call_frequency == pytest.approx(2 / 5)
    assert result.called_share == pytest.approx(2 / 5)
    assert result.failure_frequency == 0.0
    assert result.answers[3] == "<tool_call>{oops</tool_call>"
    assert "[tool: mul -> 42]" in result.texts[0]
    assert "40.0%" in result.summary()


def test_before_and_after_pair_by_problem(tiny):
    """Two evaluations of the same rows pair problem by problem in lift_interval."""
    model, tokenizer = tiny
    data = _dataset()
    before = evaluate_tool_accuracy(model, tokenizer, data, tools=[mul], max_completion_length=200,
                                    engine=ScriptedPolicy(tokenizer, respond, context_limit=512))
    fixed = dict(SCRIPTS, **{"3*5": [call(3, 5), "15"], "4*4": [call(4, 4), "16"], "8*3": [call(8, 3), "24"]})
    after = evaluate_tool_accuracy(model, tokenizer, data, tools=[mul], max_completion_length=200,
                                   engine=ScriptedPolicy(tokenizer, lambda t: respond_with(fixed, t), 512))
    assert after.correct == [True] * 5 and after.calls == [1, 1, 0, 1, 1]
    # differences 0, 1, 0, 1, 1: mean 0.6, sample sd sqrt(0.3), half width 1.96 sqrt(0.3/5)
    lift, low, high = lift_interval(before.correct, after.correct)
    assert lift == pytest.approx(0.6)
    assert high - lift == pytest.approx(1.959963984540054 * (0.3 / 5) ** 0.5)


def respond_with(scripts, text):
    question = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", text)[-1]
    return scripts[question][text.count("<|im_start|>assistant\n") - 1]


class Desk:
    """An environment whose tool answers from the row; reset sees the dataset columns."""

    seen: list = []

    def reset(self, a, b, **row):
        self.a, self.b = a, b
        Desk.seen.append((a, b, row["answer"]))

    def product(self) -> int:
        """The product of this problem's two numbers."""
        return self.a * self.b


def test_environment_factory_and_custom_correct_fn(tiny):
    model, tokenizer = tiny
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": "p"}]] * 2, "a": [6, 9], "b": [7, 9],
                              "answer": ["42", "80"]})

    def script(text):
        if "<|im_start|>tool" not in text:
            return '<tool_call>{"name": "product", "arguments": {}}</tool_call>'
        return "answer: " + text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]

    Desk.seen = []
    result = evaluate_tool_accuracy(model, tokenizer, data, environment_factory=Desk, max_completion_length=200,
                                    engine=ScriptedPolicy(tokenizer, script, context_limit=512))
    assert Desk.seen == [(6, 7, "42"), (9, 9, "80")]
    assert result.answers == ["answer: 42", "answer: 81"]
    assert result.correct == [True, False] and result.calls == [1, 1]
    # a correct_fn replaces the rule: here, "within 1 of the reference"
    close = evaluate_tool_accuracy(model, tokenizer, data, environment_factory=Desk, max_completion_length=200,
                                   correct_fn=lambda text, ref: abs(int(text.split()[-1]) - int(ref)) <= 1,
                                   engine=ScriptedPolicy(tokenizer, script, context_limit=512))
    assert close.correct == [True, True]


def test_real_model_runs_greedy_and_restores_training_mode(tiny):
    model, tokenizer = tiny
    model.config.max_position_embeddings = 512
    model.train()
    data = _dataset()
    first = evaluate_tool_accuracy(model, tokenizer, data, tools=[mul], max_completion_length=24)
    second = evaluate_tool_accuracy(model, tokenizer, data, tools=[mul], max_completion_length=24, batch_size=2)
    assert model.training
    assert len(first.correct) == 5 and first.answers == second.answers  # greedy: batching changes nothing


def test_bad_inputs_are_refused(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="tools or an environment_factory"):
        evaluate_tool_accuracy(model, tokenizer, _dataset())
    with pytest.raises(ValueError, match="answer_column"):
        evaluate_tool_accuracy(model, tokenizer, _dataset(), tools=[mul], answer_column="solution")
    with pytest.raises(ValueError, match="no rows"):
        evaluate_tool_accuracy(model, tokenizer, _dataset([], []), tools=[mul])


class Vault:
    """A game whose answer lives only in the environment: open the vault with the row's code."""

    def reset(self, code, **row):
        self.code, self.opened = int(code), False

    def open_vault(self, code: int) -> str:
        """Try a code.

        Args:
            code: the code to try
        """
        self.opened = self.opened or code == self.code
        return "open" if self.opened else "locked"

    def get_reward(self):
        return 1.0 if self.opened else (None if self.code < 0 else 0.0)


def test_scored_from_the_environment_state_without_an_answer_column(tiny):
    model, tokenizer = tiny
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"v{i}"}] for i in range(3)],
                              "code": [5, 6, -1]})
    tries = {"v0": 5, "v1": 7, "v2": 3}  # right, wrong, and a vault whose reward is undefined (None)

    def script(text):
        question = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", text)[-1]
        if "<|im_start|>tool" not in text:
            return f'<tool_call>{{"name": "open_vault", "arguments": {{"code": "{tries[question]}"}}}}</tool_call>'
        return "done"

    result = evaluate_tool_accuracy(model, tokenizer, data, environment_factory=Vault, score="environment",
                                    max_completion_length=200, engine=ScriptedPolicy(tokenizer, script, context_limit=512))
    # the code was written as a string: typed to int by the schema (TRL's reading), so "5" opens vault 5
    assert result.rewards == [1.0, 0.0, None] and result.correct == [True, False, False]
    assert result.rounds == [1, 1, 1] and result.rounds_per_problem == 1.0
    with pytest.raises(ValueError, match="score='environment'"):
        evaluate_tool_accuracy(model, tokenizer, data, tools=[mul], score="environment")


def test_evaluation_times_tools_out_as_training_does():
    import inspect

    from course_lib.config.rl_config import RLConfig
    default = inspect.signature(evaluate_tool_accuracy).parameters["tool_timeout"].default
    assert default == RLConfig.__dataclass_fields__["tool_timeout"].default == 30.0
