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
turn for each result (:data:`COMPACT_TOOL_CHAT_TEMPLATE` for models of at most 256 positions).
:func:`tool_chat_template` picks one.

Reading a turn follows TRL 1.16 (:func:`parse_assistant_turn`, checked against TRL's
``parse_response`` and tool loop in ``tests/lib/test_agents_trl_parity.py``), and
:func:`prepare_for_trl` gives a tokenizer the template and the ``response_template`` that TRL's
``GRPOTrainer`` needs to accept these templates at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"

# Everything after the system turn, shared by both templates: the system message when there are no
# tools, then each turn in ChatML, an assistant's calls as ``<tool_call>{...}</tool_call>``.
_CHATML_TURNS = (
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
    + _CHATML_TURNS
)


# The same ChatML tool format, as short as a 128-position model needs: the system turn names each
# tool with its argument names (``tools: multiply(a,b)``) and nothing else. The tiny model's default.
COMPACT_TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\ntools:' }}"
    "{%- for tool in tools %}{%- set f = tool['function'] if 'function' in tool else tool %}"
    "{{- ' ' + f['name'] + '(' + ((f.get('parameters') or {}).get('properties', {}) | list | join(',')) + ')' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    + _CHATML_TURNS
)

#: A model whose context is at most this many positions gets :data:`COMPACT_TOOL_CHAT_TEMPLATE`.
COMPACT_CONTEXT = 256

# How TRL 1.16 reads a model turn written in the format of the two templates above: transformers'
# ``response_template`` (``tokenizer.parse_response``). TRL sets one only for chat templates it
# recognises (``trl.chat_template_utils.add_response_schema``) and refuses any other
# ("Unrecognized chat template"); a tokenizer that already carries one is accepted as it is.
TOOL_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open": TOOL_CALL_OPEN, "close_pattern": r"</tool_call>\s*", "repeats": True,
                       "content": "json", "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def prepare_for_trl(tokenizer, template: str | None = None, context_limit: int | None = None):
    """Make ``tokenizer`` one that TRL 1.16's ``GRPOTrainer(tools=... / environment_factory=...)`` accepts,
    with the same template this library renders with; returns the tokenizer (changed in place).

    TRL checks two things at construction: the chat template renders a whole tool exchange
    (``supports_tool_calling``), and the tokenizer can read calls back out of the model's text
    (a ``response_template``, which TRL adds itself only for templates it knows). The embedded
    models' ChatML templates fail the first; the course's tool templates pass it, and
    :data:`TOOL_RESPONSE_TEMPLATE` gives the second. A tokenizer whose own template renders
    tools (Qwen2.5, Qwen3, ...) is left as it is: TRL knows those.

    Args:
        template: the chat template to set; default :func:`tool_chat_template`'s choice for
            ``context_limit`` (the model's positions: the compact template at 256 or fewer).

    Raises:
        ImportError: transformers older than 5.13 (no ``response_template``).
    """
    import transformers
    from packaging.version import Version

    chosen = template if template is not None else tool_chat_template(tokenizer, context_limit)
    if chosen is None:
        return tokenizer
    if Version(transformers.__version__) < Version("5.13.0.dev0"):
        raise ImportError(f"prepare_for_trl sets tokenizer.response_template, which transformers "
                          f"{transformers.__version__} does not read. Fix: pip install 'transformers>=5.13'.")
    tokenizer.chat_template = chosen
    tokenizer.response_template = TOOL_RESPONSE_TEMPLATE
    return tokenizer


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


def tool_chat_template(tokenizer, context_limit: int | None = None) -> str | None:
    """The template a tool run renders with: ``None`` (the tokenizer's own) when it handles tools,
    else :data:`COMPACT_TOOL_CHAT_TEMPLATE` for a model of at most :data:`COMPACT_CONTEXT` positions
    (``context_limit``; the tiny model reads 128) and :data:`TOOL_CHAT_TEMPLATE` for the others.

    Raises:
        ValueError: neither template can render a tool conversation with this tokenizer.
    """
    if getattr(tokenizer, "chat_template", None) and _renders_tools(tokenizer, None):
        return None
    ours = (COMPACT_TOOL_CHAT_TEMPLATE if context_limit is not None and context_limit <= COMPACT_CONTEXT
            else TOOL_CHAT_TEMPLATE)
    if _renders_tools(tokenizer, ours):
        return ours
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
    """Every ``<tool_call>{...}</tool_call>`` block of one assistant turn, in order, each with the
    reason it is malformed if it is (a diagnostic: rollouts read turns with
    :func:`parse_assistant_turn`, where one malformed block makes the whole turn plain text).

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


@dataclass
class AssistantTurn:
    """One model turn read as TRL 1.16 reads it (``trl.chat_template_utils.parse_response``).

    ``content`` is the turn's text without its calls; ``calls`` its well-formed calls, arguments
    typed by the tool's schema. A turn with any malformed block has no calls at all: TRL then
    keeps the whole turn as plain text (``plain`` True), the trajectory ends there, and
    nothing counts as a call or a failure.
    """

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    plain: bool = False

    def message(self) -> dict:
        """The chat message TRL hands reward functions for this turn."""
        message = {"role": "assistant", "content": self.content}
        if self.calls:
            message["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                     for c in self.calls]
        return message


_JSON_TYPES = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
               "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
               "boolean": lambda v: isinstance(v, bool), "array": lambda v: isinstance(v, list),
               "object": lambda v: isinstance(v, dict), "null": lambda v: v is None}


def typed_arguments(arguments, schema: dict | None):
    """Arguments typed by the tool's JSON schema, as transformers' response parser types them for TRL:
    a string given for a non-string parameter becomes the JSON value it spells when that value has
    the parameter's type (``"37"`` -> 37 for an integer, ``"1.5"`` -> 1.5 for a number, ``"true"``
    -> True for a boolean); anything else, and every other argument, stays as written."""
    if not isinstance(arguments, dict) or not schema:
        return arguments
    properties = (schema.get("function", schema).get("parameters") or {}).get("properties", {})
    typed = {}
    for key, value in arguments.items():
        kind = (properties.get(key) or {}).get("type")
        if isinstance(value, str) and kind in _JSON_TYPES:
            try:
                parsed = json.loads(value.strip())
            except (json.JSONDecodeError, ValueError):
                parsed = value
            value = parsed if _JSON_TYPES[kind](parsed) else value
        typed[key] = value
    return typed


def parse_assistant_turn(text: str, schemas: Sequence[dict] | None = None, plain_text: str | None = None
                         ) -> AssistantTurn:
    """Read one model turn (its end-of-turn token removed) the way TRL 1.16 does.

    - every ``<tool_call>...</tool_call>`` block must hold a JSON object with a string ``name``;
      if one does not (or a block is not closed), the turn is plain text (``plain_text``, TRL's
      ``decode(ids, skip_special_tokens=True)``, default ``text``) with no calls;
    - ``arguments`` missing or ``null`` mean ``{}``; any other value is kept (a list or a string is
      then refused by Python when the tool is called, a failed call, as in TRL);
    - arguments are typed with ``schemas`` (:func:`typed_arguments`);
    - ``content``: the text after the last call when there is any, else the text before the
      first, stripped (transformers' parser keeps one of the two, not both).
    """
    blocks, position, outside = [], 0, []
    while True:
        start = text.find(TOOL_CALL_OPEN, position)
        if start < 0:
            outside.append(text[position:])
            break
        end = text.find(TOOL_CALL_CLOSE, start)
        if end < 0:
            return AssistantTurn((plain_text if plain_text is not None else text).strip(), plain=True)
        outside.append(text[position:start])
        blocks.append(text[start + len(TOOL_CALL_OPEN):end].strip())
        position = end + len(TOOL_CALL_CLOSE)
    if not blocks:
        return AssistantTurn(text.strip())
    by_name = {(s.get("function", s)).get("name"): s for s in schemas or []}
    calls = []
    for body in blocks:
        try:
            payload = json.loads(body)
        except json.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return AssistantTurn((plain_text if plain_text is not None else text).strip(), plain=True)
        arguments = payload.get("arguments")
        arguments = {} if arguments is None else arguments
        calls.append(ToolCall(payload["name"], typed_arguments(arguments, by_name.get(payload["name"]))))
    content = outside[-1].strip() or outside[0].strip()
    return AssistantTurn(content, calls)


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
    """What a tool returned, as the text the model reads, as TRL 1.16 writes it: ``str(value)``
    (Python's form: ``{'a': 1}``, ``True``, ``None``). A list is TRL's multimodal content: a list
    of ``{"type": "text", "text": ...}`` blocks gives their texts joined (an image block, which a
    text model cannot read, is refused); any other list is written with ``str`` too."""
    if isinstance(value, list) and value and all(isinstance(b, dict) and "type" in b for b in value):
        if any(b["type"] != "text" for b in value):
            raise TypeError("a multimodal result (non-text content blocks) needs a vision-language model")
        return "".join(str(b.get("text", "")) for b in value)
    return str(value)


def error_text(message: str) -> str:
    """The content of a failed call's result, in TRL's shape (``{'error': message}``)."""
    return str({"error": message})

