"""Training configuration: the fields every algorithm shares, and their validation.

`RLConfig` holds every knob read by GRPO, RLOO and PPO alike, under the names and defaults of
TRL 1.16's `GRPOConfig`. Each field carries a docstring right below it, CleanRL style; `field_docs(cls)`
reads those strings from the source so that the command line can print them as help. Each
algorithm's own config (`GRPOConfig` in `course_lib/algos/grpo_config.py`, `RLOOConfig` in `rloo.py`,
`PPOConfig` in `ppo.py`, the post-training configs) adds only the fields that algorithm reads; a field an
algorithm would ignore is refused there, and `tests/lib/test_config_fields_change_the_run.py` shows
every other field changing a cheap fingerprint of the run, or checks that the module it acts in reads it,
or lists it as logging/IO only. The allowed values of a choice are its field's `Literal`.

A config is checked once, when it is built: a bad value raises `ValueError` naming the
field, the value and the fix, and a legal but risky setting emits a `ConfigWarning`.
Values derived from the fields (`effective_steps_per_generation`, `effective_generation_batch_size`,
`effective_vllm_importance_sampling_correction`) are computed in `__post_init__` and never mutated
afterwards: configs are frozen; `apply_overrides` and `dataclasses.replace` build a new, re-validated
one. Build a config by algorithm name with `course_lib.algos.make_config`.

Simplifications compared to TRL: no Hub, DeepSpeed or FSDP options, and in-loop evaluation limited to
`eval_strategy` "no" / "steps"; `num_processes` is a field (TRL reads it from the launcher) so that the
batch arithmetic can be shown for any number of GPUs on one machine.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from course_lib import schedule
from course_lib.config.tools import ConfigWarning, SuggestingFields, apply_overrides, field_docs, from_dict, to_dict
from course_lib.ops.importance import ISMode, check_is_settings
from course_lib.config.validation import (check_choices, check_field_types, check_finite_fields, check_magnitudes,
                                       check_run_options, check_shared_ranges, fail)

__all__ = ["ConfigWarning", "RLConfig", "apply_overrides", "field_docs", "fail", "warn"]

_ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def warn(message: str) -> None:
    """Emit a `ConfigWarning` pointing at the code that built the config.

    The stack level is counted past the config classes' own frames (their validation
    methods and the dataclass-generated `__init__`), however deep the class hierarchy.
    """
    package = Path(__file__).parents[1]  # course_lib; config/tools.py's metaclass builds the configs
    internal = (str(package / "config"), str(package / "algos"), "<string>")
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, ConfigWarning, stacklevel=level + 1)


@dataclass(frozen=True)
class RLConfig(metaclass=SuggestingFields):
    """Settings shared by every algorithm of the course (GRPO, RLOO, PPO)."""

    algo: ClassVar[str] = "rl"
    ALIASES: ClassVar[dict[str, str]] = {}
    # Fewest completions per prompt the algorithm can learn from (a group baseline
    # needs two); PPO, which has a value function, overrides it with 1.
    MIN_GENERATIONS: ClassVar[int] = 2

    # --- model and run -----------------------------------------------------------
    model_name_or_path: str = "tiny"
    """Policy to train: `tiny`, `smollm2-135m`, a Hub id or a local folder."""
    output_dir: str = "outputs"
    """Folder for checkpoints, logs and the final model; a folder holding another run is refused
    (see `overwrite_output_dir`)."""
    overwrite_output_dir: bool = False
    """Start a new run in a non-empty `output_dir` by deleting the earlier run's history, checkpoints
    and final model first; False refuses it unless the run resumes from a checkpoint there."""
    seed: int = 42
    """Seed for sampling, data order and initialisation."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train: `auto` = the CUDA GPU of each process when there is one, else the CPU. Several
    processes come from `accelerate launch` (`python -m course_lib train --num-processes N`)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Training precision; `auto` = bfloat16 on a CUDA GPU that supports it, else float32 (see the
    course's "FP16 vs BF16 for RL" note)."""

    # --- optimisation ------------------------------------------------------------
    learning_rate: float = 1e-6
    """AdamW learning rate (TRL's GRPO default; tiny models want ~1e-4 to 1e-3)."""
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "linear"
    """Learning-rate schedule after warm-up."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to `learning_rate`."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay (Loshchilov & Hutter, 2019)."""
    adam_beta1: float = 0.9
    """AdamW first-moment decay."""
    adam_beta2: float = 0.999
    """AdamW second-moment decay."""
    adam_epsilon: float = 1e-8
    """AdamW denominator epsilon."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this value; 0 disables clipping."""
    max_steps: int = -1
    """Optimizer steps to run; -1 runs `num_train_epochs` passes over the prompts (`total_steps`)."""
    num_train_epochs: float = 3.0
    """Passes over the prompt dataset when `max_steps` is -1 (TRL's rule)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (TRL's default is True; off here for small models)."""

    # --- batching (TRL's RepeatSampler scheme; see schedule.py) -------------------
    per_device_train_batch_size: int = 8
    """Completions per device in one forward/backward micro-step."""
    gradient_accumulation_steps: int = 1
    """Micro-steps whose gradients are summed before one optimizer step."""
    num_processes: int = 1
    """Number of data-parallel training processes (GPUs); sets the global batch arithmetic and must
    match the launch (`accelerate launch --num_processes N`)."""
    steps_per_generation: int | None = None
    """Micro-steps served by one generation batch; None = `gradient_accumulation_steps`; not with generation_batch_size."""
    generation_batch_size: int | None = None
    """Completions generated at once (all processes); None = `per_device_train_batch_size *
    num_processes * steps_per_generation`. Mutually exclusive with `steps_per_generation`."""
    num_generations: int = 8
    """Completions sampled per prompt, the group size G of GRPO (Shao et al. 2024, DeepSeekMath); >= 2."""

    # --- generation ----------------------------------------------------------------
    max_prompt_length: int | None = None
    """Keep at most this many prompt tokens (left-truncated); None keeps whole prompts."""
    max_completion_length: int = 512
    """Most tokens generated per completion (TRL 1.16 default)."""
    temperature: float = 1.0
    """Sampling temperature; keep it near 1.0 so the completions of a group differ (GRPO learns from
    their differences)."""
    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]; 1.0 considers every token."""
    top_k: int | None = None
    """Keep only the k most likely tokens; None (or 0) disables top-k."""
    min_p: float | None = None
    """Drop tokens less likely than min_p times the top token's probability, in [0, 1]; typical
    0.01-0.2."""
    repetition_penalty: float = 1.0
    """Values > 1 penalise tokens already in the prompt or completion, < 1 favour them."""
    engine: Literal["hf", "vllm"] = "hf"
    """Rollout engine: Hugging Face `generate` or vLLM."""
    vllm_gpu_memory_utilization: float = 0.3
    """Fraction of GPU memory vLLM may take when it shares the GPU with training."""
    vllm_kv_cache_gib: float = 1.0
    """KV-cache size in GiB for vLLM on CPU (sets VLLM_CPU_KVCACHE_SPACE)."""
    vllm_max_model_length: int | None = None
    """vLLM context window; None = prompt + completion lengths or the model's own."""
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Precision of the vLLM sampler; "auto" = the training dtype. bfloat16 samples ~3.8x
    faster than HF float32 on a CPU with AMX (SmolLM2-135M, benchmarks/rollout.py) at a
    ~0.07 log-prob gap to a float32 trainer, which the TIS correction (Yao et al. 2025)
    absorbs; float32 matches the trainer to ~1e-6 but is only ~1.5x faster there."""

    # --- policy loss (each algorithm adds its own) -------------------------------
    beta: float = 0.0
    """KL coefficient against the reference policy (GRPO, Shao et al. 2024); 0 skips the reference
    model. DeepSeek-R1 used 0.001."""
    num_iterations: int = 1
    """Optimisation passes over each generation batch, mu in GRPO (PPO's epochs, Schulman et al. 2017)."""
    epsilon: float = 0.2
    """Lower clipping bound: the ratio is clipped to [1 - epsilon, 1 + epsilon_high] (PPO, Schulman
    et al. 2017)."""
    epsilon_high: float | None = None
    """Upper clipping bound, "clip-higher" of DAPO (Yu et al. 2025), which recommends 0.28; None = `epsilon`."""
    reward_weights: list[float] | None = None
    """Weight of each reward function in the weighted sum; None = all 1.0."""
    reward_timeout_s: float | None = 600.0
    """Seconds one reward function may take to score one batch; past it the run stops with an
    error naming the function (a judge that never answers would otherwise hang it). None = no
    limit."""
    mask_truncated_completions: bool = False
    """Exclude completions that never emitted EOS from the loss (overlong filtering, DAPO). The
    library's masked means return 0 when every completion is truncated, which avoids the NaN KL
    that a plain sum / count gives there."""
    max_tool_calling_iterations: int | None = None
    """Most rounds of tool calls in one multi-turn rollout (runs with `tools` or
    `environment_factory`); a trajectory that still calls tools after that many rounds ends there,
    counted in `tools/iteration_cap_ratio`. None = no cap, as in TRL 1.16 (the token budget
    `max_completion_length`, which tool results count toward, still ends every trajectory)."""
    tool_timeout: float | None = 30.0
    """Seconds one tool call may run before it fails with a timeout message (the model reads it and
    the call counts in `tools/failure_frequency`); an environment's `reset` past it stops the run with
    an error naming the row. None = no limit (TRL 1.16 has none)."""
    vllm_importance_sampling_correction: bool | None = None
    """Correct for the sampler not being the trained policy (TIS/MIS, "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training", Yao et al. 2025); None = on exactly when engine is
    vllm (the HF engine records its sampling log-probs too, so it can be switched on there)."""
    vllm_importance_sampling_mode: ISMode = "sequence_mask"
    """`token_*`: one weight pi_train / pi_sampler per token; `sequence_*`: one per completion (product
    of its token ratios). `*_truncate` clamps the weight into [clip_min, clip_max] (TIS), `*_mask`
    zeroes weights outside it (MIS). TRL 1.16's default is sequence_mask."""
    vllm_importance_sampling_clip_min: float | None = None
    """Lower bound of the correction weight; None = no lower bound."""
    vllm_importance_sampling_clip_max: float | None = 3.0
    """Upper bound of the correction weight (TRL 1.16's default 3.0); None = no upper bound."""
    vllm_importance_sampling_cap: float | None = None
    """Deprecated (as in TRL 1.16): the former name of vllm_importance_sampling_clip_max; setting it
    sets clip_max and warns."""

    # --- memory-efficient log-probs ---------------------------------------------
    logprob_kernel: Literal["auto", "triton", "chunked", "full"] = "auto"
    """How token log-probs are computed from the hidden states: "triton" (fused kernels, never the
    (B, T, V) logits), "chunked" (the same in PyTorch, chunk by chunk), "full" (the whole logits at
    once, the textbook way), or "auto" (Triton on CUDA, chunked elsewhere)."""
    logprob_chunk_size: int = 1024
    """Tokens per chunk of the chunked path (read by "chunked", and by "auto" off CUDA; the Triton
    kernels tile by themselves)."""

    # --- LoRA (Hu et al. 2021) ------------------------------------------------------
    use_lora: bool = False
    """Train low-rank adapters instead of all weights."""
    lora_r: int = 16
    """Adapter rank r."""
    lora_alpha: int = 32
    """Adapter scale: the update is multiplied by lora_alpha / lora_r."""
    lora_dropout: float = 0.0
    """Dropout on the adapter input, in [0, 1). 0 (peft's default) because dropout costs about
    20% of a LoRA forward+backward on SmolLM2 and RL's sampling noise already regularises."""
    lora_target_modules: list[str] = field(default_factory=lambda: list(_ALL_PROJECTIONS))
    """Module names that get adapters; the default covers all attention and MLP projections."""

    # --- logging ---------------------------------------------------------------------
    logging_steps: int = 10
    """Print the progress-bar summary of samples every this many optimizer steps (with
    `log_completions`); metrics go to history.jsonl at every step whatever this is."""
    save_steps: int = 500
    """Save a checkpoint every this many optimizer steps; 0 saves only at the end."""
    save_total_limit: int | None = None
    """Keep only the newest this many checkpoints (older ones are deleted); None keeps all."""
    log_completions: bool = False
    """Print a sample of (prompt, completion, reward) rows every `logging_steps`."""
    num_completions_to_print: int | None = None
    """Rows printed when `log_completions` is on; None prints all."""
    report_to: Literal["none", "wandb", "tensorboard"] = "none"
    """Where metrics go besides the console."""
    doctor: Literal["warn", "stop", "off"] = "warn"
    """The run doctor (`course_lib.doctor`) every `logging_steps`: "warn" prints each finding once
    and writes it to history.jsonl; "stop" also ends the run (checkpoint saved) on an error-level
    finding; "off" skips it. `python -m course_lib doctor OUTPUT_DIR` reads the same rules."""

    # --- practitioner options: model loading, sampling extras, data order, evaluation ---------
    # What each does lives where it acts: course_lib.run.model_options (dropout, float32 head,
    # loading kwargs), the rollout engines (generation_kwargs, chat_template_kwargs),
    # course_lib.run.batches (shuffle_dataset), course_lib.run.in_loop_eval (evaluation).
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
    of groups with a spread or `max_num_gen_batches` rounds are spent, whichever comes first
    (`course_lib.run.dynamic_sampling`). TRL 1.16 has no equivalent."""
    max_num_gen_batches: int = 10
    """With dynamic_sampling: most generation rounds per batch (verl's name); a batch still short
    after them is completed with zero-spread groups."""
    async_generation: bool = False
    """Sample the next generation batches in a worker process while the trainer learns; samples lag by
    up to max_staleness optimizer steps, corrected as async_old_logps says (course_lib.run.async_rollouts)."""
    max_staleness: int = 1
    """With async_generation: most optimizer steps a batch's sampling weights lag the trainer's (TRL's
    AsyncGRPOConfig name); 0 samples what the synchronous trainer samples. The trainer waits, never drops."""
    weight_sync_steps: int = 1
    """With async_generation: weights reach the worker at steps that are multiples of this (<= max_staleness + 1)."""
    async_old_logps: Literal["sampler", "recompute"] = "sampler"
    """With async_generation, the clip's old log-probs: "sampler", the worker's (TRL's AsyncGRPO; no extra forward);
    "recompute", the trainer's when it takes the batch, with the sampling correction (decoupled PPO, AReaL)."""
    async_batch_timeout_s: float | None = 1800.0
    """With async_generation: most seconds the trainer waits for one batch from the worker; past it the worker
    (stopped or stuck) is killed, and the run saves what it has and stops with an error (the worker's
    start-up gets at least 600 s). None = no limit."""

    # --- derived in __post_init__ (not arguments, not saved) --------------------
    effective_steps_per_generation: int = field(init=False, repr=False)
    effective_generation_batch_size: int = field(init=False, repr=False)
    effective_vllm_importance_sampling_correction: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_field_types(self)
        check_finite_fields(self)
        check_magnitudes(self)
        self._normalize()
        check_choices(self)  # every Literal field: its annotation lists the allowed values
        self._check_ranges()
        self._derive_batches()
        self._derive_rest()
        self._warn_risky()

    # -- validation steps, split so that subclasses can extend them ----------------
    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: only __post_init__ writes

    def _normalize(self) -> None:
        if self.top_k == 0:
            self._set("top_k", None)  # TRL spells "disabled" as 0
        if self.reward_weights is not None:
            self._set("reward_weights", [float(w) for w in self.reward_weights])
        if self.vllm_importance_sampling_cap is not None:  # TRL 1.16's deprecated alias of clip_max
            warn(f"vllm_importance_sampling_cap={self.vllm_importance_sampling_cap} is deprecated (as in TRL 1.16) "
                 "and now sets vllm_importance_sampling_clip_max; note that the correction's default mode is "
                 "sequence_mask. Fix: set vllm_importance_sampling_clip_max (and _mode) instead.")
            self._set("vllm_importance_sampling_clip_max", self.vllm_importance_sampling_cap)
            self._set("vllm_importance_sampling_cap", None)  # moved: saved configs carry clip_max only
        self._set("lora_target_modules", list(self.lora_target_modules))

    def _check_ranges(self) -> None:
        check_run_options(self)
        check_shared_ranges(self)
        if self.num_generations < self.MIN_GENERATIONS:
            low = self.MIN_GENERATIONS
            why = ("a group baseline needs at least two completions per prompt" if low >= 2
                   else "every prompt needs at least one completion")
            fail("num_generations", self.num_generations, f"is below {low}: {why}",
                 f"set num_generations >= {low}" + (" (8 is TRL's default)" if low >= 2 else ""))
        check_is_settings(self.vllm_importance_sampling_mode, self.vllm_importance_sampling_clip_min,
                          self.vllm_importance_sampling_clip_max)

    def _requested_steps_per_generation(self) -> int | None:
        """Steps per generation asked for by the user (RLOO/PPO may derive it)."""
        return self.steps_per_generation

    def _derive_batches(self) -> None:
        # TRL's GRPOConfig.__post_init__ rule; the arithmetic is schedule.py's, the wording the config's.
        global_micro_batch = schedule.generation_batch_size(self.per_device_train_batch_size, 1, self.num_processes)
        steps = self._requested_steps_per_generation()
        if steps is not None and self.generation_batch_size is not None:
            fail("steps_per_generation", steps, f"is set together with generation_batch_size="
                  f"{self.generation_batch_size}; each determines the other", "set only one of the two")
        if self.generation_batch_size is not None and self.generation_batch_size % global_micro_batch != 0:
            fail("generation_batch_size", self.generation_batch_size,
                  f"is not a multiple of per_device_train_batch_size * num_processes = {global_micro_batch}",
                  f"use a multiple of {global_micro_batch}")
        steps = schedule.resolve_steps_per_generation(self.per_device_train_batch_size,
                                                      self.gradient_accumulation_steps, self.num_processes,
                                                      steps, self.generation_batch_size)
        generation_batch = schedule.generation_batch_size(self.per_device_train_batch_size, steps, self.num_processes)
        if generation_batch % self.num_generations != 0:
            fail("num_generations", self.num_generations,
                  f"does not divide the generation batch of {generation_batch} completions "
                  f"(per_device_train_batch_size={self.per_device_train_batch_size} * num_processes="
                  f"{self.num_processes} * steps_per_generation={steps}), so a prompt's group would be split",
                  "pick num_generations dividing it, or change per_device_train_batch_size / steps_per_generation")
        self._set("effective_steps_per_generation", steps)
        self._set("effective_generation_batch_size", generation_batch)

    def _derive_rest(self) -> None:
        correction = self.vllm_importance_sampling_correction
        self._set("effective_vllm_importance_sampling_correction",  # stale samples are corrected too
                  (self.engine == "vllm" or self.async_generation and self.async_old_logps == "recompute")
                  if correction is None else bool(correction))

    def _warn_risky(self) -> None:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            warn(f"epsilon_high={self.epsilon_high} < epsilon={self.epsilon}: the ratio may fall further than it "
                  "may rise; DAPO's clip-higher uses epsilon_high > epsilon (0.28 vs 0.2).")
        if self.sync_ref_model and self.beta == 0.0:
            warn("sync_ref_model=True with beta=0.0: there is no reference model to move; set beta > 0.")
        if self.vllm_importance_sampling_correction and self.engine != "vllm" and not self.async_generation:
            warn(f"vllm_importance_sampling_correction=True has almost no effect with engine={self.engine!r}: the "
                 "sampler is the trained model itself, so the weights stay at 1 up to rounding.")

    # -- derived arithmetic --------------------------------------------------------
    @property
    def effective_batch_size(self) -> int:
        """Completions contributing to one optimizer step (all processes)."""
        return schedule.effective_batch_size(self.per_device_train_batch_size, self.gradient_accumulation_steps,
                                             self.num_processes)

    @property
    def unique_prompts_per_generation(self) -> int:
        """Distinct prompts in one generation batch."""
        return schedule.unique_prompts_per_generation(self.effective_generation_batch_size, self.num_generations)

    @property
    def optimizer_steps_per_generation(self) -> float:
        """Optimizer steps taken from one generation batch (every replay counted)."""
        return schedule.optimizer_steps_per_generation(self.effective_steps_per_generation,
                                                       self.gradient_accumulation_steps, self.num_iterations)

    def total_steps(self, num_prompts: int) -> int:
        """Optimizer steps of the run: `max_steps`, or `num_train_epochs` passes over `num_prompts`.

        An epoch is every whole generation batch the prompts fill (a last, partial one is
        dropped, as TRL's RepeatSampler does), each giving `optimizer_steps_per_generation`
        steps; the result is rounded up and at least 1.
        """
        if self.max_steps > 0:
            return self.max_steps
        generations_per_epoch = num_prompts // self.unique_prompts_per_generation
        return max(1, math.ceil(self.num_train_epochs * generations_per_epoch * self.optimizer_steps_per_generation))

    @property
    def sampling_extras(self) -> dict[str, Any]:
        """`generation_kwargs` plus the engine-specific options (`SamplingConfig.generation_kwargs`)."""
        extras = dict(self.generation_kwargs or {})
        if self.cache_implementation is not None and self.engine == "hf":
            extras.setdefault("cache_implementation", self.cache_implementation)
        if self.vllm_structured_outputs_regex is not None and self.engine == "vllm":
            from vllm.sampling_params import StructuredOutputsParams  # only reached with vLLM installed

            extras.setdefault("structured_outputs", StructuredOutputsParams(regex=self.vllm_structured_outputs_regex))
        return extras

    @property
    def effective_eval_steps(self) -> int:
        """Optimizer steps between in-loop evaluations: `eval_steps`, else `logging_steps`."""
        return self.eval_steps or self.logging_steps

    @property
    def effective_num_generations_eval(self) -> int:
        """Completions per held-out prompt: `num_generations_eval`, else `num_generations`."""
        return self.num_generations_eval or self.num_generations

    # -- checks that need information known only to the trainer ----------------------
    def check_reward_weights(self, num_reward_funcs: int) -> list[float]:
        """Return the weights for `num_reward_funcs` functions, or raise if they do not match."""
        if self.reward_weights is None:
            return [1.0] * num_reward_funcs
        if len(self.reward_weights) != num_reward_funcs:
            fail("reward_weights", self.reward_weights,
                  f"has {len(self.reward_weights)} entries but {num_reward_funcs} reward functions were given",
                  f"pass exactly {num_reward_funcs} weights, or None for equal weights")
        return list(self.reward_weights)

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of the arguments (not the derived values), plus `algo`."""
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RLConfig:
        """Rebuild a config of this class from `to_dict` output (`course_lib.algos.config_from_dict`
        picks the class from the `algo` key)."""
        return from_dict(data, cls)
