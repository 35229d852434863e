"""Tool rollouts against TRL 1.16's own rollout code, on identical inputs.

The same scripted turns go through ``course_lib``'s loop and through TRL's
``GRPOTrainer._tool_call_loop`` (called on a stand-in object that carries only the fields it
reads; generation is replaced by the same script). The two must agree on the completion ids,
the tool mask, the messages reward functions receive, and the call and failure counts: a
malformed block is plain text, ``"37"`` for an ``int`` parameter is converted, an unknown tool,
wrong arguments and a raising tool are failed calls with Python's / TRL's text, a dict result
reaches the model as ``str(dict)``. Token budgets are left large: there the two trainers
differ by design (TRL drops a round of results that does not fit, this library cuts it).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from course_lib.models import load_policy
from course_lib.rollout import SamplingConfig
from course_lib.rollout.agents import run_agent_rollouts
from course_lib.rollout.tool_calls import (TOOL_CHAT_TEMPLATE, parse_assistant_turn, prepare_for_trl,
                                           typed_arguments, tool_schema)
from course_lib.rollout.tools import Environments, ToolBox

trl_utils = pytest.importorskip("trl.chat_template_utils")
from trl import GRPOTrainer  # noqa: E402


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def lookup(key: str) -> dict:
    """Look a key up.

    Args:
        key: the key
    """
    if key == "boom":
        raise RuntimeError("no such shelf")
    return {"key": key, "found": True, "size": None}


TOOLS = [multiply, lookup]
CALL = '<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'
SCRIPTS = [
    # a string "37" for an int parameter, converted; a dict result; then an answer
    [CALL.format(name="multiply", arguments='{"a": "37", "b": 2}'), "It is 74.",],
    # two calls in one turn, one raising; then a malformed block, which is plain text
    ["Let me look." + CALL.format(name="lookup", arguments='{"key": "a"}')
     + CALL.format(name="lookup", arguments='{"key": "boom"}'), "<tool_call>{oops}</tool_call>"],
    # an unknown tool and wrong arguments, then text
    [CALL.format(name="nope", arguments="{}") + CALL.format(name="multiply", arguments='{"a": 1}'), "done"],
    # no call at all
    ["just text"],
]


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = load_policy("tiny")[1]
    return prepare_for_trl(tokenizer, TOOL_CHAT_TEMPLATE)


def _encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


class ScriptedRows:
    """Generation replaced by the script: the next turn of the row whose prompt the input starts with."""

    def __init__(self, tokenizer, prompts):
        self.tokenizer, self.prompts, self.turn = tokenizer, prompts, {}
        self.eos_ids, self.context_limit, self.record_logps = [tokenizer.eos_token_id], None, False

    def next_ids(self, ids):
        row = next(r for r, p in enumerate(self.prompts) if list(ids[:len(p)]) == p)
        turn = self.turn.get(row, 0)
        self.turn[row] = turn + 1
        return _encode(self.tokenizer, SCRIPTS[row][turn])

    def generate_from_ids(self, prompt_ids, sampling, seeds=None):
        return [self.next_ids(ids)[:sampling.max_tokens] for ids in prompt_ids], None


def _prompts(tokenizer):
    conversations = [[{"role": "user", "content": f"Question {i}?"}] for i in range(len(SCRIPTS))]
    ids = [tokenizer.apply_chat_template(c, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False)
           for c in conversations]
    return conversations, [list(i) for i in ids]


def _trl_rollout(tokenizer, conversations, prompt_ids, budget):
    """TRL's ``_tool_call_loop`` on the script: ``(completion_ids, tool_mask, completions, calls, failures)``."""
    engine = ScriptedRows(tokenizer, prompt_ids)
    first = [engine.next_ids(p) for p in prompt_ids]
    stand_in = SimpleNamespace(
        processing_class=tokenizer, _tokenizer=tokenizer, chat_template=None, chat_template_kwargs={}, _is_vlm=False,
        use_vllm=False, model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=10_000)),
        max_completion_length=budget, max_tool_calling_iterations=5, environment_factories=None, tools=TOOLS,
        _sync_tool_dicts=[{t.__name__: t for t in TOOLS} for _ in prompt_ids], _async_tool_dicts=[{} for _ in prompt_ids])
    stand_in._get_tool_suffix_ids = lambda messages: GRPOTrainer._get_tool_suffix_ids(stand_in, messages)
    stand_in._generate_single_turn = lambda ids, *_, **__: ([engine.next_ids(i) for i in ids], None)
    completions = [[trl_utils.parse_response(tokenizer, ids, prefix=p, tools=TOOLS)] for ids, p in zip(first, prompt_ids)]
    mask, completions, completion_ids, _, calls, failures, _ = GRPOTrainer._tool_call_loop(
        stand_in, copy.deepcopy(conversations), prompt_ids, [list(f) for f in first], completions, None, None, {})
    return completion_ids, mask, completions, calls, failures


def test_rollouts_match_trl_tool_call_loop(tokenizer):
    budget = 1000
    conversations, prompt_ids = _prompts(tokenizer)
    trl_ids, trl_mask, trl_completions, trl_calls, trl_failures = _trl_rollout(tokenizer, conversations, prompt_ids,
                                                                               budget)
    ours = run_agent_rollouts(ScriptedRows(tokenizer, prompt_ids), tokenizer, prompt_ids,
                              [ToolBox(TOOLS) for _ in prompt_ids], SamplingConfig(max_tokens=budget),
                              max_tool_calling_iterations=5, max_completion_length=budget, chat_template=None)
    for row, trajectory in enumerate(ours.trajectories):
        assert trajectory.completion_ids == trl_ids[row], f"row {row}: ids differ"
        assert trajectory.tool_mask == trl_mask[row], f"row {row}: tool masks differ"
        assert trajectory.messages == trl_completions[row], f"row {row}: messages differ"
    assert sum(t.calls for t in ours.trajectories) == trl_calls == 5
    assert sum(t.failures for t in ours.trajectories) == trl_failures == 3
    # The cases themselves, spelled out: "37" became 37, the dict reached the model as str(dict).
    first = ours.trajectories[0].messages
    assert first[0]["tool_calls"][0]["function"]["arguments"] == {"a": 37, "b": 2} and first[1]["content"] == "74"
    second = ours.trajectories[1].messages
    assert second[1]["content"] == str({"key": "a", "found": True, "size": None})
    assert second[-1] == {"role": "assistant", "content": "<tool_call>{oops}</tool_call>"}
    assert ours.trajectories[1].stop == "eos" and ours.trajectories[1].calls == 2


@pytest.mark.parametrize("text", [
    'Sure.<tool_call>{"name": "multiply", "arguments": {"a": "37", "b": " 4 "}}</tool_call>',
    '<tool_call>{"name": "multiply", "arguments": {"a": "3.0", "b": "x"}}</tool_call> then',
    'a <tool_call>{"name": "lookup", "arguments": {"key": 7}}</tool_call> b '
    '<tool_call>{"name": "lookup", "arguments": {"key": "k"}}</tool_call> c',
    '<tool_call>{"name": "multiply", "arguments": null}</tool_call>',
    '<tool_call>{"name": "multiply", "arguments": [1, 2]}</tool_call>',
    '<tool_call>{"name": "multiply", "arguments": "{\\"a\\": 1}"}</tool_call>',
    '<tool_call>{"name": 5}</tool_call>',
    '<tool_call>[1]</tool_call>',
    '<tool_call>{"name": "multiply"}',
    '<tool_call>{"name": "multiply", "arguments": {}}</tool_call><tool_call>bad</tool_call>',
    "The answer is 12.",
])
def test_a_turn_is_read_as_trl_reads_it(tokenizer, text):
    prompt = _prompts(tokenizer)[1][0]
    ids = _encode(tokenizer, text)
    expected = trl_utils.parse_response(tokenizer, ids, prefix=prompt, tools=TOOLS)
    shown = tokenizer.decode(ids, skip_special_tokens=True)
    ours = parse_assistant_turn(text, [tool_schema(t) for t in TOOLS], plain_text=shown).message()
    assert ours == expected


def test_argument_typing_follows_the_schema():
    schema = {"function": {"parameters": {"properties": {"n": {"type": "integer"}, "x": {"type": "number"},
                                                         "t": {"type": "boolean"}, "s": {"type": "string"}}}}}
    assert typed_arguments({"n": "37", "x": "7", "t": "true", "s": "5"}, schema) == {"n": 37, "x": 7, "t": True, "s": "5"}
    assert typed_arguments({"n": "3.0", "t": "yes", "other": "1"}, schema) == {"n": "3.0", "t": "yes", "other": "1"}


class Judge:
    """An environment whose reward is sometimes not defined."""

    def reset(self, verdict=None, **_):
        self.verdict = verdict

    def get_reward(self):
        return self.verdict


def test_get_reward_none_is_no_reward_as_in_trl():
    environments = Environments(Judge)
    instances = environments.instances([None, None])
    Environments.reset(instances, [{"verdict": None}, {"verdict": 1}], [0, 1])
    reward = environments.reward_functions()[0]
    assert reward(None, [[], []], environments=instances) == [None, 1.0]
    # TRL 1.16 turns a None reward into NaN and leaves it out of the weighted sum (nansum).
    from course_lib.rewards.combine import combine_rewards  # noqa: PLC0415
    total = combine_rewards([[None, 0.5], [1.0, 0.5]], [1.0, 1.0])  # the environment's, then another function's
    assert total.tolist() == [0.5, 1.5]
