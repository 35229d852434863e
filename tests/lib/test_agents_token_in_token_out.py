"""Token in, token out, checked against the chat template itself.

Finished trajectories (a scripted model, the real tools, the real loop) are rendered back
through the template as conversations, and the ids compared with the ids the trajectory
holds: the only difference allowed is the template's text after the very last end-of-turn
token. A dropped separator at an assistant-to-tool boundary, or a tool turn rendered
differently from the suffix the loop appended, would show here as a named difference. Two
templates: the course's ChatML tool template (SmolLM2's in this library) and a Qwen2.5-style
one (TRL 1.16's copy of Qwen2.5's template: tools in the system turn, results inside a user
turn as ``<tool_response>``), both with SmolLM2's BPE tokenizer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from course_lib.models import ModelNotAvailableError, smollm2_folder
from course_lib.rollout import SamplingConfig
from course_lib.rollout.agents import rendering_differences, run_agent_rollouts
from course_lib.rollout.tool_calls import TOOL_CHAT_TEMPLATE
from course_lib.rollout.tools import ToolBox
from course_lib.rollout.warmup import ScriptedPolicy


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
    return {"key": key, "size": len(key)}


TOOLS = [multiply, lookup]
QUESTIONS = ["What is 37 * 45?", "Look up apple and pear, then multiply 6 by 7.", "Say hi.", "What is 2 * 3, twice?"]


def qwen_template() -> str:
    trl = pytest.importorskip("trl")
    path = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    if not path.exists():
        pytest.skip("TRL's Qwen2.5 template is not installed")
    return path.read_text()


def _call(name, arguments, qwen):
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call>" if qwen else f"<tool_call>{body}</tool_call>"


def script(qwen: bool):
    """Turns chosen by how many tool results the conversation holds so far."""
    joiner = "\n" if qwen else ""

    def respond(text: str) -> str:
        question = re.findall(r"user\n(.*?)<\|im_end\|>", text)[-1 if not qwen else -1]
        rounds = text.count("<tool_response>") if qwen else text.count("<|im_start|>tool")
        if "37" in question:
            return _call("multiply", {"a": 37, "b": 45}, qwen) if rounds == 0 else "The answer is 1665."
        if "apple" in question:
            if rounds == 0:
                return "Two lookups." + joiner + _call("lookup", {"key": "apple"}, qwen) + joiner + \
                    _call("lookup", {"key": "pear"}, qwen)
            return _call("multiply", {"a": 6, "b": 7}, qwen) if rounds == 2 else "Done: 42."
        if "2 * 3" in question:
            return _call("multiply", {"a": 2, "b": 3}, qwen) if rounds < 2 else "6, twice."
        return "Hi!"
    return respond


@pytest.fixture(scope="module")
def tokenizer():
    try:
        return AutoTokenizer.from_pretrained(smollm2_folder())
    except ModelNotAvailableError as error:
        pytest.skip(str(error))


@pytest.mark.parametrize("style", ["course", "qwen2.5"])
def test_every_trajectory_renders_to_its_own_ids(tokenizer, style):
    template = qwen_template() if style == "qwen2.5" else TOOL_CHAT_TEMPLATE
    qwen = style == "qwen2.5"
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS]
    prompt_ids = [list(tokenizer.apply_chat_template(p, tools=TOOLS, chat_template=template, add_generation_prompt=True,
                                                     tokenize=True, return_dict=False)) for p in prompts]
    out = run_agent_rollouts(ScriptedPolicy(tokenizer, script(qwen)), tokenizer, prompt_ids,
                             [ToolBox(TOOLS) for _ in prompts], SamplingConfig(max_tokens=400),
                             max_tool_calling_iterations=4, max_completion_length=400, chat_template=template)
    assert [t.rounds for t in out.trajectories] == [1, 2, 0, 2]
    assert all(t.stop == "eos" and t.failures == 0 for t in out.trajectories)
    for prompt, trajectory, ids in zip(prompts, out.trajectories, prompt_ids):
        differences = rendering_differences(tokenizer, prompt, trajectory, ids, tools=TOOLS, chat_template=template)
        assert differences == ["trailing: the template adds '\\n' after the last turn"], differences


def test_a_dropped_separator_is_named(tokenizer):
    """The bug class the check exists for: one separator lost at an assistant-to-tool boundary."""
    prompt = [{"role": "user", "content": QUESTIONS[0]}]
    ids = list(tokenizer.apply_chat_template(prompt, tools=TOOLS, chat_template=TOOL_CHAT_TEMPLATE,
                                             add_generation_prompt=True, tokenize=True, return_dict=False))
    out = run_agent_rollouts(ScriptedPolicy(tokenizer, script(False)), tokenizer, [ids], [ToolBox(TOOLS)],
                             SamplingConfig(max_tokens=200), max_tool_calling_iterations=2, max_completion_length=200,
                             chat_template=TOOL_CHAT_TEMPLATE)
    trajectory = out.trajectories[0]
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    boundary = trajectory.tool_mask.index(0)  # the first tool token: the separator after <|im_end|>
    assert trajectory.completion_ids[boundary:boundary + len(newline)] == newline
    del trajectory.completion_ids[boundary:boundary + len(newline)]
    del trajectory.tool_mask[boundary:boundary + len(newline)]
    differences = rendering_differences(tokenizer, prompt, trajectory, ids, tools=TOOLS,
                                        chat_template=TOOL_CHAT_TEMPLATE)
    assert len(differences) == 1 and differences[0].startswith(f"position {len(ids) + boundary} (tool tokens)")
