"""The checks a config passes at construction, and the error format they share (`fail`).

Pure functions of a config object: :class:`course_lib.config.RLConfig.__post_init__` calls
them, so `rl_config.py` keeps the fields and their arithmetic. `check_shared_ranges` and
`check_run_options` hold the range checks of the shared fields; the ones below reject
non-finite numbers, values of the wrong type and choices a `Literal` does not list.

``float("nan")`` passes every range check (``nan < 0`` is False), so ``beta=nan`` or
``learning_rate=inf`` used to get through and fail much later, inside sampling
("probability tensor contains inf or nan"), or worse, train silently with NaN weights.
``check_finite_fields`` looks at every float of a dataclass config, including floats
inside lists (``reward_weights``), and raises with the field, the value and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import types
import typing
from typing import Any

import numpy as np

__all__ = ["MAX_MAGNITUDE", "check_choices", "check_field_types", "check_finite_fields", "check_magnitudes",
           "check_run_options", "check_shared_ranges", "check_train_dataset", "fail", "field_choices", "literal_choices", "non_finite"]

def fail(name: str, value: Any, problem: str, fix: str) -> typing.NoReturn:
    """Raise the config error: the field, its value, what is wrong, and the fix (`course_lib.config.fail`)."""
    raise ValueError(f"{name}={value!r} {problem}. Fix: {fix}.")


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
        elif list_hint is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            fix = f"pass a list, e.g. {spec.name}=[{value!r}] (one entry per item)"
        elif isinstance(value, float) and float(value).is_integer():
            fix = f"write it as a whole number, {spec.name}={int(value)}"
        else:
            fix = f"give a value of type {_type_name(hint)}"
        raise ValueError(f"{spec.name}={value!r} is a {type(value).__name__}, not {_type_name(hint)}. Fix: {fix}.")


def check_train_dataset(dataset: Any, name: str = "train_dataset", messages_rows: bool = False) -> None:
    """Raise ``ValueError`` unless ``dataset`` is a table with a ``prompt`` column of usable prompts
    (or, with ``messages_rows``, SFT's whole conversations in a ``messages`` column instead).

    A prompt is a non-empty string, or a list of chat messages each with a string ``role``
    and a string ``content`` (a message without a role, or with ``content=None``, would
    reach the chat template and fail there, or be rendered as the text "None").
    """
    if isinstance(dataset, (list, tuple)) or not hasattr(dataset, "column_names"):
        raise ValueError(f"{name} is a {type(dataset).__name__}, not a datasets.Dataset. Fix: wrap the rows, "
                         "datasets.Dataset.from_list(rows) (a list of dicts with a 'prompt' key).")
    if messages_rows and "prompt" not in dataset.column_names and "messages" in dataset.column_names:
        return  # conversations: checked by course_lib.post_training.conversations.check_conversations
    if "prompt" not in dataset.column_names:
        raise ValueError(f"{name} has no 'prompt' column (columns: {dataset.column_names}).")
    for row, prompt in enumerate(dataset["prompt"][:]):  # [:] reads the column at once, not row by row
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


def field_choices(config_class: type, name: str) -> tuple:
    """The strings the `Literal` annotation of `config_class`'s field `name` allows: the one list
    that runtime checks and widgets read (``field_choices(RLConfig, "engine") == ("hf", "vllm")``)."""
    choices = literal_choices(_hints(config_class).get(name))
    if choices is None:
        raise TypeError(f"{config_class.__name__}.{name} is not a field annotated with a Literal")
    return choices


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


def check_shared_ranges(config: Any) -> None:
    """The range checks of :class:`course_lib.config.RLConfig`'s plain fields (counts, rates,
    sampling and optimizer settings); each failure names the field, the value and the fix."""
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_processes",
                 "num_iterations", "max_completion_length", "logging_steps", "logprob_chunk_size",
                 "lora_r", "lora_alpha"):
        value = getattr(config, name)
        if value < 1:
            fail(name, value, "must be at least 1", f"set {name} to a positive integer")
    for name in ("steps_per_generation", "generation_batch_size", "max_prompt_length",
                 "vllm_max_model_length", "num_completions_to_print", "save_total_limit"):
        value = getattr(config, name)
        if value is not None and value < 1:
            fail(name, value, "must be None or at least 1", f"set {name}=None or a positive integer")
    if config.max_tool_calling_iterations is not None and config.max_tool_calling_iterations < 0:
        fail("max_tool_calling_iterations", config.max_tool_calling_iterations, "must be None or at least 0",
             "set None (no cap), 0 (no tool call is run) or a positive number of rounds")
    if config.tool_timeout is not None and not config.tool_timeout > 0:
        fail("tool_timeout", config.tool_timeout, "must be None or positive",
             "set tool_timeout=None (no limit) or a positive number of seconds")
    for name in ("beta", "epsilon", "learning_rate", "weight_decay", "warmup_steps",
                 "max_grad_norm", "save_steps", "adam_epsilon"):
        value = getattr(config, name)
        if value < 0:
            fail(name, value, "must be non-negative", f"set {name} >= 0")
    if config.epsilon_high is not None and config.epsilon_high < 0:
        fail("epsilon_high", config.epsilon_high, "must be non-negative",
              "set epsilon_high >= 0 (DAPO uses 0.28) or None to reuse epsilon")
    if not config.temperature >= 1e-3:
        fail("temperature", config.temperature, "must be at least 1e-3 (the logits are divided by it: logits of "
             "100 over a smaller temperature exceed float16's range, 65504)",
             "use e.g. 1.0 (0.7 for lower diversity)")
    if not config.adam_epsilon > 0:
        fail("adam_epsilon", config.adam_epsilon, "must be > 0 (Adam divides by sqrt(v) + adam_epsilon, and v is 0 "
             "for a parameter whose gradient has been 0: 0/0 is NaN)", "use 1e-8, the default")
    if not 0 <= config.seed < 2**32:
        fail("seed", config.seed, "must lie in [0, 2**32)", "use a seed such as 42 (NumPy's generators take at most "
             "32 bits)")
    if not 0 < config.top_p <= 1:
        fail("top_p", config.top_p, "must lie in (0, 1]", "use 1.0 to disable nucleus sampling")
    if config.min_p is not None and not 0 <= config.min_p <= 1:
        fail("min_p", config.min_p, "must lie in [0, 1]", "use None or a value such as 0.05")
    if config.top_k is not None and config.top_k < 0:
        fail("top_k", config.top_k, "must be None or >= 0", "use None to disable top-k")
    if not config.repetition_penalty > 0:
        fail("repetition_penalty", config.repetition_penalty, "must be > 0", "use 1.0 for no penalty")
    if not 0 < config.vllm_gpu_memory_utilization <= 1:
        fail("vllm_gpu_memory_utilization", config.vllm_gpu_memory_utilization, "must lie in (0, 1]",
              "use e.g. 0.3 when vLLM shares the GPU with training")
    if not 0 <= config.lora_dropout < 1:
        fail("lora_dropout", config.lora_dropout, "must lie in [0, 1)", "use e.g. 0.05")
    if not 0 <= config.adam_beta1 < 1 or not 0 <= config.adam_beta2 < 1:
        fail("adam_beta1/adam_beta2", (config.adam_beta1, config.adam_beta2), "must lie in [0, 1)",
              "use 0.9 and 0.999")
    if config.reward_weights is not None and len(config.reward_weights) == 0:
        fail("reward_weights", config.reward_weights, "is empty", "use None for equal weights")
    if "\0" in config.output_dir:
        fail("output_dir", config.output_dir[:80], "holds a NUL character, which no path may hold",
             "pass a plain folder path")
    if not config.lora_target_modules:  # without use_lora too: a setting that means nothing is a mistake
        fail("lora_target_modules", config.lora_target_modules, "is empty, so LoRA would adapt no layer",
             "name the projections to adapt, e.g. ['q_proj', 'v_proj'], or leave the field out (the default "
             "lists every projection)")
    if config.reward_timeout_s is not None and not config.reward_timeout_s > 0:
        fail("reward_timeout_s", config.reward_timeout_s, "must be a positive number of seconds",
             "use e.g. 600, or None for no limit")
    if config.logprob_kernel in ("triton", "full") and config.logprob_chunk_size != 1024:
        fail("logprob_chunk_size", config.logprob_chunk_size, f"is not read with logprob_kernel={config.logprob_kernel!r}",
             "leave logprob_chunk_size at 1024, or set logprob_kernel='chunked'")
    if config.max_steps != -1 and config.max_steps < 1:
        fail("max_steps", config.max_steps, "must be -1 (use num_train_epochs) or at least 1",
             "set max_steps to a positive number of optimizer steps, or -1")
    if config.max_steps == -1 and not config.num_train_epochs > 0:
        fail("num_train_epochs", config.num_train_epochs, "must be > 0 when max_steps=-1",
             "set num_train_epochs (e.g. 1.0) or max_steps")
    if config.report_to != "none" and importlib.util.find_spec(config.report_to) is None:
        fail("report_to", config.report_to, f"needs the {config.report_to} package, which is not installed",
             f"pip install {config.report_to} (pip install -e '.[logging]' in the course's folder installs "
             "TensorBoard and Weights & Biases), or report_to='none' (history.jsonl is written either way)")


def check_run_options(config: Any) -> None:
    """The checks of the practitioner options (model loading, sampling extras, evaluation,
    dynamic sampling, reference sync) of :class:`course_lib.config.RLConfig`."""
    for name in ("model_init_kwargs", "generation_kwargs", "chat_template_kwargs"):
        value = getattr(config, name)
        if value is not None and not isinstance(value, dict):
            fail(name, value, "must be a dict of keyword arguments or None",
                 f'pass e.g. {name}={{"key": value}} (on the command line: JSON)')
    for name in ("eval_steps", "num_generations_eval"):
        value = getattr(config, name)
        if value is not None and value < 1:
            fail(name, value, "must be None or at least 1", f"set {name}=None or a positive integer")
    if config.max_num_gen_batches < 1:
        fail("max_num_gen_batches", config.max_num_gen_batches, "must be at least 1",
             "use e.g. 10 (verl's 0 = unlimited is not offered: a constant reward would never fill a batch)")
    if config.dynamic_sampling and config.num_generations < 2:
        fail("dynamic_sampling", True, "needs groups of at least 2 completions to see a reward spread",
             "set num_generations >= 2 or dynamic_sampling=False")
    if config.dynamic_sampling and config.num_processes > 1:
        fail("dynamic_sampling", True, "runs in one process only", "set num_processes=1 or dynamic_sampling=False")
    if not 0 <= config.ref_model_mixup_alpha <= 1:
        fail("ref_model_mixup_alpha", config.ref_model_mixup_alpha, "must lie in [0, 1]", "use TR-DPO's 0.6")
    if config.ref_model_sync_steps < 1:
        fail("ref_model_sync_steps", config.ref_model_sync_steps, "must be at least 1", "use e.g. 512")
    if config.sync_ref_model and config.use_lora:
        fail("sync_ref_model", True, "cannot move a LoRA run's reference: it is the base model with the "
             "adapters switched off", "set use_lora=False, or sync_ref_model=False")
    if config.model_init_kwargs and {"dtype", "torch_dtype"} & set(config.model_init_kwargs):
        fail("model_init_kwargs", config.model_init_kwargs, "sets the dtype, which the `dtype` field owns",
             "set dtype=... instead and drop it from model_init_kwargs")
    check_async_settings(config)


def check_async_settings(config) -> None:
    """Raise a ValueError naming the field unless the asynchronous settings make a usable run."""
    if config.async_batch_timeout_s is not None and not config.async_batch_timeout_s > 0:
        fail("async_batch_timeout_s", config.async_batch_timeout_s, "must be a positive number of seconds",
             "use e.g. 1800, or None to wait without a limit")
    if config.max_staleness < 0:
        fail("max_staleness", config.max_staleness, "must be >= 0", "use 0 (synchronous samples) or e.g. 1")
    if config.weight_sync_steps < 1:
        fail("weight_sync_steps", config.weight_sync_steps, "must be >= 1", "use 1 (weights after every step)")
    if config.weight_sync_steps > config.max_staleness + 1:
        fail("weight_sync_steps", config.weight_sync_steps,
             f"exceeds max_staleness + 1 = {config.max_staleness + 1}: some batch would be sampled with weights "
             "staler than max_staleness", "lower weight_sync_steps or raise max_staleness")
    if not config.async_generation:
        return
    for name, bad, why in (("engine", config.engine != "hf", "the worker runs the HF engine; vLLM is not supported"),
                           ("num_processes", config.num_processes > 1, "asynchronous generation runs in one process"),
                           ("dynamic_sampling", config.dynamic_sampling,
                            "its refill rounds depend on rewards the trainer computes later")):
        if bad:
            fail("async_generation", True, f"cannot be combined with {name}={getattr(config, name)!r}: {why}",
                 f"set async_generation=False or change {name}")
    if config.async_old_logps == "sampler" and config.vllm_importance_sampling_correction:
        fail("vllm_importance_sampling_correction", True, "has no effect with async_old_logps='sampler': the old "
             "log-probs are the sampler's, so the correction's weights are all 1", "set async_old_logps='recompute' "
             "(the trainer's log-probs, reweighted by the correction) or leave the correction unset")
