"""Practitioner options every algorithm shares: model loading, sampling extras, data order,
in-loop evaluation. Names and defaults follow TRL 1.16's `GRPOConfig` and `TrainingArguments`.

`RunOptions` is a base of :class:`course_lib.config.RLConfig`; its fields are settable like
any other (`--set chat_template_kwargs='{"enable_thinking": false}'` on the command line:
dict fields read JSON). What each option does lives where it acts:
:mod:`course_lib.run.model_options` (dropout, float32 head, loading kwargs), the rollout engines
(`generation_kwargs`, `chat_template_kwargs`), :mod:`course_lib.run.batches` (`shuffle_dataset`),
:mod:`course_lib.run.in_loop_eval` (evaluation during training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


def fail(name: str, value: Any, problem: str, fix: str) -> None:
    """The config error format of `course_lib.config.fail` (which re-exports this one)."""
    raise ValueError(f"{name}={value!r} {problem}. Fix: {fix}.")


@dataclass(frozen=True)
class RunOptions:
    """Model-loading, sampling, data and evaluation options shared by GRPO, RLOO and PPO."""

    model_init_kwargs: dict[str, Any] | None = None
    """Extra keyword arguments for `AutoModelForCausalLM.from_pretrained` when the trainer loads the
    policy by name, e.g. {"attn_implementation": "sdpa", "revision": "main"}."""
    trust_remote_code: bool = False
    """Allow a model or tokenizer folder to run its own Python code when loaded."""
    disable_dropout: bool = False
    """Set every dropout probability of the policy to 0, so that the trainer's log-probs are the
    sampler's and the reference's (TRL's advice whenever a reference model is used)."""
    cast_lm_head_to_fp32: bool = False
    """Keep the LM head (and so the logits and log-probs) in float32 under a bfloat16 body (ScaleRL,
    arXiv 2510.13786); needs a model whose head is not tied to its input embeddings."""
    shuffle_dataset: bool = True
    """Draw prompts in a fresh seeded permutation each epoch; False keeps the dataset's order (a
    curriculum)."""
    generation_kwargs: dict[str, Any] | None = None
    """Extra sampling arguments (HF `GenerationConfig` or vLLM `SamplingParams`); sampling fields
    (temperature, top_p, top_k, min_p, repetition_penalty, max_tokens) given here override the
    config's."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Extra arguments for the tokenizer's `apply_chat_template`, e.g. {"enable_thinking": false} to
    switch a Qwen3 model's thinking mode off."""
    cache_implementation: str | None = None
    """KV-cache implementation for HF `generate` (e.g. "static"); None = the model's default. Not
    used by vLLM."""
    vllm_model_impl: Literal["vllm", "transformers"] = "vllm"
    """Which model code vLLM runs: its own kernels, or the transformers modelling code (for
    architectures vLLM lacks)."""
    vllm_structured_outputs_regex: str | None = None
    """Constrain vLLM's sampling to completions matching this regular expression (guided
    decoding); None = free text."""
    sync_ref_model: bool = False
    """Move the reference model toward the policy during training (TR-DPO, Gorbatovski et al.
    2024): every ref_model_sync_steps steps, ref = alpha * policy + (1 - alpha) * ref."""
    ref_model_mixup_alpha: float = 0.6
    """alpha of the reference update; 1.0 copies the policy."""
    ref_model_sync_steps: int = 512
    """Optimizer steps between reference updates."""
    log_unique_prompts: bool = False
    """With log_completions: print one sample per distinct prompt instead of every completion."""
    eval_strategy: Literal["no", "steps"] = "no"
    """Evaluate on `eval_dataset` during training: never, or every `eval_steps` optimizer steps (and
    after the last one); the metrics go to history.jsonl as `eval/...`."""
    eval_steps: int | None = None
    """Optimizer steps between evaluations; None = `logging_steps` (TRL's rule)."""
    num_generations_eval: int | None = None
    """Completions sampled per held-out prompt for the eval reward; None = `num_generations`."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling (Yu et al. 2025; verl's `filter_groups.enable`): drop the groups whose
    rewards are all equal (no signal) and sample more prompts until the generation batch is full
    of groups with a spread (`course_lib.run.dynamic_sampling`). TRL 1.16 has no equivalent."""
    max_num_gen_batches: int = 10
    """With dynamic_sampling: most generation rounds per batch (verl's name); a batch still short
    after them is completed with zero-spread groups."""

    def _check_ranges(self) -> None:
        for name in ("model_init_kwargs", "generation_kwargs", "chat_template_kwargs"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                fail(name, value, "must be a dict of keyword arguments or None",
                     f'pass e.g. {name}={{"key": value}} (on the command line: JSON)')
        for name in ("eval_steps", "num_generations_eval"):
            value = getattr(self, name)
            if value is not None and value < 1:
                fail(name, value, "must be None or at least 1", f"set {name}=None or a positive integer")
        if self.max_num_gen_batches < 1:
            fail("max_num_gen_batches", self.max_num_gen_batches, "must be at least 1",
                 "use e.g. 10 (verl's 0 = unlimited is not offered: a constant reward would never fill a batch)")
        if self.dynamic_sampling and getattr(self, "num_generations", 1) < 2:
            fail("dynamic_sampling", True, "needs groups of at least 2 completions to see a reward spread",
                 "set num_generations >= 2 or dynamic_sampling=False")
        if self.dynamic_sampling and getattr(self, "num_processes", 1) > 1:
            fail("dynamic_sampling", True, "runs in one process only", "set num_processes=1 or dynamic_sampling=False")
        if not 0 <= self.ref_model_mixup_alpha <= 1:
            fail("ref_model_mixup_alpha", self.ref_model_mixup_alpha, "must lie in [0, 1]", "use TR-DPO's 0.6")
        if self.ref_model_sync_steps < 1:
            fail("ref_model_sync_steps", self.ref_model_sync_steps, "must be at least 1", "use e.g. 512")
        if self.sync_ref_model and getattr(self, "use_lora", False):
            fail("sync_ref_model", True, "cannot move a LoRA run's reference: it is the base model with the "
                 "adapters switched off", "set use_lora=False, or sync_ref_model=False")
        if self.model_init_kwargs and {"dtype", "torch_dtype"} & set(self.model_init_kwargs):
            fail("model_init_kwargs", self.model_init_kwargs, "sets the dtype, which the `dtype` field owns",
                 "set dtype=... instead and drop it from model_init_kwargs")

    @property
    def sampling_extras(self) -> dict[str, Any]:
        """`generation_kwargs` plus the engine-specific options (`SamplingConfig.generation_kwargs`)."""
        extras = dict(self.generation_kwargs or {})
        if self.cache_implementation is not None and getattr(self, "engine", "hf") == "hf":
            extras.setdefault("cache_implementation", self.cache_implementation)
        if self.vllm_structured_outputs_regex is not None and getattr(self, "engine", "hf") == "vllm":
            from vllm.sampling_params import StructuredOutputsParams  # only reached with vLLM installed

            extras.setdefault("structured_outputs", StructuredOutputsParams(regex=self.vllm_structured_outputs_regex))
        return extras

    @property
    def effective_eval_steps(self) -> int:
        return self.eval_steps or getattr(self, "logging_steps", 10)

    @property
    def effective_num_generations_eval(self) -> int:
        return self.num_generations_eval or getattr(self, "num_generations", 1)
