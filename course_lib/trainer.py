"""The training loop shared by GRPO, RLOO and PPO.

Read it top to bottom, as CleanRL's ``ppo.py``: the ``while`` loop of ``_train()`` repeats

1. **generate** (``_generate``): ``unique prompts x num_generations`` completions from the
   rollout engine (``hf`` or ``vllm``), prompt-major, and their rewards (reward functions ->
   rewards here, because dynamic sampling keeps or redraws groups by them);
2. **score** (``_score``): old / reference log-probs when the schedule or the KL needs them;
   the sampler-mismatch weight when a correction is on; the algorithm's advantages
   (``algorithm.advantages``). Steps 1 and 2 are the run's batch generator
   (``course_lib.run.sampled_batches``, nanochat's ``get_batch``): asynchronous generation is
   another one (``course_lib.run.async_rollouts``), and SFT / DPO read their batches from the
   dataset (``course_lib.run.dataset_batches``);
3. **learn** (``_micro_step``): ``steps_per_generation`` micro-batches, replayed
   ``num_iterations`` times, each a forward, ``algorithm.loss`` and a backward;
4. **step** (``_optimizer_step``): every ``gradient_accumulation_steps`` micro-batches
   (``course_lib.schedule`` gives the same table);
5. **log** (``_log_step``): TRL-named metrics to ``history.jsonl``, a progress bar, the
   in-loop evaluation when due, a periodic sample table; then **save** every ``save_steps`` and
   at the last step, as TRL does (``course_lib.run.trainer_state``).

Where the loop is (counters, batch in flight, sampler position) is one object, ``self.state``
(``course_lib.run.loop_state.LoopState``): what a checkpoint saves of it and a resume restores.

What differs between GRPO, RLOO and PPO is two calls on the algorithm object
(``course_lib/algos``): ``advantages(...)`` after scoring and ``loss(...)`` in each
micro-step; the shared maths is in ``course_lib/ops``. This file only orders the calls
and has no per-algorithm branch.

Simplifications vs TRL: the generation batch is consumed in order, not shuffled (so the
schedule matches the seed's tables); weights are pushed to the engine lazily, right before
the next generation that follows an optimizer step (the samples are the same as with an
eager push after every step, with fewer pushes). Several processes run through accelerate
(``course_lib.run.distributed``) and give the result of one process on the same global batch. With
``async_generation`` a worker process samples the batches ahead (``course_lib.run.async_rollouts``).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from .algos import get_algorithm
from .algos.base import MicroBatch, PolicyOutputs
from .models import eval_mode, resolve_dtype
from .policy import PolicyForward, ReferencePolicy, completion_forward, prepare_policy
from .rewards import reward_function_name
from .rollout import SamplingConfig, make_engine
from .rollout.tool_run import setup_tools
from .run import checkpoint as ckpt
from .run.batches import DatasetRows, Generated, GenerationBatch, PromptSampler, micro_steps_per_cycle
from .run.distributed import Shards, make_accelerator
from .run.reward_log import RewardLog
from .run.folder import claim_output_dir, run_identity
from .doctor.live import LiveDoctor
from .run.async_rollouts import AsyncSampledBatches
from .run.dataset_batches import GENERATORS as DATASET_BATCHES
from .run.history import MetricsLogger, StepClock, format_samples, mean_rows as _mean_rows, unique_prompt_samples
from .run.in_loop_eval import InLoopEvaluator
from .run.loop_state import LoopState
from .run.model_options import apply_model_options, make_optimizer, mix_into_reference
from .run.nonfinite import check_finite_update, check_finite_weights, clip_gradients
from .run.step_report import StepReport
from .run.sampled_batches import SampledBatches
from .run.trainer_state import TrainerFiles
from .run.trainer_arguments import check_trainer_inputs, load_model, require_sandboxes, trl_style_arguments
from .config.validation import check_train_dataset


class Trainer:
    """GRPO, RLOO, PPO, SFT, rejection sampling, DPO or distillation, selected by the config's class (``algos``).

    Args:
        config: a ``GRPOConfig``, ``RLOOConfig`` or ``PPOConfig`` (course_lib.config).
        reward_funcs: functions ``f(prompts, completions, **columns) -> list[float | None]``.
        train_dataset: rows with a ``prompt`` (conversational or text) and any columns the
            reward functions read (e.g. ``answer``).
        model, tokenizer: the policy, or a name / folder (TRL's ``model``); None loads ``config.model_name_or_path``.
            TRL's ``args=`` and ``processing_class=`` work too (``course_lib.run.trainer_arguments``).
        eval_dataset: held-out rows for ``config.eval_strategy="steps"`` (``course_lib.run.in_loop_eval``).
        correct_fn: ``f(completion, answer) -> bool``, the in-loop greedy accuracy's rule (default ``is_correct``).
        tools, environment_factory: multi-turn rollouts with tool calls, as in TRL 1.16
            (``course_lib.rollout.tool_run``); an environment's ``get_reward`` may replace reward_funcs.
    """

    def __init__(self, config=None, reward_funcs: list[Callable] | Callable | None = None, train_dataset=None,
                 model=None, tokenizer=None, progress: bool = True, on_step: Callable[[dict], None] | None = None,
                 eval_dataset=None, correct_fn: Callable | None = None, tools: list[Callable] | None = None,
                 environment_factory=None, *, args=None, processing_class=None,
                 teacher_model=None):  # distillation's teacher: a model, (model, tokenizer) or a path
        config, reward_funcs, model, tokenizer = trl_style_arguments(
            config, reward_funcs, train_dataset, model, tokenizer, args, processing_class, environment_factory, correct_fn)
        # a table with usable prompts, or SFT's conversations (course_lib.config.validation)
        check_train_dataset(train_dataset, messages_rows=getattr(config, "MESSAGES_ROWS", False))
        check_trainer_inputs(config, train_dataset, model, tokenizer)  # enough rows, reward-argument columns, ...
        self.config, self.algorithm = config, get_algorithm(config)
        self.max_steps = config.total_steps(len(train_dataset))
        self.dataset = train_dataset
        self.rows = DatasetRows(train_dataset)  # plain lists: a generation cycle indexes them
        self.progress, self.on_step = progress, on_step
        torch.manual_seed(config.seed)
        model, tokenizer = load_model(config, model, tokenizer)
        self.tokenizer = tokenizer
        self.tool_run, self.reward_funcs, self.reward_weights = setup_tools(
            config, list(reward_funcs or []), tools, environment_factory, tokenizer, self.rows.columns)
        require_sandboxes(self.reward_funcs)  # refused now, not at the first completion holding code
        # accelerate owns the device and the process group; one process is the plain case.
        self.accelerator = make_accelerator(config)
        self.shards = Shards(self.accelerator, config.per_device_train_batch_size * config.effective_steps_per_generation)
        self.model = apply_model_options(prepare_policy(model, config, self.accelerator.device), config)
        self.value_head = self.algorithm.make_value_head(self.model, config)
        if self.value_head is not None:
            self.value_head.to(device=self.accelerator.device, dtype=next(self.model.parameters()).dtype)
        # The forward the loss differentiates: policy (+ value head) through `completion_forward`,
        # wrapped by DDP when there are several processes (gradients averaged); plain in one.
        self.policy_forward = self.accelerator.prepare_model(PolicyForward(self.model, self.value_head))
        needs_reference = config.beta != 0.0
        self.reference = ReferencePolicy(self.model) if needs_reference else None
        self.optimizer = make_optimizer(self.model, self.value_head, config)  # AdamW, TRL's default
        from transformers import get_scheduler

        self.scheduler = get_scheduler(config.lr_scheduler_type, self.optimizer, num_warmup_steps=config.warmup_steps,
                                       num_training_steps=self.max_steps)
        self.engine = make_engine(config.engine, self.model, tokenizer, **self._engine_options())
        self.evaluator = (None if config.eval_strategy == "no" else
                          InLoopEvaluator(config, eval_dataset, self.reward_funcs, self.reward_weights, correct_fn))
        self.output_dir = Path(config.output_dir)
        kernel = config.logprob_kernel  # -> completion_forward's fused / triton switches
        self._logprob_options = {"fused": kernel != "full", "chunk_size": config.logprob_chunk_size,
                                 "triton": {"auto": None, "triton": True}.get(kernel, False)}
        # Where the loop is, all a checkpoint saves of it (course_lib.run.loop_state).
        self.state = LoopState(PromptSampler(len(train_dataset), config.seed, shuffle=config.shuffle_dataset))
        self.logger: MetricsLogger | None = None  # created by train()
        self.interrupted, self.stop_signal = False, None  # Ctrl-C/SIGTERM/SIGHUP stopped train() early: which
        self._report: StepReport | None = None  # the bar, notes, the closing line (course_lib.run.step_report)
        self._clock = (time.time(), 0)  # (start of train(), tokens_seen then): throughput
        self.reward_log = RewardLog()  # what reward functions log through log_metric (course_lib.judge)
        self.step_clock = StepClock()  # timing/*: wall and generation seconds between logged rows
        self.doctor = LiveDoctor(config)  # course_lib.doctor, every logging_steps
        self.batches = None  # train()'s batch generator: sampled + scored (sync or async), or read (SFT, DPO)
        self.algorithm.setup(self, teacher_model=teacher_model)  # e.g. distillation's teacher

    def _engine_options(self) -> dict:
        config = self.config
        if config.engine == "hf":
            # The HF engine records sampling log-probs only when the TIS correction reads them.
            return {"record_logps": bool(config.effective_vllm_importance_sampling_correction)}
        sampler_dtype = config.dtype if config.vllm_dtype == "auto" else config.vllm_dtype
        dtype = resolve_dtype(sampler_dtype, self.accelerator.device)
        return {"dtype": str(dtype).removeprefix("torch."), "seed": config.seed,
                "max_model_len": config.vllm_max_model_length, "kv_cache_gib": config.vllm_kv_cache_gib,
                "gpu_memory_utilization": config.vllm_gpu_memory_utilization, "model_impl": config.vllm_model_impl}

    # ------------------------------------------------------------------ generate + score
    def _make_batches(self, asynchronous: bool = False):
        """The run's batch generator, from the trainer's parts as they are now: ``SampledBatches`` (RL, or
        ``AsyncSampledBatches`` when ``asynchronous`` and ``async_generation``), or the dataset's rows
        (``algorithm.batches``: "sft", "pairs"; ``course_lib.run.dataset_batches``)."""
        config, parts = self.config, dict(config=self.config, state=self.state, rows=self.rows,
                                          tokenizer=self.tokenizer, shards=self.shards, device=self.accelerator.device)
        kind = self.algorithm.batches
        if kind == "pairs":  # DPO scores each pair with the reference's log-probs
            parts.update(model=self.model, reference=self.reference, forward=self._forward_in_chunks)
        if kind != "sampled":
            return DATASET_BATCHES[kind](**parts)
        parts.update(algorithm=self.algorithm, engine=self.engine, model=self.model, tool_run=self.tool_run,
                     reward_funcs=self.reward_funcs, reward_weights=self.reward_weights, reference=self.reference,
                     with_values=self.value_head is not None, clock=self.step_clock, forward=self._forward_in_chunks,
                     reward_log=self.reward_log)
        if asynchronous and config.async_generation:  # a worker process samples ahead (course_lib.run.async_rollouts)
            return AsyncSampledBatches(**parts, max_steps=self.max_steps,
                                       on_failure=lambda: self._files().save_after_failure(self.logger.entries))
        return SampledBatches(**parts)

    def _generate(self) -> Generated:
        """Step 1: the next batch's completions and rewards (``course_lib.run.sampled_batches``), or rows read."""
        return (self.batches or self._make_batches()).generate()

    def _score(self, generated: Generated) -> GenerationBatch:
        """Step 2: log-probs before learning, sampler correction, the algorithm's advantages."""
        return (self.batches or self._make_batches()).score(generated)

    @torch.no_grad()
    def _forward_in_chunks(self, model, batch_tensors, with_values: bool = False):
        config, size = self.config, self.config.per_device_train_batch_size
        logps, values = [], []
        for start in range(0, batch_tensors["prompt_ids"].shape[0], size):
            sl = slice(start, start + size)
            lp, v, _ = completion_forward(model, batch_tensors["prompt_ids"][sl], batch_tensors["prompt_mask"][sl],
                                          batch_tensors["completion_ids"][sl], batch_tensors["completion_mask"][sl],
                                          temperature=config.temperature, **self._logprob_options,
                                          value_head=self.value_head if with_values else None)
            logps.append(lp.float())
            values.append(v.float() if v is not None else None)
        return torch.cat(logps), (torch.cat(values) if with_values else None)

    def _sync_engine(self) -> None:
        self.state.sync_engine(self.engine, self.model)

    # ------------------------------------------------------------------ learn
    def _micro_step(self, mb: MicroBatch) -> dict:
        """Step 3: forward, loss, backward on one micro-batch; the gradients accumulate."""
        config = self.config
        # Tokens of this micro-step on all processes: token-mean losses divide by it (PPO).
        mb.num_tokens_all_processes = self.shards.sum(float(mb.completion_mask.sum()))
        closes_window = (self.state.micro_step + 1) % config.gradient_accumulation_steps == 0
        sync = contextlib.nullcontext() if closes_window else self.accelerator.no_sync(self.policy_forward)
        with sync:  # DDP averages gradients only at the last micro-step of an accumulation window
            attention = mb.completion_mask if mb.attention_mask is None else mb.attention_mask  # tool results: read
            logps, values, entropies, *top1 = self.policy_forward(
                mb.prompt_ids, mb.prompt_mask, mb.completion_ids, attention,
                temperature=config.temperature, **self._logprob_options,
                with_entropy=True, segment_ids=mb.segment_ids,  # packed rows (SFT's packing)
                with_top1=getattr(self.algorithm, "logs_token_accuracy", False))  # SFT's mean_token_accuracy
            outputs = PolicyOutputs(logps=logps, entropies=entropies, values=values, top1=(top1 or [None])[0])
            out = self.algorithm.loss(mb, outputs, config, num_items_in_batch=self.state.batch.num_items_in_batch)
            out.loss.backward()
        metrics = dict(out.metrics)
        metrics["loss"] = out.loss.item()
        return metrics

    def _optimizer_step(self) -> dict:
        """Step 4: clip, check for NaN/inf, apply the accumulated gradients; the reference follows if asked."""
        parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = clip_gradients(parameters, self.config.max_grad_norm)
        learning_rate, state = self.scheduler.get_last_lr()[0], self.state
        with self.doctor.reporting_non_finite(state.step + 1, self.logger, self.shards.is_main):  # then re-raised
            check_finite_update(grad_norm, state.window, step=state.step + 1, output_dir=self.output_dir)
            self.optimizer.step()
            check_finite_weights(self.model, self.value_head, step=state.step + 1, output_dir=self.output_dir,
                                 updated=parameters)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        state.weights_dirty = True
        state.step += 1
        if self.batches is not None:  # e.g. the generation worker gets the weights it now may sample with
            self.batches.after_step(state.step)
        config = self.config
        if config.sync_ref_model and self.reference is not None and state.step % config.ref_model_sync_steps == 0:
            with self.reference.model() as reference:  # TR-DPO: the reference follows the policy
                mix_into_reference(reference, self.model, config.ref_model_mixup_alpha)
        return {"grad_norm": grad_norm.item(), "learning_rate": learning_rate}

    # ------------------------------------------------------------------ the loop
    def train(self, resume_from: str | Path | None = None) -> list[dict]:
        """Run until ``self.max_steps`` optimizer steps (``config.total_steps``); return the logged rows.

        ``resume_from``: a checkpoint folder, or ``"latest"`` for the newest complete one in
        ``output_dir``. A non-empty ``output_dir`` is refused unless the run resumes the one
        there or ``config.overwrite_output_dir`` is set (``course_lib.run.folder``). Ctrl-C, SIGTERM
        or SIGHUP saves a checkpoint at the next optimizer step and returns (``self.interrupted``
        True, ``self.stop_signal`` that signal, no ``final/``; ``course_lib.run.signals``).
        """
        resume_folder = ckpt.resolve_resume(resume_from, self.output_dir) if resume_from else None
        with ckpt.StopOnInterrupt() as interrupt, claim_output_dir(
                self.output_dir, resume_folder=resume_folder, overwrite=self.config.overwrite_output_dir,
                main=self.shards.is_main, agree=self.shards.sum):
            try:
                return self._train(resume_folder, interrupt)
            finally:  # whatever ended the run, a generation worker it started is stopped
                batches, self.batches = self.batches, None
                if batches is not None:
                    batches.close()

    def _train(self, resume_folder, interrupt) -> list[dict]:
        config = self.config
        previous_rows = self._files().resume(resume_folder) if resume_folder else []
        # Only the main process writes files; the others keep their rows in memory.
        self.logger = MetricsLogger(self.output_dir, config.report_to, config.to_dict(), previous_rows,
                                    write=self.shards.is_main)
        micro_per_cycle, state = micro_steps_per_cycle(config), self.state
        self._report = StepReport(self.max_steps, state.step, self.algorithm.name.upper(), config.max_grad_norm,
                                  shown=self.progress and self.shards.is_main)
        self._clock = (time.time(), state.tokens_seen)
        self.step_clock.restart()
        self.model.train()
        self.batches = self._make_batches(asynchronous=True)  # after the resume: a worker starts where it is
        # One `while` over micro-steps, not nested loops, so a run can stop, save and resume mid-batch and
        # max_steps may end mid-cycle (course_lib.run.loop_state).
        while state.step < self.max_steps:
            if state.needs_batch(micro_per_cycle):  # steps 1 and 2: sampled + scored, or read from the dataset
                state.batch, state.batch_position = self._score(self._generate()), 0
            index = state.batch_position % config.effective_steps_per_generation
            state.window.append(self._micro_step(state.batch.micro_batch(index, config.per_device_train_batch_size)))
            state.batch_position += 1
            state.micro_step += 1
            if state.micro_step % config.gradient_accumulation_steps:
                continue
            window = self.shards.mean_metrics(_mean_rows(state.window))  # averaged over processes
            row = {"step": state.step + 1, **self._optimizer_step(), **window, **state.batch.metrics}
            state.window = []
            doctor_stop = self._log_step(row)
            # Ctrl-C on any process stops them all, as does an error finding under doctor="stop"
            stop = self.shards.sum(float(interrupt.requested or doctor_stop)) > 0
            if config.save_steps > 0 and (state.step % config.save_steps == 0 or state.step == self.max_steps) or stop:
                self.save_checkpoint()
            if stop:
                self.interrupted, self.stop_signal = True, interrupt.signum
                break
        self._report.close_bar()
        if not self.interrupted and self.shards.is_main:
            self.save_final()
        self.accelerator.wait_for_everyone()
        self.logger.close()
        self._report.closing(self.output_dir, state.step, self.interrupted, config.report_to)
        return self.logger.rows

    def _log_step(self, row: dict) -> bool:
        """Step 5: throughput, in-loop evaluation when due, ``history.jsonl``, the run doctor, progress bar,
        sample table. True when the doctor asks the run to stop (``doctor="stop"``)."""
        config, (started, tokens_at_start), state = self.config, self._clock, self.state
        elapsed = max(time.time() - started, 1e-9)
        episodes, step = state.cycle * config.effective_generation_batch_size, state.step
        row.update({"epoch": state.epoch(),
                    "num_tokens": state.tokens_seen, "tokens/s": (state.tokens_seen - tokens_at_start) / elapsed,
                    "episode": episodes, "eps": episodes / elapsed, "lr": row["learning_rate"]})
        if self.evaluator is not None and self.evaluator.due(step, self.max_steps):
            self._sync_engine()
            row.update(self.evaluator.run(self.engine, self.model, step))
        row.update(self.step_clock.lap())
        self.logger.log(row)
        doctor_stop = self.doctor.after_step(step, self.logger, self.shards.is_main)
        if self.on_step is not None:
            self.on_step(row)
        self._report.step(step, row)
        if config.log_completions and step % config.logging_steps == 0 and self.shards.is_main:
            limit = config.num_completions_to_print  # None: every row
            samples = state.last_samples
            if config.log_unique_prompts:
                samples = unique_prompt_samples(*samples)
            tqdm.write(f"step {step}\n" + format_samples(*samples, limit=limit))
        return doctor_stop

    def run_identity(self) -> dict:
        """The rows and rewards a resume must match (``course_lib.run.folder``)."""
        return run_identity(self.rows.columns, [reward_function_name(f) for f in self.reward_funcs])

    # Read-only views of the loop's state (``self.state``), as the lessons and callbacks read them.
    step = property(lambda self: self.state.step, doc="Optimizer steps done.")
    micro_step = property(lambda self: self.state.micro_step, doc="Micro-batches done.")
    cycle = property(lambda self: self.state.cycle, doc="Generation batches made.")
    tokens_seen = property(lambda self: self.state.tokens_seen, doc="Prompt + completion tokens, all processes.")
    batch = property(lambda self: self.state.batch, doc="The generation batch being learned from.")
    _last_samples = property(lambda self: self.state.last_samples, doc="The samples printed next.")
    pipeline = property(lambda self: getattr(self.batches, "pipeline", None),
                        doc="During train() with async_generation: the generation worker (course_lib.run.async_rollouts).")

    # ------------------------------------------------------------------ use and persistence
    @torch.no_grad()
    def generate(self, prompts, n: int = 1, sampling: SamplingConfig | None = None):
        """Completions of the *current* policy by the run's rollout engine (weights pushed first).

        ``sampling`` defaults to greedy decoding of up to ``max_completion_length`` tokens, the
        setting of a held-out evaluation. Returns the engine's ``RolloutBatch`` (``.texts``
        holds the decoded completions, prompt-major).
        """
        self._sync_engine()
        if sampling is None:
            sampling = SamplingConfig(temperature=0.0, max_tokens=self.config.max_completion_length)
        with eval_mode(self.model):
            return self.engine.generate(list(prompts), n=n, sampling=sampling)

    def save_checkpoint(self) -> Path:
        """``checkpoint-<step>`` (every process must call it): see :mod:`course_lib.run.trainer_state`."""
        return self._files().save_checkpoint(self.logger.entries)

    def save_final(self) -> Path:
        """``<output_dir>/final``: the model (merged with its adapters when LoRA) + tokenizer."""
        return self._files().save_final()

    def _files(self) -> TrainerFiles:
        """What a checkpoint keeps of this run, and where a resume restores it (``course_lib.run.trainer_state``)."""
        return TrainerFiles(output_dir=self.output_dir, config=self.config, state=self.state, algorithm=self.algorithm,
                            model=self.model, value_head=self.value_head, tokenizer=self.tokenizer,
                            optimizer=self.optimizer, scheduler=self.scheduler, shards=self.shards,
                            accelerator=self.accelerator, run_identity=self.run_identity)
