"""The text side of tool calling: schemas, the chat template, parsing calls, rendering results.

A tool is a plain Python function with type hints and a Google-style docstring; its JSON
schema (``transformers.utils.get_json_schema``) is what the chat template writes into the
prompt, as in TRL 1.16 and the transformers chat-template convention.

Calls use the Hermes / Qwen convention, which most tool-tuned open models emit::

    <tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call>

and the model's turn then ends with its end-of-turn token. A result goes back to the model
as a ``{"role": "tool", "name": ..., "content": ...}`` message rendered by the chat template.

Templates. A model whose chat template already renders ``tools``, assistant ``tool_calls``
and ``tool`` messages (Qwen2.5 / Qwen3 style) keeps its own. The embedded models (the tiny
model and SmolLM2-135M-Instruct) have ChatML templates that know nothing of tools; they get
:data:`TOOL_CHAT_TEMPLATE`, a ChatML template of ours that lists each tool on one line
(``- name(arg: type, ...): description``: the tiny model reads at most 128 positions, so a
full JSON schema would not fit), writes calls in the convention above and opens a ``tool``
turn for each result. :func:`tool_chat_template` picks one of the two.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"

# ChatML with tools. The system turn lists the tools compactly; an assistant turn that calls
# tools writes one <tool_call> block per call after its text; a tool result is its own turn.
TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n' }}{%- endif %}"
    "{{- 'Tools:\\n' }}"
    "{%- for tool in tools %}{%- set f = tool['function'] if 'function' in tool else tool %}"
    "{{- '- ' + f['name'] + '(' }}"
    "{%- for name, spec in (f.get('parameters') or {}).get('properties', {}).items() %}"
    "{{- name + ': ' + (spec.get('type') or 'any') }}{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}"
    "{{- '): ' + (f.get('description') or '') + '\\n' }}"
    "{%- endfor %}"
    "{{- 'Call one with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.<|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] %}{%- set c = call['function'] if 'function' in call else call %}"
    "{{- '<tool_call>{\"name\": \"' + c['name'] + '\", \"arguments\": ' + (c['arguments'] | tojson) + '}</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tool_schema(function: Callable) -> dict:
    """The JSON schema of one tool, with a message naming the tool and the fix when it has none.

    Raises:
        ValueError: the function lacks type hints or a Google-style docstring for an argument.
    """
    from transformers.utils import get_json_schema

    name = getattr(function, "__name__", repr(function))
    try:
        return get_json_schema(function)
    except Exception as error:  # transformers raises its own DocstringParsingException / TypeHintParsingException
        raise ValueError(f"tool {name!r} has no usable schema ({error}). Fix: give every argument a type hint and "
                         "describe it under 'Args:' in a Google-style docstring, e.g. "
                         "'def add(a: int, b: int) -> int:\\n    \"\"\"Add two numbers.\\n\\n    Args:\\n"
                         "        a: first number\\n        b: second number\\n    \"\"\"'.") from error


def _renders_tools(tokenizer, template: str | None) -> bool:
    """Whether ``template`` writes the tool list, an assistant tool call and a tool result."""
    probe = [{"role": "user", "content": "q"},
             {"role": "assistant", "content": "",
              "tool_calls": [{"type": "function", "function": {"name": "probe_tool_xq", "arguments": {"k": 1}}}]},
             {"role": "tool", "name": "probe_tool_xq", "content": "RESULT_7Q"}]
    schema = {"type": "function", "function": {"name": "listed_tool_zq", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}
    try:
        text = tokenizer.apply_chat_template(probe, tools=[schema], chat_template=template, tokenize=False,
                                             add_generation_prompt=True)
    except Exception:
        return False
    return all(marker in text for marker in ("listed_tool_zq", "probe_tool_xq", "RESULT_7Q"))


def tool_chat_template(tokenizer) -> str | None:
    """The template a tool run renders with: ``None`` (the tokenizer's own) when it handles tools,
    else :data:`TOOL_CHAT_TEMPLATE`.

    Raises:
        ValueError: neither template can render a tool conversation with this tokenizer.
    """
    if getattr(tokenizer, "chat_template", None) and _renders_tools(tokenizer, None):
        return None
    if _renders_tools(tokenizer, TOOL_CHAT_TEMPLATE):
        return TOOL_CHAT_TEMPLATE
    raise ValueError("the tokenizer's chat template cannot render tools, tool calls and tool results, and the "
                     "course's ChatML tool template failed with it too. Fix: set tokenizer.chat_template to a "
                     "template that handles 'tools', assistant 'tool_calls' and 'tool' messages.")


@dataclass
class ToolCall:
    """One call found in a model turn; ``error`` is set when the block could not be read as a call."""

    name: str | None
    arguments: dict = field(default_factory=dict)
    error: str | None = None


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>{...}</tool_call>`` block of one assistant turn, in order.

    A block is malformed (``ToolCall.error`` says why) when its body is not JSON, is not an
    object, has no string ``name``, or has ``arguments`` that are not an object (a JSON
    string holding an object is accepted, as some models write one). An opening tag with no
    closing tag is malformed too. Text outside the blocks is ignored. Missing ``arguments``
    mean a call without arguments.
    """
    calls: list[ToolCall] = []
    position = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, position)
        if start < 0:
            return calls
        end = text.find(TOOL_CALL_CLOSE, start)
        if end < 0:
            calls.append(ToolCall(None, error=f"unterminated {TOOL_CALL_OPEN}: close the call with {TOOL_CALL_CLOSE}"))
            return calls
        calls.append(_read_call(text[start + len(TOOL_CALL_OPEN):end].strip()))
        position = end + len(TOOL_CALL_CLOSE)


def _read_call(body: str) -> ToolCall:
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as error:
        return ToolCall(None, error=f"the tool call is not valid JSON ({error.msg} at character {error.pos})")
    if not isinstance(payload, dict):
        return ToolCall(None, error="the tool call must be a JSON object with 'name' and 'arguments'")
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(None, error="the tool call has no 'name' string")
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCall(name, error=f"the arguments of {name!r} must be a JSON object")
    return ToolCall(name, arguments)


def result_suffix_text(tokenizer, template: str | None, results: Sequence[tuple[str, str]],
                       chat_template_kwargs: dict | None = None) -> str:
    """The text that follows a tool-calling turn's end-of-turn token: the tool messages of
    ``results`` (``(name, content)`` pairs) and the opening of the next assistant turn.

    Rendered by the chat template itself: a short conversation ending with a tool-calling
    assistant turn is rendered with and without the tool messages, and the difference after
    the last end-of-turn token of the shorter one is the suffix. So whatever the template
    writes between turns (a newline, a role header) is what the model is trained to read.
    """
    kwargs = dict(chat_template_kwargs or {})
    calls = [{"type": "function", "function": {"name": name, "arguments": {}}} for name, _ in results]
    head = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    tools = [{"role": "tool", "name": name, "content": content} for name, content in results]
    before = tokenizer.apply_chat_template(head, chat_template=template, tokenize=False, **kwargs)
    after = tokenizer.apply_chat_template(head + tools, chat_template=template, tokenize=False,
                                          add_generation_prompt=True, **kwargs)
    eos = tokenizer.eos_token or ""
    cut = before.rfind(eos) + len(eos) if eos and eos in before else len(before)
    if not after.startswith(before[:cut]):
        raise ValueError("the chat template renders an earlier turn differently once a tool message follows; "
                         "tool results cannot be appended token by token. Fix: use a prefix-preserving template.")
    return after[cut:]


def result_text(value) -> str:
    """What a tool returned, as the text the model reads: strings as they are, JSON for
    numbers, lists, dicts, booleans and None, ``str()`` for anything else."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def error_text(message: str) -> str:
    """The content of a failed call's result, in TRL's shape (``{'error': message}``)."""
    return str({"error": message})

