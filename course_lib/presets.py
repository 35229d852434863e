"""Settings measured to work, per task and per (model, task, algorithm).

``python -m course_lib train --model tiny --task arithmetic`` and ``make demo`` start from
here, so a run with no ``--set`` learns. Each entry says what it was measured with; the
learning tests (``tests/lib/test_learning.py``) train with exactly these settings.

- :data:`TASKS`: the reward functions of a task and a completion length that fits it.
- :data:`MEASURED`: config values for a model on a task with an algorithm.
- :data:`MODEL_SETTINGS`: where no (model, task, algorithm) entry exists, as for a task of
  your own, the learning settings measured for that model and algorithm (they depend on the
  model far more than on the task). Only where neither exists does a run keep the config's
  defaults (TRL's), which are tuned for large models: the tiny model, for one, barely moves
  at TRL's learning rate of 1e-6 (about +4 points of held-out accuracy in 500 steps).

:func:`settings_source` says in one line which of these a run starts from; ``train``
prints it with the values before the first step.
"""

from __future__ import annotations

from typing import Any

#: Reward functions and completion length per task (the part of ``gsm8k:<path>`` before the colon).
TASKS: dict[str, dict[str, Any]] = {
    "arithmetic": {"rewards": ["correctness_first_number_reward"], "max_completion_length": 8},
    "arithmetic-mixed": {"rewards": ["correctness_first_number_reward"], "max_completion_length": 8},
    "arithmetic-tagged": {"rewards": ["answer_tag_format_reward", "correctness_reward"],
                          "max_completion_length": 48},
    "word-problems": {"rewards": ["answer_tag_format_reward", "correctness_reward"],
                      "max_completion_length": 128},
    "gsm8k": {"rewards": ["gsm8k_xmlcount_reward", "gsm8k_soft_format_reward", "gsm8k_strict_format_reward",
                          "gsm8k_int_reward", "gsm8k_correctness_reward"], "max_completion_length": 256},
}
DEFAULT_TASK = {"rewards": ["correctness_reward"], "max_completion_length": 64}

# The tiny model sits just past the point where it learned to carry: four prompts x 8
# completions a step and a small, constant learning rate move it; large noisy steps knock it
# back (lr 3e-4 with 2 prompts a step collapsed it to 0%).
_TINY_GRPO = dict(per_device_train_batch_size=32, num_generations=8, max_completion_length=6, temperature=1.0,
                  learning_rate=3e-5, lr_scheduler_type="constant", max_steps=200)

#: (model, task, algo) -> config values measured to learn.
MEASURED: dict[tuple[str, str, str], dict[str, Any]] = {
    ("tiny", "arithmetic", "grpo"): _TINY_GRPO,
    # Leave-one-out advantages are not divided by a std, so RLOO takes a larger step; one
    # epoch per batch and no KL, as the learning test measured.
    ("tiny", "arithmetic", "rloo"): {**_TINY_GRPO, "learning_rate": 6e-5, "max_steps": 300, "beta": 0.0,
                                      "num_iterations": 1},
    # LoRA on every projection; one worked example in the prompt makes the model emit the tags.
    # Temperature 1.0 and 8 completions per prompt, as the source notes advise: fewer groups
    # with identical rewards (no signal). Measured by `make demo` (vLLM bf16 sampler, bf16
    # training, seed 0): greedy accuracy on 200 held-out problems 17.5% -> 51.0%, lift +33.5
    # points [+26.0, +41.0]. A learning rate of 3e-4 instead collapsed it to 1.0% (every
    # completion of a group alike, "26 + 80 = 12").
    ("smollm2-135m", "arithmetic-tagged", "grpo"): dict(
        use_lora=True, lora_r=16, lora_alpha=32, lora_dropout=0.0, learning_rate=1e-4,
        per_device_train_batch_size=16, num_generations=8, max_completion_length=32, temperature=1.0,
        max_steps=30, lr_scheduler_type="constant"),
}

#: (model, algo) -> the learning settings of the measured entries above, for any other task
#: (your own, or a shipped one with no entry). The completion length stays the task's, except
#: that the tiny model reads at most 128 positions (``course_lib/tiny.py``), so a task of your
#: own gets 8 completion tokens there (the arithmetic entries' length), not 64.
MODEL_SETTINGS: dict[tuple[str, str], dict[str, Any]] = {
    ("tiny", "grpo"): {k: v for k, v in _TINY_GRPO.items() if k not in ("max_completion_length", "max_steps")},
    ("tiny", "rloo"): {k: v for k, v in MEASURED[("tiny", "arithmetic", "rloo")].items()
                       if k not in ("max_completion_length", "max_steps")},
    ("smollm2-135m", "grpo"): {k: v for k, v in MEASURED[("smollm2-135m", "arithmetic-tagged", "grpo")].items()
                               if k not in ("max_completion_length", "max_steps")},
}
#: Completion length of a task without a :data:`TASKS` entry, per model (default: ``DEFAULT_TASK``'s).
OWN_TASK_COMPLETION_LENGTH: dict[str, int] = {"tiny": 8}


#: Named sets of config values: ``make_config(algo, preset=name)``, ``train --preset name``.
#: Each says which algorithm it is for; ``--set`` / keyword values still win over it.
NAMED: dict[str, dict[str, Any]] = {
    # The defaults of TRL's older on-policy RLOOTrainer (the source notes' trainer): 4 passes
    # over each batch, temperature 0.7, KL coefficient 0.05. The library's RLOO defaults are
    # TRL 1.16's RLOOConfig (1 pass, temperature 1.0, beta 0.05), like for like with GRPO.
    "older_trl_rloo": {"algo": "rloo", "values": dict(beta=0.05, num_iterations=4, temperature=0.7)},
}


def named_preset(name: str, algo: str) -> dict[str, Any]:
    """The config values of preset ``name`` for ``algo``; a clear error for an unknown name or algorithm."""
    from .config.tools import suggest

    if name not in NAMED:
        raise ValueError(f"preset={name!r} is not a named preset.{suggest(name, NAMED)} Known: {', '.join(NAMED)}.")
    entry = NAMED[name]
    if entry["algo"] != algo:
        raise ValueError(f"preset={name!r} is for {entry['algo']!r}, not {algo!r}. Fix: use it with algo "
                         f"{entry['algo']!r}.")
    return dict(entry["values"])


def fast_engine_settings() -> dict[str, Any]:
    """Rollouts in vLLM where this machine runs them fast, else ``{}`` (Hugging Face ``generate``).

    On a GPU: ``engine="vllm"``. On a CPU, vLLM plus native bfloat16 (AVX512-BF16 or AMX)
    gives ``engine="vllm"`` with a bfloat16 sampler *and* bfloat16 training: on SmolLM2-135M
    the bf16 vLLM sampler's rollouts measured 3.8x faster than HF ``generate`` (a float32
    vLLM sampler: 1.5x; ``benchmarks/rollout.py``, README "vLLM on a CPU"), and a LoRA
    forward + backward ran faster in bf16 than in fp32.
    The trainer corrects what is left of the sampler mismatch with truncated importance
    sampling.
    """
    import torch

    from .machine import cpu_supports_bfloat16
    from .rollout import vllm_available

    if not vllm_available():
        return {}
    if torch.cuda.is_available():
        return {"engine": "vllm"}
    if not cpu_supports_bfloat16():
        return {}
    return {"engine": "vllm", "vllm_dtype": "bfloat16", "dtype": "bfloat16"}


def task_settings(task: str) -> dict[str, Any]:
    """Reward names and completion length of ``task`` (``gsm8k:<path>`` reads as ``gsm8k``)."""
    return TASKS.get(task.partition(":")[0], DEFAULT_TASK)


def _own_task(task: str) -> bool:
    return task.partition(":")[0] not in TASKS


def run_settings(model: str, task: str, algo: str) -> dict[str, Any]:
    """Config values for a run: the task's completion length, then the measured settings of
    (model, task, algo), else those of (model, algo) (:data:`MODEL_SETTINGS`)."""
    length = task_settings(task)["max_completion_length"]
    if _own_task(task):
        length = OWN_TASK_COMPLETION_LENGTH.get(model, length)
    settings = {"max_completion_length": length, "max_steps": 100}
    measured = MEASURED.get((model, task.partition(":")[0], algo))
    settings.update(measured if measured is not None else MODEL_SETTINGS.get((model, algo), {}))
    return settings


def settings_source(model: str, task: str, algo: str) -> str:
    """Where :func:`run_settings` took its values from, in words (printed by ``train``)."""
    key = task.partition(":")[0]
    if (model, key, algo) in MEASURED:
        return f"measured for {model} on {key} with {algo} (course_lib.presets.MEASURED)"
    if (model, algo) in MODEL_SETTINGS:
        return (f"measured for {model} with {algo} on the course's tasks (course_lib.presets.MODEL_SETTINGS); "
                f"{'your task' if _own_task(task) else key} has no entry of its own")
    return (f"no measured settings for {model} with {algo}: the config's defaults (TRL's, tuned for large "
            "models; a small model may barely move at learning_rate 1e-6). Fix: choose them with --set")
