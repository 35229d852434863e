"""Reject non-finite numbers and values of the wrong type in configurations at construction.

``float("nan")`` passes every range check (``nan < 0`` is False), so ``beta=nan`` or
``learning_rate=inf`` used to get through and fail much later, inside sampling
("probability tensor contains inf or nan"), or worse, train silently with NaN weights.
``check_finite_fields`` looks at every float of a dataclass config, including floats
inside lists (``reward_weights``), and raises with the field, the value and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any

import numpy as np

__all__ = ["MAX_MAGNITUDE", "check_choices", "check_field_types", "check_finite_fields", "check_magnitudes",
           "check_train_dataset", "literal_choices", "non_finite"]

#: Largest magnitude a float setting may have, and the reciprocal is the smallest non-zero one.
#: Every setting multiplies or divides float32 tensors (whose range ends at 3.4e38): a
#: learning rate or weight decay of 1e308 turns every weight into NaN in one step.
MAX_MAGNITUDE = 1e30


def non_finite(value: Any) -> bool:
    """True for a float (or a list/tuple holding one) that is NaN or infinite; bools and ints are finite.

    NumPy floats count as floats: ``np.float32("inf")`` is not a Python ``float``, but it is infinite.
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, (float, np.floating)):
        return not math.isfinite(float(value))
    if isinstance(value, (list, tuple)):
        return any(non_finite(v) for v in value)
    return False


def check_finite_fields(config: Any) -> None:
    """Raise ``ValueError`` naming the first field of ``config`` that holds NaN or infinity.

    Only fields set at construction are checked (``init=True``); derived fields are
    computed from them afterwards.
    """
    for spec in dataclasses.fields(config):
        if not spec.init:
            continue
        value = getattr(config, spec.name)
        if non_finite(value):
            default = spec.default if spec.default is not dataclasses.MISSING else None
            hint = f"the default is {default!r}" if default is not None else "use None or a finite number"
            raise ValueError(f"{spec.name}={value!r} is not a finite number (NaN and infinity are refused: they "
                             f"would turn the loss or the sampling distribution into NaN). Fix: set {spec.name} "
                             f"to a finite value; {hint}.")


def _floats(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (float, np.floating)):
        return [float(value)]
    if isinstance(value, (list, tuple)):
        return [f for v in value for f in _floats(v)]
    return []


def check_magnitudes(config: Any) -> None:
    """Raise ``ValueError`` naming the first float field outside ``[1/MAX_MAGNITUDE, MAX_MAGNITUDE]``.

    Zero is allowed (it means "off" for many fields); range checks of single fields (e.g.
    ``adam_epsilon > 0``) are the config's own.
    """
    for spec in dataclasses.fields(config):
        if not spec.init:
            continue
        for number in _floats(getattr(config, spec.name)):
            if number != 0 and not 1 / MAX_MAGNITUDE <= abs(number) <= MAX_MAGNITUDE:
                raise ValueError(f"{spec.name}={getattr(config, spec.name)!r} is out of range: float settings must "
                                 f"lie within [{1 / MAX_MAGNITUDE:g}, {MAX_MAGNITUDE:g}] in magnitude (or be 0), "
                                 "because the training arithmetic runs in float32, whose range ends at 3.4e38. "
                                 f"Fix: set {spec.name} to a meaningful value.")


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` names; nothing is converted (``8.0`` is not an int,
    ``"q_proj"`` is not a list of names)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return isinstance(value, str)  # which strings: the config's choice check says
    if origin is list:
        return isinstance(value, (list, tuple)) and all(_fits(v, args[0]) for v in value)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True


def _list_hint(hint: Any) -> Any:
    """The ``list[...]`` inside ``hint`` (``list[float] | None`` included), or None."""
    if typing.get_origin(hint) is list:
        return hint
    return next((a for a in typing.get_args(hint) if typing.get_origin(a) is list), None)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def check_field_types(config: Any) -> None:
    """Raise ``ValueError`` naming the first field whose value is not of the field's type.

    Catches values that would otherwise be misread much later: ``num_generations=2.5``
    (fails deep in batch slicing), ``lora_target_modules="q_proj"`` (a string iterates as
    its characters), ``use_lora="false"`` (a non-empty string is true).
    """
    hints = _hints(type(config))
    for spec in dataclasses.fields(config):
        if not spec.init or spec.name not in hints:
            continue
        value, hint = getattr(config, spec.name), hints[spec.name]
        if _fits(value, hint):
            continue
        list_hint = _list_hint(hint)
        if isinstance(value, str) and list_hint is not None:
            example = f"[{value!r}]" if typing.get_args(list_hint)[0] is str else "[1.0, 0.5]"
            fix = f"pass a list, e.g. {spec.name}={example} (a string would be read one character at a time)"
        elif isinstance(value, float) and float(value).is_integer():
            fix = f"write it as a whole number, {spec.name}={int(value)}"
        else:
            fix = f"give a value of type {_type_name(hint)}"
        raise ValueError(f"{spec.name}={value!r} is a {type(value).__name__}, not {_type_name(hint)}. Fix: {fix}.")


def check_train_dataset(dataset: Any, name: str = "train_dataset") -> None:
    """Raise ``ValueError`` unless ``dataset`` is a table with a ``prompt`` column of usable prompts.

    A prompt is a non-empty string, or a list of chat messages each with a string ``role``
    and a string ``content`` (a message without a role, or with ``content=None``, would
    reach the chat template and fail there, or be rendered as the text "None").
    """
    if isinstance(dataset, (list, tuple)) or not hasattr(dataset, "column_names"):
        raise ValueError(f"{name} is a {type(dataset).__name__}, not a datasets.Dataset. Fix: wrap the rows, "
                         "datasets.Dataset.from_list(rows) (a list of dicts with a 'prompt' key).")
    if "prompt" not in dataset.column_names:
        raise ValueError(f"{name} has no 'prompt' column (columns: {dataset.column_names}).")
    for row, prompt in enumerate(dataset["prompt"]):
        problem = _prompt_problem(prompt)
        if problem is not None:
            raise ValueError(f"{name} row {row}: {problem}. Fix: a prompt is a non-empty string or a list of "
                             "{'role': ..., 'content': <string>} messages.")


def _prompt_problem(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return None if prompt else "the prompt is an empty string"
    if not isinstance(prompt, list) or not prompt:
        return f"the prompt is {type(prompt).__name__} {str(prompt)[:60]!r}"
    for index, message in enumerate(prompt):
        if not isinstance(message, dict):
            return f"message {index} is a {type(message).__name__}, not a dict"
        if not isinstance(message.get("role"), str):
            return f"message {index} has no 'role' (it holds {sorted(message)})"
        if not isinstance(message.get("content"), str):
            return f"message {index} has content={message.get('content')!r}, not a string"
    return None


def literal_choices(hint: Any) -> tuple | None:
    """The strings a ``Literal[...]`` in ``hint`` allows (``Literal[...] | bool`` and ``| None`` included), or None."""
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    for arg in typing.get_args(hint):
        if typing.get_origin(arg) is typing.Literal:
            return typing.get_args(arg)
    return None


def check_choices(config: Any) -> None:
    """Raise ``ValueError`` naming the first string field whose value its ``Literal`` annotation does not allow.

    The annotation is the one list of allowed values: the command line's help, this check
    and the widgets read it, so a new choice is added in one place.
    """
    hints = _hints(type(config))
    for spec in dataclasses.fields(config):
        allowed = literal_choices(hints.get(spec.name)) if spec.init else None
        if allowed is None:
            continue
        value = getattr(config, spec.name)
        if isinstance(value, str) and value not in allowed:
            raise ValueError(f"{spec.name}={value!r} is not a known choice. Fix: use one of {', '.join(allowed)}.")
