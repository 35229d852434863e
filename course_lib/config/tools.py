"""Tools around the config dataclasses of `rl_config.py`: help text, overrides, I/O.

- `field_docs(cls)` reads the docstring written under each field in the source, so the
  command line shows the same text as the code (CleanRL's convention).
- `apply_overrides(config, ["key=value", ...])` turns command-line strings into typed
  values using the field annotations (`bool`, `int`, `float`, `X | None`, `list[float]`
  as `"1.0,0.5"`, `Literal` choices) and returns a new, re-validated config. Unknown keys
  fail with a did-you-mean suggestion.
- `to_dict` / `from_dict` (JSON-safe, for checkpoints) and `to_trl_grpo_config` (the
  same run expressed as a `trl.GRPOConfig`, used by parity checks; TRL is imported only
  there).

The config classes are passed in as arguments, so this module imports no config (the
configs import it); `course_lib.algos` maps algorithm names to classes.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import json
import textwrap
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Union

from ..common.wording import field_list


class ConfigWarning(UserWarning):
    """A legal but risky configuration (the message says why and what to do)."""


def suggest(word: str, candidates: Iterable[str]) -> str:
    """`" Did you mean 'x'?"` for the closest candidate, or an empty string."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


# ---------------------------------------------------------------------------------------
# Help text
# ---------------------------------------------------------------------------------------
def _docs_in_class_body(klass: type) -> dict[str, str]:
    """Docstrings placed right under annotated assignments in `klass`'s own body."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # defined interactively: no source to read
        return {}
    tree = ast.parse(source)
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    docs = {}
    for statement, following in zip(body, body[1:]):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[statement.target.id] = " ".join(following.value.value.split())
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """Map each settable field of a config class to its docstring (subclasses win).

    Fields are returned in declaration order; a field without a docstring maps to "".
    """
    merged: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            merged.update(_docs_in_class_body(klass))
    return {f.name: merged.get(f.name, "") for f in dataclasses.fields(cls) if f.init}


# ---------------------------------------------------------------------------------------
# String -> typed value
# ---------------------------------------------------------------------------------------
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null"}


def _coerce(text: str, hint: Any) -> Any:
    """Convert `text` to a value of type `hint`; raise ValueError when impossible."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if text.strip().lower() in _NONE and type(None) in args:
            return None
        # bool first so that "true" never becomes the string "true"; str last.
        order = sorted((a for a in args if a is not type(None)),
                       key=lambda a: {bool: 0, int: 2, float: 3, str: 5}.get(a, 1 if typing.get_origin(a)
                                                                             is Literal else 4))
        for member in order:
            try:
                return _coerce(text, member)
            except ValueError:
                continue
        raise ValueError(f"cannot read {text!r} as {hint}")
    if origin is Literal:
        if text in args:
            return text
        raise ValueError(f"{text!r} is not one of {', '.join(map(repr, args))}")
    if origin is dict or hint is dict:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"{text!r} is not a JSON object such as {{\"key\": 1}}")
        return value
    if origin is list:
        inner = text.strip().removeprefix("[").removesuffix("]")
        items = [item.strip().strip("'\"") for item in inner.split(",") if item.strip()]
        return [_coerce(item, args[0]) for item in items]
    if hint is bool:
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError(f"{text!r} is not a boolean (true/false)")
    if hint is int:
        return int(text)
    if hint is float:
        return float(text)
    if hint is str:
        return text
    if hint is Any:
        return text
    raise ValueError(f"no rule to read {hint}")


class UnknownFieldError(ValueError, TypeError):
    """A keyword that is no field of the config (a ``TypeError`` too, as for any unknown keyword)."""


class SuggestingFields(type):
    """Metaclass of the configs: ``GRPOConfig(learning_rat=1e-5)`` names the closest field, as
    ``make_config`` does, and aliases (``rloo_k``) work in the constructor too."""

    def __call__(cls, *args, **kwargs):
        if dataclasses.is_dataclass(cls):
            names = {f.name for f in dataclasses.fields(cls) if f.init}
            if any(key not in names for key in kwargs):
                kwargs = resolve_keys(cls, kwargs)
        return super().__call__(*args, **kwargs)


def resolve_keys(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Map alias names to field names and reject unknown or derived keys."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    aliases: dict[str, str] = getattr(cls, "ALIASES", {})
    resolved: dict[str, Any] = {}
    for key, value in values.items():
        name = aliases.get(key, key)
        if name not in fields:
            from .trl_fields import translate_trl_field

            try:
                translated = translate_trl_field(key, value, fields)
            except ValueError as error:
                raise UnknownFieldError(f"{error} ({cls.__name__} has no field {key!r}; "
                                        f"{field_list(cls.__name__)}.)") from None
            if translated is not None:
                name, value = translated
        if name not in fields:
            raise UnknownFieldError(f"{key}={value!r}: {cls.__name__} has no field {key!r}."
                             f"{suggest(key, list(fields) + list(aliases))} "
                             f"Fix: {field_list(cls.__name__)}.")
        if not fields[name].init:
            raise ValueError(f"{key}={value!r}: {key!r} is computed from the other fields. "
                             f"Fix: set {key.removeprefix('effective_')!r} instead.")
        if name in resolved:
            raise ValueError(f"{key}={value!r}: {name!r} was given twice (once under an alias). "
                             "Fix: give it once.")
        resolved[name] = value
    return resolved


def apply_overrides(config: Any, overrides: Iterable[str] | Mapping[str, Any]) -> Any:
    """Return a new config with `overrides` applied and re-validated.

    Args:
        config: any config instance of `rl_config.py`.
        overrides: `["beta=0.04", "reward_weights=1.0,0.5", "epsilon_high=none"]`, or a
            mapping whose string values are converted the same way.

    Raises:
        ValueError: malformed item, unknown field (with a suggestion), a value that does
            not fit the field's type, or a combination rejected by validation.
    """
    cls = type(config)
    if isinstance(overrides, Mapping):
        pairs = dict(overrides)
    else:
        pairs = {}
        for item in overrides:
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"override {item!r} is not of the form key=value. Fix: write e.g. beta=0.04.")
            pairs[key.strip().removeprefix("--").replace("-", "_")] = text.strip()
    resolved = resolve_keys(cls, pairs)
    hints = typing.get_type_hints(cls)
    changes = {}
    for name, value in resolved.items():
        if isinstance(value, str):
            shown = value if len(value) <= 80 else f"{value[:80]}... ({len(value)} characters)"
            try:
                value = _coerce(value, hints[name])
            except RecursionError:
                raise ValueError(f"{name}={shown!r} nests too deeply to read. Fix: give {name} a flatter "
                                 f"value ({field_list(cls.__name__)}).") from None
            except ValueError as error:
                reason = str(error) if len(str(error)) <= 200 else str(error)[:200] + "..."
                raise ValueError(f"{name}={shown!r} does not fit the field's type {hints[name]}: {reason}. "
                                 f"Fix: {field_list(cls.__name__)} ({name} among them).") from None
        changes[name] = value
    return dataclasses.replace(config, **changes)


# ---------------------------------------------------------------------------------------
# Construction and serialisation
# ---------------------------------------------------------------------------------------
def to_dict(config: Any) -> dict[str, Any]:
    """JSON-safe dict: `algo` plus every settable field (derived values are left out)."""
    data: dict[str, Any] = {"algo": config.algo}
    for f in dataclasses.fields(config):
        if f.init:
            value = getattr(config, f.name)
            data[f.name] = list(value) if isinstance(value, (list, tuple)) else value
    return data


def from_dict(data: Mapping[str, Any], cls: type) -> Any:
    """Inverse of `to_dict` for the class `cls`; an `algo` key, if present, must be `cls`'s."""
    values = dict(data)
    algo = values.pop("algo", None)
    if algo is not None and algo != cls.algo:
        raise ValueError(f"algo={algo!r} does not match {cls.__name__} (algo={cls.algo!r}). "
                         "Fix: use course_lib.algos.config_from_dict, which picks the class from 'algo'.")
    return cls(**resolve_keys(cls, values))


# Our fields that TRL spells differently or derives itself: they are translated below, not copied.
_TRL_TRANSLATED = frozenset({
    "steps_per_generation", "generation_batch_size", "top_k", "engine", "dtype", "lr_scheduler_type",
    "vllm_importance_sampling_correction", "vllm_importance_sampling_cap", "save_steps", "eval_steps",
})


def trl_training_kwargs(config: Any, trl_class: type, translated: frozenset = frozenset()) -> dict[str, Any]:
    """The arguments of TRL's ``trl_class`` (a ``GRPOConfig``, ``SFTConfig``, ``DPOConfig``) that
    ``config`` sets, under TRL's names.

    Every field whose name ``trl_class`` (or its ``TrainingArguments`` base) also has is passed as
    it is, except those in ``translated`` (the caller translates them); the fields every trainer
    shares are translated here: ``dtype`` -> ``bf16`` / ``fp16``, ``constant`` with warm-up ->
    ``constant_with_warmup``, ``save_steps=0`` -> ``save_strategy="no"``, ``eval_steps`` only when
    evaluating by steps.
    """
    import torch

    dtype = config.dtype
    if dtype == "auto":
        dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    scheduler = config.lr_scheduler_type
    if scheduler == "constant" and config.warmup_steps > 0:
        scheduler = "constant_with_warmup"
    trl_fields = {f.name for f in dataclasses.fields(trl_class) if f.init}
    skipped = _TRL_TRANSLATED | translated
    kwargs: dict[str, Any] = {
        f.name: getattr(config, f.name) for f in dataclasses.fields(config)
        if f.init and f.name in trl_fields and f.name not in skipped
    }
    kwargs.update(lr_scheduler_type=scheduler, bf16=dtype == "bfloat16", fp16=dtype == "float16")
    if config.save_steps > 0:
        kwargs["save_steps"] = config.save_steps
    else:
        kwargs["save_strategy"] = "no"
    if getattr(config, "eval_strategy", "no") == "steps":
        kwargs["eval_steps"] = config.eval_steps
    return kwargs


def to_trl_grpo_config(config: Any, **extra: Any) -> Any:
    """Express a GRPO config as `trl.GRPOConfig` (TRL 1.16) with the same values.

    The shared fields as :func:`trl_training_kwargs` passes them; GRPO's own translations:
    `engine` -> `use_vllm`, `top_k=None` -> 0, the resolved `steps_per_generation` and
    correction switch. TRL takes the number of processes from the launcher, so this mirrors a
    run on `num_processes` processes only when launched that way. Fields TRL lacks (LoRA,
    fused log-probs, prompt truncation) are not passed. `extra` overrides any argument.
    """
    if config.algo not in ("grpo", "rl"):
        raise ValueError(f"to_trl_grpo_config got a {type(config).__name__} (algo={config.algo!r}). "
                         "Fix: build a GRPOConfig; RLOO and PPO use other TRL trainers.")
    import trl

    kwargs = trl_training_kwargs(config, trl.GRPOConfig)
    kwargs.update(
        steps_per_generation=config.effective_steps_per_generation,
        top_k=config.top_k or 0,
        use_vllm=config.engine == "vllm",
        vllm_importance_sampling_correction=config.effective_vllm_importance_sampling_correction,
    )
    kwargs.update(extra)
    return trl.GRPOConfig(**kwargs)
