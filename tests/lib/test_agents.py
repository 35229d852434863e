"""Multi-turn tool rollouts: the loop's ids, masks and metrics, and every bad input's behaviour.

The loop is driven by a scripted engine (each row's turns are fixed text), so the expected
ids are built independently: the tokenizer's encoding of each scripted turn plus its eos,
and the encoding of the tool-result text written out by hand for the shipped template.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from course_lib.models import load_policy
from course_lib.rollout import SamplingConfig
from course_lib.rollout.agents import run_agent_rollouts, tool_metrics
from course_lib.rollout.tool_calls import (TOOL_CHAT_TEMPLATE, ToolCall, parse_tool_calls, result_suffix_text,
                                           tool_chat_template, tool_schema)
from course_lib.rollout.tools import EnvironmentResetError, Environments, ToolBox, append_observation


@pytest.fixture(scope="module")
def tokenizer():
    return load_policy("tiny")[1]


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def divide(a: int, b: int) -> float:
    """Divide a by b.

    Args:
        a: dividend
        b: divisor
    """
    return a / b


def shout(text: str) -> str:
    """Repeat a text many times.

    Args:
        text: what to repeat
    """
    return text * 400


def slow(seconds: float) -> str:
    """Sleep, then answer.

    Args:
        seconds: how long to sleep
    """
    time.sleep(seconds)
    return "done"


async def slow_async(seconds: float) -> str:
    """Sleep without blocking, then answer.

    Args:
        seconds: how long to sleep
    """
    await asyncio.sleep(seconds)
    return "done"


def as_dict(key: str) -> dict:
    """Return a dict.

    Args:
        key: the key
    """
    return {key: [1, 2]}


class ScriptedEngine:
    """Returns fixed turns: ``script[row][turn]`` text, encoded, plus eos unless it ends with '|cut'."""

    record_logps = True

    def __init__(self, tokenizer, script, context_limit=None):
        self.tokenizer, self.script, self.context_limit = tokenizer, script, context_limit
        self.eos_ids = [tokenizer.eos_token_id]
        self.turn = {}
        self.calls = []

    def encode(self, text):
        cut = text.endswith("|cut")
        ids = self.tokenizer(text.removesuffix("|cut"), add_special_tokens=False)["input_ids"]
        return ids if cut else ids + self.eos_ids

    def generate_from_ids(self, prompt_ids, sampling, seeds=None):
        self.calls.append([list(p) for p in prompt_ids])
        outs, logps = [], []
        for ids in prompt_ids:
            row = self.row_of(ids)
            turn = self.turn.get(row, 0)
            self.turn[row] = turn + 1
            out = self.encode(self.script[row][turn])[:sampling.max_tokens]
            outs.append(out)
            logps.append([-0.25] * len(out))
        return outs, logps

    def row_of(self, ids):
        for row, prompt in enumerate(self.prompts):
            if ids[:len(prompt)] == prompt:
                return row
        raise AssertionError("unknown prompt")


def _prompts(tokenizer, texts):
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def _run(tokenizer, script, prompts_text, tools, *, cap=5, budget=400, context_limit=None, timeout=None):
    engine = ScriptedEngine(tokenizer, script, context_limit)
    engine.prompts = _prompts(tokenizer, prompts_text)
    out = run_agent_rollouts(engine, tokenizer, engine.prompts, [ToolBox(tools, timeout=timeout)] * len(script),
                             SamplingConfig(max_tokens=budget), max_tool_calling_iterations=cap,
                             max_completion_length=budget, chat_template=TOOL_CHAT_TEMPLATE)
    return engine, out


def _tool_turn(tokenizer, *results):
    """What the shipped template writes after a tool-calling turn's <|im_end|>, written out by hand."""
    text = "\n" + "".join(f"<|im_start|>tool\n{content}<|im_end|>\n" for content in results) + "<|im_start|>assistant\n"
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_hand_built_trajectory_two_calls_one_failure(tokenizer):
    call_1 = '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>'
    call_2 = '<tool_call>{"name": "divide", "arguments": {"a": 1, "b": 0}}</tool_call>'
    script = [[call_1, call_2, "It is 12."], ["7"]]
    engine, out = _run(tokenizer, script, ["A?", "B?"], [multiply, divide])
    eos = tokenizer.eos_token_id
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    tool_1, tool_2 = _tool_turn(tokenizer, "12"), _tool_turn(tokenizer, "{'error': 'division by zero'}")
    expected = enc(call_1) + [eos] + tool_1 + enc(call_2) + [eos] + tool_2 + enc("It is 12.") + [eos]
    expected_mask = ([1] * (len(enc(call_1)) + 1) + [0] * len(tool_1) + [1] * (len(enc(call_2)) + 1)
                     + [0] * len(tool_2) + [1] * (len(enc("It is 12.")) + 1))
    row = out.batch.completion_ids[0, :len(expected)].tolist()
    assert row == expected
    assert out.tool_mask[0, :len(expected)].tolist() == expected_mask
    assert out.batch.completion_mask[0].tolist() == [1] * len(expected) + [0] * (out.batch.completion_ids.shape[1] - len(expected))
    assert out.batch.completion_ids[1, :2].tolist() == enc("7") + [eos]
    assert out.tool_mask[1, :2].tolist() == [1, 1] and out.batch.completion_mask[1, 2:].sum() == 0
    # Sampling log-probs: the engine's on model tokens, 0 on tool tokens.
    logps = out.batch.sampling_logps[0, :len(expected)]
    assert torch.equal(logps, torch.tensor([-0.25 if m else 0.0 for m in expected_mask]))
    # Token in, token out: every later turn's input is the earlier ids, unchanged.
    assert engine.calls[1][0] == engine.prompts[0] + expected[:len(enc(call_1)) + 1 + len(tool_1)]
    trajectory = out.trajectories[0]
    assert (trajectory.calls, trajectory.failures, trajectory.stop) == (2, 1, "eos")
    assert [m["role"] for m in trajectory.messages] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert trajectory.messages[1] == {"role": "tool", "name": "multiply", "content": "12"}
    assert trajectory.messages[0]["tool_calls"][0]["function"] == {"name": "multiply", "arguments": {"a": 3, "b": 4}}
    assert "[tool: multiply -> 12]" in out.batch.texts[0] and out.batch.texts[1] == "7"
    metrics = tool_metrics(out.calls, out.failures, out.capped)
    assert metrics["tools/call_frequency"] == 1.0  # 2 calls over 2 completions
    assert metrics["tools/failure_frequency"] == 0.5  # 1 of 2 calls failed
    assert metrics["tools/iteration_cap_ratio"] == 0.0
    assert out.batch.is_eos.tolist() == [True, True]


def test_shipped_template_renders_the_suffix_written_by_hand(tokenizer):
    text = result_suffix_text(tokenizer, TOOL_CHAT_TEMPLATE, [("f", "1"), ("g", "two")])
    assert text == "\n<|im_start|>tool\n1<|im_end|>\n<|im_start|>tool\ntwo<|im_end|>\n<|im_start|>assistant\n"


def test_tool_template_choice(tokenizer):
    assert tool_chat_template(tokenizer) == TOOL_CHAT_TEMPLATE  # the tiny model's ChatML knows no tools

    class Aware:  # a tokenizer whose own template renders tools (Qwen style) keeps it
        chat_template = "own"

        def apply_chat_template(self, messages, tools=None, chat_template=None, **_):
            text = "".join(str(t) for t in tools or [])
            for m in messages:
                text += m.get("content") or ""
                text += "".join(c["function"]["name"] for c in m.get("tool_calls", []))
            return text
    assert tool_chat_template(Aware()) is None
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "q"}], tools=[multiply],
                                             chat_template=TOOL_CHAT_TEMPLATE, tokenize=False, add_generation_prompt=True)
    assert "- multiply(a: integer, b: integer): Multiply two integers.\n" in rendered
    assert rendered.endswith("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")


def test_parse_tool_calls_good_and_malformed():
    calls = parse_tool_calls('x <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call> y '
                             '<tool_call>\n{"name": "g", "arguments": "{\\"b\\": 2}"}\n</tool_call>')
    assert [(c.name, c.arguments, c.error) for c in calls] == [("f", {"a": 1}, None), ("g", {"b": 2}, None)]
    assert parse_tool_calls("no call here") == []
    assert "not valid JSON" in parse_tool_calls("<tool_call>{name: f}</tool_call>")[0].error
    assert "no 'name'" in parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>')[0].error
    assert "JSON object" in parse_tool_calls('<tool_call>[1, 2]</tool_call>')[0].error
    assert "must be a JSON object" in parse_tool_calls('<tool_call>{"name": "f", "arguments": 3}</tool_call>')[0].error
    assert "unterminated" in parse_tool_calls('<tool_call>{"name": "f"')[0].error
    assert parse_tool_calls('<tool_call>{"name": "f"}</tool_call>')[0].arguments == {}


def _python_error(function, **arguments):
    """The message Python itself raises for this call (TRL 1.16 shows the model exactly that)."""
    try:
        function(**arguments)
    except Exception as error:  # noqa: BLE001
        return str({"error": str(error)})
    raise AssertionError("the call did not fail")


@pytest.mark.parametrize("call,expected", [
    (ToolCall(None, error="the tool call is not valid JSON"), "{'error': 'the tool call is not valid JSON'}"),
    (ToolCall("nope", {}), "{'error': 'Tool nope not found.'}"),  # TRL's ValueError text, in its dict
    (ToolCall("multiply", {"a": 1}), _python_error(multiply, a=1)),
    (ToolCall("multiply", {"a": 1, "b": 2, "c": 3}), _python_error(multiply, a=1, b=2, c=3)),
    (ToolCall("divide", {"a": 1, "b": 0}), "{'error': 'division by zero'}"),
])
def test_bad_calls_become_failed_results(call, expected):
    result = ToolBox([multiply, divide, slow, as_dict]).call(call)
    assert result.failed and result.content == expected


def test_arguments_that_are_not_an_object_fail_when_called():
    result = ToolBox([multiply]).call(ToolCall("multiply", [1, 2]))
    assert result.failed and "argument after ** must be a mapping, not list" in result.content


def test_results_converted_to_text():
    """TRL 1.16 writes ``str(result)``: Python's form, not JSON."""
    box = ToolBox([multiply, as_dict])
    assert box.call(ToolCall("multiply", {"a": 6, "b": 7})).content == "42"
    assert box.call(ToolCall("as_dict", {"key": "k"})).content == "{'k': [1, 2]}"


@pytest.mark.parametrize("tool", [slow, slow_async])
def test_hanging_tool_times_out_and_counts_as_failure(tool):
    started = time.monotonic()
    result = ToolBox([tool], timeout=0.3).call(ToolCall(tool.__name__, {"seconds": 30}))
    assert time.monotonic() - started < 5
    assert result.failed and "timed out after 0.3 s" in result.content
    assert ToolBox([tool], timeout=5).call(ToolCall(tool.__name__, {"seconds": 0.01})).content == "done"


def test_undocumented_tool_refused_with_the_fix():
    def bare(a):
        return a
    with pytest.raises(ValueError, match="'bare' has no usable schema.*type hint"):
        tool_schema(bare)
    with pytest.raises(ValueError, match="timeout"):
        ToolBox([multiply], timeout=0)


def test_huge_result_is_cut_to_the_token_budget(tokenizer):
    call = '<tool_call>{"name": "shout", "arguments": {"text": "ab"}}</tool_call>'
    budget = 160
    _, out = _run(tokenizer, [[call, "ok"]], ["Q"], [shout], budget=budget)
    trajectory = out.trajectories[0]
    assert len(trajectory.completion_ids) == budget  # the cut result leaves room for model tokens only
    assert trajectory.stop == "length" and trajectory.tool_mask[-1] == 1
    content = trajectory.messages[1]["content"]
    assert "tokens cut]" in content and content.startswith("abab") and len(content) < 800
    assert trajectory.tool_mask.count(0) > 20


def test_no_room_for_results_ends_the_trajectory_unappended(tokenizer):
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>'
    length = len(tokenizer(call, add_special_tokens=False)["input_ids"]) + 1
    _, out = _run(tokenizer, [[call, "never"]], ["Q"], [multiply], budget=length + 5)
    trajectory = out.trajectories[0]
    assert trajectory.stop == "budget" and trajectory.completion_ids[-1] == tokenizer.eos_token_id
    assert len(trajectory.completion_ids) == length and 0 not in trajectory.tool_mask


def test_context_limit_bounds_the_trajectory(tokenizer):
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>'
    _, out = _run(tokenizer, [[call, "x" * 50 + "|cut"]], ["Q"], [multiply], context_limit=100)
    assert len(out.trajectories[0].completion_ids) + 1 <= 100
    assert out.trajectories[0].stop == "length" and not out.batch.is_eos[0]


def test_iteration_cap_reached_is_marked(tokenizer):
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>'
    _, out = _run(tokenizer, [[call, call, call, "done"]], ["Q"], [multiply], cap=2)
    trajectory = out.trajectories[0]
    assert trajectory.stop == "iteration_cap" and trajectory.calls == 2
    assert trajectory.completion_ids[-1] == tokenizer.eos_token_id  # the third call's turn, not run
    assert tool_metrics(out.calls, out.failures, out.capped)["tools/iteration_cap_ratio"] == 1.0
    _, uncapped = _run(tokenizer, [[call, call, call, "done"]], ["Q"], [multiply], cap=None)
    assert uncapped.trajectories[0].calls == 3 and uncapped.trajectories[0].stop == "eos"


def test_malformed_call_is_plain_text_and_unknown_call_is_answered(tokenizer):
    """TRL 1.16: a turn with a malformed block is plain text (no call, the trajectory ends);
    a well-formed call to an unknown tool is a failed call answered with TRL's message."""
    script = [["<tool_call>{oops}</tool_call>", "never"],
              ['<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "x"]]
    _, out = _run(tokenizer, script, ["Q", "R"], [multiply])
    malformed, unknown = out.trajectories
    assert (malformed.calls, malformed.failures, malformed.stop) == (0, 0, "eos")
    assert malformed.messages == [{"role": "assistant", "content": "<tool_call>{oops}</tool_call>"}]
    assert (unknown.calls, unknown.failures, unknown.stop) == (1, 1, "eos")
    assert unknown.messages[1]["content"] == "{'error': 'Tool nope not found.'}"


def test_a_cut_turn_is_not_parsed(tokenizer):
    _, out = _run(tokenizer, [['<tool_call>{"name": "multiply", "arguments": {"a": 1, "b": 2}}</tool_call>|cut']],
                  ["Q"], [multiply])
    assert out.trajectories[0].calls == 0 and out.trajectories[0].stop == "length"


class Counter:
    """A stateful environment: count up, rewarded for reaching the target."""

    def reset(self, target=3, **_):
        self.target, self.value = target, 0
        return f" Reach {target}."

    def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: how much to add
        """
        self.value += step
        return self.value

    def get_reward(self) -> float:
        return float(self.value == self.target)


class Broken:
    def reset(self, **row):
        raise KeyError("board")


def test_environment_instances_tools_reset_and_reward():
    envs = Environments(Counter)
    instances = envs.instances([None, None, None])
    assert len({id(i) for i in instances}) == 3 and envs.instances([None])[0] is instances[0]  # pooled
    observations = envs.reset(instances, [{"target": 2}, {"target": 5}, {}], [10, 11, 12])
    assert observations == [" Reach 2.", " Reach 5.", " Reach 3."]
    box = ToolBox(__import__("course_lib.rollout.tools", fromlist=["x"]).public_methods(instances[0]))
    assert list(box.tools) == ["increment"]
    box.call(ToolCall("increment", {"step": 2}))
    (reward,) = envs.reward_functions()
    assert reward.__name__ == "Counter"
    assert reward(None, None, environments=instances) == [1.0, 0.0, 0.0]
    assert append_observation([{"role": "user", "content": "Go."}], " Reach 2.") == [{"role": "user", "content": "Go. Reach 2."}]


def test_reset_raising_names_the_row():
    envs = Environments({"counter": Counter, "broken": Broken})
    with pytest.raises(EnvironmentResetError, match=r"Broken.reset failed on dataset row 7 .*KeyError"):
        envs.reset(envs.instances(["counter", "broken"]), [{}, {"x": 1}], [3, 7])


def test_environment_column_naming_no_environment_refused():
    envs = Environments({"counter": Counter})
    envs.check_names(["counter", "counter"])
    with pytest.raises(ValueError, match=r"names \['chess'\].*has \['counter'\]"):
        envs.check_names(["counter", "chess"])
    with pytest.raises(ValueError, match="no reset method"):
        Environments(lambda: object())


def _reencode_mismatches(model_name: str, rows: int = 8) -> int:
    """Sample ``rows`` completions, decode each, encode the text again: how many ids differ."""
    from course_lib.models import ModelNotAvailableError
    from course_lib.rollout import HFEngine

    try:
        model, tokenizer = load_policy(model_name)
    except ModelNotAvailableError as error:
        pytest.skip(str(error))
    engine = HFEngine(model, tokenizer)
    prompts = [[{"role": "user", "content": "What is 37 times 45? Think step by step."}]] * rows
    batch = engine.generate(prompts, 1, SamplingConfig(max_tokens=48, seed=0, temperature=1.0))
    mismatches = 0
    for ids, mask in zip(batch.completion_ids, batch.completion_mask):
        ids = ids[mask.bool()].tolist()
        mismatches += tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"] != ids
    return mismatches


def test_decode_then_encode_changes_sampled_ids_on_smollm2():
    """Why the loop never re-encodes: on SmolLM2's BPE tokenizer a sampled completion, decoded
    and encoded again, is not always the sampled ids (measured: 2 of 8 rows at temperature 1,
    e.g. a sampled 'ĊĊ' + '1' comes back as 'Ċ' 'Ċ' '1'); training on the re-encoded ids would
    score tokens the model never drew. The tiny model's vocabulary is one token per character,
    so there the round trip is exact."""
    assert _reencode_mismatches("smollm2") >= 1


def test_decode_then_encode_is_exact_on_the_character_level_tiny_model():
    assert _reencode_mismatches("tiny") == 0


def test_python_tool_runs_model_code_in_the_sandbox():
    from course_lib.rollout.tools import python_tool
    from course_lib.sandbox import SandboxUnavailableError

    try:
        run = python_tool(timeout_s=2.0)
    except SandboxUnavailableError:
        pytest.skip("no OS isolation on this machine (python_tool refuses, as tested below)")
    box = ToolBox([run])
    assert box.call(ToolCall("run_python", {"code": "print(6 * 7)"})).content == "42\n"
    escape = box.call(ToolCall("run_python", {"code": "open('/etc/hostname').read()"}))
    assert escape.failed
    hang = box.call(ToolCall("run_python", {"code": "while True: pass"}))
    assert hang.failed and "timeout" in hang.content


def test_python_tool_is_refused_without_isolation(monkeypatch):
    import course_lib.sandbox as sandbox
    from course_lib.rollout.tools import python_tool

    missing = sandbox.Isolation(mode=None, reason="bwrap not found")
    monkeypatch.setattr(sandbox, "detect_isolation", lambda: missing)
    with pytest.raises(sandbox.SandboxUnavailableError, match="bwrap not found"):
        python_tool()


def test_multi_turn_rollout_on_hf_reads_the_tool_result():
    """After a (scripted) tool call, the HF engine continues from the trajectory's ids: its
    recorded log-probs are those of a plain forward pass over prompt, call and result."""
    from course_lib.rollout import HFEngine, tokenize_prompts

    model, tokenizer = load_policy("tiny")
    engine = HFEngine(model, tokenizer)
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>'

    class FirstTurnCalls:
        eos_ids, context_limit, record_logps, turn = engine.eos_ids, engine.context_limit, True, 0

        def generate_from_ids(self, ids, sampling, seeds=None):
            FirstTurnCalls.turn += 1
            if FirstTurnCalls.turn == 1:
                out = [tokenizer(call, add_special_tokens=False)["input_ids"] + self.eos_ids for _ in ids]
                return out, [[0.0] * len(o) for o in out]
            return engine.generate_from_ids(ids, sampling, seeds)

    prompt_ids = tokenize_prompts(tokenizer, [[{"role": "user", "content": "6*7="}], [{"role": "user", "content": "9"}]])
    out = run_agent_rollouts(FirstTurnCalls(), tokenizer, prompt_ids, [ToolBox([multiply])] * 2,
                             SamplingConfig(temperature=1.0, max_tokens=100, seed=5), max_tool_calling_iterations=1,
                             max_completion_length=100, chat_template=TOOL_CHAT_TEMPLATE)
    for row, trajectory in enumerate(out.trajectories):
        assert trajectory.calls == 1 and trajectory.messages[1]["content"] == "42"
        ids = torch.tensor(prompt_ids[row] + trajectory.completion_ids)
        with torch.no_grad():
            logits = model(ids[None]).logits[0, len(prompt_ids[row]) - 1:-1]
        reference = torch.log_softmax(logits.float(), -1).gather(1, ids[len(prompt_ids[row]):, None])[:, 0]
        answer = [t for t in range(trajectory.tool_mask.index(0), len(trajectory.tool_mask)) if trajectory.tool_mask[t]]
        assert answer
        torch.testing.assert_close(torch.tensor(trajectory.logps)[answer], reference[answer], atol=1e-4, rtol=0)


class Greeter:
    """An environment whose reset adds to the prompt."""

    def reset(self, name, **row):
        self.name = name
        return f" (you are {name})"

    def greet(self, polite: bool) -> str:
        """Greet the user.

        Args:
            polite: whether to be formal
        """
        return ("Good day, " if polite else "Hi, ") + self.name


async def shout_async(text: str) -> str:
    """Shout a text.

    Args:
        text: what to shout
    """
    return text.upper()


def test_tool_run_renders_tools_appends_reset_text_and_runs_async_tools(tokenizer):
    from course_lib.rollout.tool_run import ToolRun
    from course_lib.rollout.warmup import ScriptedPolicy

    def respond(text):
        if "<|im_start|>tool" in text:
            return "done"
        return ('<tool_call>{"name": "greet", "arguments": {"polite": true}}</tool_call>'
                '<tool_call>{"name": "shout_async", "arguments": {"text": "hey"}}</tool_call>')

    columns = {"prompt": [[{"role": "user", "content": "Hello"}]] * 2, "name": ["Ada", "Bo"]}
    run = ToolRun([shout_async], Greeter, tokenizer, columns, max_tool_calling_iterations=2, tool_timeout=5,
                  max_completion_length=200)
    out = run.rollout(ScriptedPolicy(tokenizer, respond, context_limit=512), tokenizer, columns["prompt"],
                      {"name": columns["name"]}, rows=[4, 9], sampling=SamplingConfig(max_tokens=200))
    prompt = tokenizer.decode(out.agent.batch.prompt_ids[1][out.agent.batch.prompt_mask[1].bool()])
    assert "- shout_async(text: string): Shout a text.\n" in prompt
    assert "- greet(polite: boolean): Greet the user.\n" in prompt
    assert prompt.endswith("<|im_start|>user\nHello (you are Bo)<|im_end|>\n<|im_start|>assistant\n")
    messages = out.completions[1]
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["Good day, Bo", "HEY"]
    assert messages[-1] == {"role": "assistant", "content": "done"}
    assert out.reward_kwargs["environments"][0].name == "Ada"
    assert columns["prompt"][1] == [{"role": "user", "content": "Hello"}]  # the dataset row is untouched


def test_reset_returning_a_non_string_is_refused_with_the_row():
    class Odd:
        def reset(self, **row):
            return 42
    with pytest.raises(EnvironmentResetError, match="Odd.reset returned a int on dataset row 5; return None or a string"):
        Environments.reset([Odd()], [{}], [5])
