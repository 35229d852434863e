"""How the course's configs cover TRL 1.16's `GRPOConfig`: supported, renamed, left out (and why).

Test data: the tests that hold the configs to TRL read it; no library module does.

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
