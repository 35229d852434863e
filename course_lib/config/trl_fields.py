"""How the course's configs cover TRL 1.16's `GRPOConfig`: supported, renamed, left out (and why).

Read by the tests that hold the configs to TRL, and by ``tools.resolve_keys``, which turns a TRL
field name given to a course config into the course's equivalent (or names it).

TRL 1.16's `GRPOConfig` declares 77 fields of its own on top of `transformers.TrainingArguments`.
A field is *supported* when a `course_lib` config has it under the same name, meaning and
default (`to_trl_grpo_config` then passes it through), or under another name listed in
:data:`RENAMED`. Every other field is in :data:`LEFT_OUT` with the reason;
`tests/lib/test_trl_field_coverage.py` fails on a TRL field in neither place, so a TRL
upgrade cannot add a knob silently.
"""

from __future__ import annotations

import dataclasses

#: TRL name -> our field that carries the same setting.
RENAMED: dict[str, str] = {
    "use_vllm": "engine",  # engine="vllm" <=> use_vllm=True; "hf" is TRL's transformers path
}

#: TRL fields the course does not offer, with the reason.
LEFT_OUT: dict[str, str] = {
    "router_aux_loss_coef": "Mixture-of-Experts load-balancing loss: the course's models are dense.",
    "ds3_gather_for_generation": "DeepSpeed ZeRO-3 only; the trainer runs one process without DeepSpeed.",
    "pad_to_multiple_of": "Pads shapes for AWS Neuron compilation; CPU and CUDA gain nothing from it.",
    "vllm_mode": "Only colocated vLLM (TRL's default 'colocate'); server mode needs a second GPU process.",
    "vllm_server_base_url": "vLLM server mode (see vllm_mode).",
    "vllm_server_host": "vLLM server mode (see vllm_mode).",
    "vllm_server_port": "vLLM server mode (see vllm_mode).",
    "vllm_server_timeout": "vLLM server mode (see vllm_mode).",
    "vllm_group_port": "vLLM server mode's weight-broadcast group (see vllm_mode).",
    "vllm_tensor_parallel_size": "Tensor parallelism needs several GPUs in one torch.distributed group.",
    "vllm_enable_sleep_mode": "Offloading vLLM between generations is a CUDA-only memory trick the course's "
                              "model sizes do not need.",
    "log_multimodal": "Text-only course: no images to log.",
    "log_completions_hub_repo": "Hub logging: the course runs offline.",
    "use_transformers_continuous_batching": "The HF engine batches with generate(); vLLM is the fast path.",
    "transformers_continuous_batching_config": "See use_transformers_continuous_batching.",
    "use_transformers_paged": "Deprecated alias of use_transformers_continuous_batching in TRL itself.",
}


#: `transformers.TrainingArguments` fields a TRL user writes that mean something else here, or
#: that belong to TRL's scale-out: the config's answer points to the course's way.
POINTERS: dict[str, str] = {
    **dict.fromkeys(("bf16", "fp16", "tf32", "bf16_full_eval", "fp16_full_eval", "half_precision_backend"),
                    "is transformers' mixed precision (float32 weights, bfloat16/float16 compute). Here the "
                    "field dtype holds the weights' dtype: dtype='auto' (bfloat16 on a GPU that has it, float32 "
                    "elsewhere), 'float32' or 'bfloat16'. Fix: set dtype instead"),
    **dict.fromkeys(("deepspeed", "fsdp", "fsdp_config", "fsdp_min_num_params"),
                    "is a sharded-training backend the course trainer does not run (one process or plain "
                    "data-parallel). Fix: python -m course_lib export-trl, then launch TRL with accelerate (README: "
                    "'On a GPU, on many processes, and beyond')"),
    **dict.fromkeys(("push_to_hub", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo"),
                    "uploads to the Hugging Face hub; the course runs offline. Fix: <output_dir>/final is a standard "
                    "model folder: upload it with huggingface_hub's upload_folder"),
}


def _truth(value) -> bool | None:
    """``True``/``False`` from a bool or its spelling on a command line; None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    return None


def translate_trl_field(key: str, value, fields) -> tuple[str, object] | None:
    """TRL's way of writing a setting, in the course's terms.

    Returns ``(field, value)`` where TRL's name means what one of ours does (``use_vllm=True``
    is ``engine="vllm"``, ``use_cpu=True`` is ``device="cpu"``); None when ``key`` is no TRL
    field we know. Raises ``ValueError`` naming the course's equivalent, or the reason it
    is left out, for the TRL fields that differ (:data:`POINTERS`, :data:`LEFT_OUT`).
    """
    if key in ("use_vllm", "use_cpu", "no_cuda") and "engine" in fields:
        flag = _truth(value)
        if flag is None:
            raise ValueError(f"{key}={value!r}: TRL's {key} is True or False. Fix: write {key}=True or {key}=False.")
        if key == "use_vllm":
            return "engine", "vllm" if flag else "hf"
        return ("device", "cpu") if flag else ("device", "auto")
    if key in POINTERS:
        return _refuse(key, value, POINTERS[key])
    if key in LEFT_OUT:
        return _refuse(key, value, f"is a TRL field the course leaves out: {LEFT_OUT[key]} Fix: drop it, or run "
                                   "in TRL (python -m course_lib export-trl)")
    return None


def _refuse(key, value, text):
    raise ValueError(f"{key}={value!r}: TRL's {key} {text}.")


#: Our fields that TRL 1.16's `GRPOConfig` has no counterpart for (the other direction), with what
#: a TRL run does instead. `to_trl_grpo_config` drops them.
COURSE_ONLY: dict[str, str] = {
    "dynamic_sampling": "DAPO's dynamic sampling (verl's filter_groups): TRL 1.16 has none; a TRL run keeps "
                        "the zero-spread groups (advantage 0) and logs their share as frac_reward_zero_std.",
    "max_num_gen_batches": "verl's cap on dynamic sampling's generation rounds; TRL has no dynamic sampling.",
    "async_generation": "Generation in a worker process, overlapping learning; TRL 1.16 has it as a separate "
                        "trainer (experimental AsyncGRPOTrainer with a vLLM server), not a GRPOConfig field.",
    "max_staleness": "AsyncGRPOConfig's name (TRL drops staler samples; we wait, so none is dropped).",
    "weight_sync_steps": "AsyncGRPOConfig's name: optimizer steps between weight pushes to the generator.",
    "async_old_logps": "TRL's AsyncGRPOTrainer always takes the sampler's log-probs as the old ones ('sampler'); "
                       "'recompute' (decoupled PPO with the sampling correction) has no TRL counterpart.",
    "async_batch_timeout_s": "How long the course's generation worker may take for one batch; TRL's "
                             "AsyncGRPOTrainer has no such worker.",
    "tool_timeout": "Seconds a tool call may take before it becomes a failed call; TRL 1.16 runs tools "
                    "without a limit.",
    "doctor": "The run doctor (course_lib.doctor); for a TRL run, `python -m course_lib doctor` reads its "
              "trainer_state.json after the fact.",
}


def trl_grpo_fields() -> list[str]:
    """The fields TRL's `GRPOConfig` adds to `TrainingArguments`, in declaration order."""
    import trl
    from transformers import TrainingArguments

    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    return [f.name for f in dataclasses.fields(trl.GRPOConfig) if f.name not in base]


def coverage(config_class: type) -> dict[str, list[str]]:
    """`{"supported": [...], "left_out": [...], "unaccounted": [...]}` of TRL's GRPO fields."""
    ours = {f.name for f in dataclasses.fields(config_class) if f.init}
    result: dict[str, list[str]] = {"supported": [], "left_out": [], "unaccounted": []}
    for name in trl_grpo_fields():
        if name in ours or RENAMED.get(name) in ours:
            result["supported"].append(name)
        elif name in LEFT_OUT:
            result["left_out"].append(name)
        else:
            result["unaccounted"].append(name)
    return result
