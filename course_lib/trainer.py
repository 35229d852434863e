"""The training loop shared by GRPO, RLOO and PPO.

Read it top to bottom, as CleanRL's ``ppo.py``: the ``while`` loop of ``_train()`` repeats

1. **generate** (``_generate``): ``unique prompts x num_generations`` completions from the
   rollout engine (``hf`` or ``vllm``), prompt-major, and their rewards (``_generate_round``:
   reward functions -> rewards here, because dynamic sampling keeps or redraws groups by them);
2. **score** (``_score``): old / reference log-probs when the schedule or the KL needs them;
   the sampler-mismatch weight when a correction is on; the algorithm's advantages
   (``algorithm.advantages``);
3. **learn** (``_micro_step``): ``steps_per_generation`` micro-batches, replayed
   ``num_iterations`` times, each a forward, ``algorithm.loss`` and a backward;
4. **step** (``_optimizer_step``): every ``gradient_accumulation_steps`` micro-batches
   (``course_lib.schedule`` gives the same table);
5. **log** (``_log_step``): TRL-named metrics to ``history.jsonl``, a progress bar, the
   in-loop evaluation when due, a periodic sample table; then **save** every ``save_steps`` and
   at the last step, as TRL does (``course_lib.run.trainer_state``).

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
from .algos.base import MicroBatch, PolicyOutputs, ScoredBatch
from .models import eval_mode, resolve_dtype
from .ops.importance import sampling_correction
from .ops.stats import nanstd
from .policy import PolicyForward, ReferencePolicy, completion_forward, prepare_policy
from .rewards import completions_like, compute_rewards, no_rewards, reward_function_name
from .rollout import SamplingConfig, make_engine
from .rollout.tool_run import setup_tools
from .run import checkpoint as ckpt
from .run.batches import (Generated, GenerationBatch, PromptSampler, completion_metrics, cycle_seed,
                          micro_steps_per_cycle, repeat_prompts)
from .run.distributed import Shards, make_accelerator
from .run.reward_log import RewardLog
from .run.folder import claim_output_dir, run_identity
from .doctor.live import LiveDoctor
from .run.dynamic_sampling import draw_batch
from .run.async_rollouts import GenerationWorkerError, pipeline_closed, start_pipeline
from .run.history import (MetricsLogger, StepClock, format_samples, mean_rows as _mean_rows,
                          prompt_text as _prompt_text, unique_prompt_samples)
from .run.in_loop_eval import InLoopEvaluator
from .run.model_options import apply_model_options, make_optimizer, mix_into_reference
from .run.nonfinite import check_finite_update, check_finite_weights, clip_gradients
from .run.step_report import StepReport
from .run.trainer_state import resume_trainer, save_after_failure, save_final_model, save_trainer_checkpoint
from .run import dataset_batches
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
        check_train_dataset(train_dataset)  # a table with usable prompts (course_lib.config.validation)
        check_trainer_inputs(config, train_dataset, model, tokenizer)  # enough rows, reward-argument columns, ...
        self.config, self.algorithm = config, get_algorithm(config)
        self.max_steps = config.total_steps(len(train_dataset))
        self.dataset = train_dataset
        # Plain lists once, so each generation cycle indexes them instead of slicing the dataset.
        self._columns = {name: list(train_dataset[name]) for name in train_dataset.column_names}
        self.progress, self.on_step = progress, on_step
        torch.manual_seed(config.seed)
        model, tokenizer = load_model(config, model, tokenizer)
        self.tokenizer = tokenizer
        self.tool_run, self.reward_funcs, self.reward_weights = setup_tools(
            config, list(reward_funcs or []), tools, environment_factory, tokenizer, self._columns)
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
        self.sampler = PromptSampler(len(train_dataset), config.seed, shuffle=config.shuffle_dataset)
        self.evaluator = (None if config.eval_strategy == "no" else
                          InLoopEvaluator(config, eval_dataset, self.reward_funcs, self.reward_weights, correct_fn))
        self.output_dir = Path(config.output_dir)
        kernel = config.logprob_kernel  # -> completion_forward's fused / triton switches
        self._logprob_options = {"fused": kernel != "full", "chunk_size": config.logprob_chunk_size,
                                 "triton": {"auto": None, "triton": True}.get(kernel, False)}
        self.step = 0          # optimizer steps done
        self.micro_step = 0    # micro-batches done
        self.cycle = 0         # generation batches made
        self.reward_log = RewardLog()  # what reward functions log through log_metric
        self.tokens_seen = 0
        self.batch: GenerationBatch | None = None
        self.batch_position = 0  # micro-batches of self.batch consumed
        self._weights_dirty = False  # True after an optimizer step, until the engine has the new weights
        self._window: list[dict] = []  # metrics of the micro-steps since the last optimizer step
        self._last_samples: tuple | None = None  # (prompts, completions, rewards, advantages) to print
        self.logger: MetricsLogger | None = None  # created by train()
        self.interrupted, self.stop_signal = False, None  # Ctrl-C/SIGTERM/SIGHUP stopped train() early: which
        self._report: StepReport | None = None  # the bar, notes, the closing line (course_lib.run.step_report)
        self._clock = (time.time(), 0)  # (start of train(), tokens_seen then): throughput
        self.step_clock = StepClock()  # timing/*: wall and generation seconds between logged rows
        self.doctor = LiveDoctor(config)  # course_lib.doctor, every logging_steps
        self.pipeline = None  # async_generation: the worker process sampling ahead (course_lib.run.async_rollouts)
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
    def _prompts_and_columns(self, rows: list[int]):
        columns = {name: [values[r] for r in rows] for name, values in self._columns.items() if name != "prompt"}
        return [self._columns["prompt"][r] for r in rows], columns

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

    def _generate(self) -> Generated:
        """Step 1: ``unique prompts x G`` completions of this process's rows, prompt-major, scored;
        with ``dynamic_sampling``, rounds until the groups' rewards differ (DAPO)."""
        self._sync_engine()
        generated, generated.metrics, _ = draw_batch(self._generate_round, self.config, self.tokenizer.pad_token_id)
        generated.metrics.update(self.pipeline.metrics if self.pipeline is not None else {})  # staleness
        generated.metrics.update(self.reward_log.pop_means())  # what reward functions logged (log_metric)
        self.cycle += 1
        return generated

    def _generate_round(self, round_index: int = 0) -> Generated:
        config, G = self.config, self.config.num_generations
        # Every process draws the same prompts; it owns rows `self.shards.rows` of the U x G
        # completions (prompt-major) and samples them with their global indices as seeds.
        prompt_rows = self.sampler.take(config.unique_prompts_per_generation)
        rows = repeat_prompts(prompt_rows, G)[self.shards.rows]
        prompts, columns = self._prompts_and_columns(rows)
        sampling = SamplingConfig.from_config(config, first_row=self.shards.rows.start,
                                              seed=cycle_seed(config, self.cycle, round_index))
        with eval_mode(self.model), self.step_clock.generating():
            tools = None if self.tool_run is None else self.tool_run.rollout(  # multi-turn (course_lib.rollout.agents)
                self.engine, self.tokenizer, list(prompts), columns, rows, sampling)
            rollout = ((self.pipeline or self.engine).generate(list(prompts), n=1, sampling=sampling)
                       if tools is None else tools.agent.batch).to(self.accelerator.device)
        generated = Generated(rows=rows, prompts=prompts, columns=columns, rollout=rollout, tools=tools)
        self.tokens_seen += int(self.shards.sum(int(generated.loss_mask.sum() + rollout.prompt_mask.sum())))
        generated.per_func, generated.total = self._rewards(generated) if self.reward_funcs else no_rewards(len(rows))
        return generated

    def _score(self, generated: Generated) -> GenerationBatch:
        """Step 2: log-probs before learning, sampler correction, then the algorithm's advantages (the
        rewards came with step 1)."""
        config, shards, rollout = self.config, self.shards, generated.rollout
        per_func, total = generated.per_func, generated.total
        mask = generated.loss_mask.clone()
        if config.mask_truncated_completions:  # DAPO: truncated answers carry no signal
            mask = mask * rollout.is_eos.unsqueeze(1).to(mask.dtype)
        metrics = {**self._rollout_metrics(rollout, per_func, generated.loss_mask), **generated.metrics}
        if generated.tools is not None:
            metrics.update(self.tool_run.metrics(generated.tools, total,
                                                 lambda t: shards.gather_rows(t.to(self.accelerator.device)).cpu()))
        old_logps, old_values, ref_logps = self._logps_before_learning(rollout)
        corrected = config.effective_vllm_importance_sampling_correction and rollout.sampling_logps is not None
        sampling_ratio = (self._sampling_correction(old_logps, rollout.sampling_logps.float(), generated.loss_mask,
                                                    metrics) if corrected else None)
        # Advantages see the whole generation batch: gather what they read, keep this process's rows.
        gather = lambda t: shards.gather_rows(None if t is None else t.to(self.accelerator.device))  # noqa: E731
        scored = ScoredBatch(rewards=gather(total), mask=gather(mask), is_eos=gather(rollout.is_eos),
                             num_generations=config.num_generations, old_logps=gather(old_logps),
                             ref_logps=gather(ref_logps), old_values=gather(old_values), rewards_per_func=gather(per_func))
        result = self.algorithm.advantages(scored, config)
        width = mask.shape[1]
        advantages, returns = shards.local_rows(result.advantages, width), shards.local_rows(result.returns, width)
        metrics.update(shards.mean_metrics({k: v for k, v in metrics.items() if k.startswith("sampling/")}))
        metrics.update(result.metrics)
        self._last_samples = ([_prompt_text(p) for p in generated.prompts], rollout.texts,
                              torch.nan_to_num(total).tolist(),
                              advantages.float().reshape(len(generated.rows), -1)[:, 0].tolist())
        return GenerationBatch(prompt_ids=rollout.prompt_ids, prompt_mask=rollout.prompt_mask,
                               completion_ids=rollout.completion_ids, completion_mask=mask, advantages=advantages,
                               rows=generated.rows, num_items_in_batch=int(result.num_items_in_batch or scored.mask.sum()),
                               old_logps=old_logps,  # None when on-policy: the loss detaches logps
                               ref_logps=ref_logps, sampling_ratio=sampling_ratio, old_values=old_values,
                               sampling_logps=None if rollout.sampling_logps is None else rollout.sampling_logps.float(),
                               returns=returns, metrics=metrics,
                               attention_mask=None if generated.tools is None else rollout.completion_mask)

    def _rewards(self, generated: Generated) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, K) each reward function's score and (B,) their weighted sum (NaN where none applied)."""
        rollout = generated.rollout
        completions = completions_like(generated.prompts, rollout.texts)
        completion_ids = [[token for token, kept in zip(ids, mask) if kept]  # the masked tokens, as plain lists
                          for ids, mask in zip(rollout.completion_ids.tolist(), rollout.completion_mask.tolist())]
        tools = generated.tools  # multi-turn: each completion is its messages; rewards may read the environments
        extra = {**(tools.reward_kwargs if tools is not None else {}), "log_metric": self.reward_log.log}  # as TRL
        return compute_rewards(self.reward_funcs, generated.prompts, completions if tools is None else tools.completions,
                               generated.columns, self.reward_weights, timeout_s=self.config.reward_timeout_s,
                               completion_ids=completion_ids, extra_kwargs=extra)

    def _rollout_metrics(self, rollout, per_func: torch.Tensor, loss_mask: torch.Tensor) -> dict:
        """TRL's completion-length and per-reward-function metrics over the whole generation batch."""
        device, shards = self.accelerator.device, self.shards
        all_per_func = shards.gather_rows(per_func.to(device)).cpu()
        metrics = completion_metrics(shards.gather_rows(loss_mask.to(device)).cpu(),  # model tokens
                                     shards.gather_rows(rollout.is_eos.to(device)).cpu())
        for f, function in enumerate(self.reward_funcs):
            name = reward_function_name(function)
            metrics[f"rewards/{name}/mean"] = torch.nanmean(all_per_func[:, f]).item()
            metrics[f"rewards/{name}/std"] = nanstd(all_per_func[:, f]).nan_to_num(0.0).item()
        return metrics

    def _logps_before_learning(self, rollout):
        """Old log-probs (and values) when the schedule, the correction or the algorithm needs them, or the
        generation worker's (async_old_logps="sampler", no forward); reference log-probs when beta != 0."""
        config, with_values = self.config, self.value_head is not None
        off_policy = config.num_iterations > 1 or config.effective_steps_per_generation > config.gradient_accumulation_steps
        sampler_old = self.pipeline is not None and config.async_old_logps == "sampler"
        needs_old = not sampler_old and (off_policy or bool(config.effective_vllm_importance_sampling_correction)
                                         or self.algorithm.always_needs_old_logps)
        tensors = {"prompt_ids": rollout.prompt_ids, "prompt_mask": rollout.prompt_mask,
                   "completion_ids": rollout.completion_ids, "completion_mask": rollout.completion_mask}
        old_logps = old_values = ref_logps = None
        if needs_old or with_values or self.reference is not None:
            with eval_mode(self.model):  # no dropout in the reference passes
                if needs_old or with_values:
                    old_logps, old_values = self._forward_in_chunks(self.model, tensors, with_values=with_values)
                if self.reference is not None:
                    with self.reference.model() as reference:
                        ref_logps, _ = self._forward_in_chunks(reference, tensors)
        if sampler_old:  # the behaviour policy's own log-probs, recorded while sampling; 0 past each completion
            old_logps = rollout.sampling_logps.float().masked_fill(rollout.completion_mask == 0, 0.0)
        return old_logps, old_values, ref_logps

    def _sync_engine(self) -> None:
        if self._weights_dirty:
            self.engine.sync_weights(self.model)
            self._weights_dirty = False

    def _sampling_correction(self, old_logps, sampling_logps, completion_mask, metrics: dict) -> torch.Tensor:
        """The configured sampler-mismatch weight (no gradient), at the algorithm's level."""
        config = self.config
        weight, stats = sampling_correction(old_logps, sampling_logps, completion_mask,
                                            mode=config.vllm_importance_sampling_mode,
                                            clip_min=config.vllm_importance_sampling_clip_min,
                                            clip_max=config.vllm_importance_sampling_clip_max,
                                            level=self.algorithm.sampling_correction_level)
        metrics.update(stats)
        return weight

    # ------------------------------------------------------------------ learn
    def _micro_step(self, mb: MicroBatch) -> dict:
        """Step 3: forward, loss, backward on one micro-batch; the gradients accumulate."""
        config = self.config
        # Tokens of this micro-step on all processes: token-mean losses divide by it (PPO).
        mb.num_tokens_all_processes = self.shards.sum(float(mb.completion_mask.sum()))
        closes_window = (self.micro_step + 1) % config.gradient_accumulation_steps == 0
        sync = contextlib.nullcontext() if closes_window else self.accelerator.no_sync(self.policy_forward)
        with sync:  # DDP averages gradients only at the last micro-step of an accumulation window
            attention = mb.completion_mask if mb.attention_mask is None else mb.attention_mask  # tool results: read
            logps, values, entropies = self.policy_forward(
                mb.prompt_ids, mb.prompt_mask, mb.completion_ids, attention,
                temperature=config.temperature, **self._logprob_options,
                with_entropy=True)
            out = self.algorithm.loss(mb, PolicyOutputs(logps=logps, entropies=entropies, values=values), config,
                                      num_items_in_batch=self.batch.num_items_in_batch)
            out.loss.backward()
        metrics = dict(out.metrics)
        metrics["loss"] = out.loss.item()
        return metrics

    def _optimizer_step(self) -> dict:
        """Step 4: clip, check for NaN/inf, apply the accumulated gradients; the reference follows if asked."""
        parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = clip_gradients(parameters, self.config.max_grad_norm)
        learning_rate = self.scheduler.get_last_lr()[0]
        with self.doctor.reporting_non_finite(self.step + 1, self.logger, self.shards.is_main):  # then re-raised
            check_finite_update(grad_norm, self._window, step=self.step + 1, output_dir=self.output_dir)
            self.optimizer.step()
            check_finite_weights(self.model, self.value_head, step=self.step + 1, output_dir=self.output_dir,
                                 updated=parameters)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._weights_dirty = True
        self.step += 1
        if self.pipeline is not None:  # the worker gets the weights and the cycles they now may sample
            self.pipeline.advance(self.step)
        config = self.config
        if config.sync_ref_model and self.reference is not None and self.step % config.ref_model_sync_steps == 0:
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
                main=self.shards.is_main, agree=self.shards.sum), pipeline_closed(self):
            return self._train(resume_folder, interrupt)

    def _train(self, resume_folder, interrupt) -> list[dict]:
        config = self.config
        previous_rows = resume_trainer(self, resume_folder) if resume_folder else []
        # Only the main process writes files; the others keep their rows in memory.
        self.logger = MetricsLogger(self.output_dir, config.report_to, config.to_dict(), previous_rows,
                                    write=self.shards.is_main)
        micro_per_cycle = micro_steps_per_cycle(config)
        self._report = StepReport(self.max_steps, self.step, self.algorithm.name.upper(), config.max_grad_norm,
                                  shown=self.progress and self.shards.is_main)
        self._clock = (time.time(), self.tokens_seen)
        self.step_clock.restart()
        self.model.train()
        self.pipeline = start_pipeline(self)  # None unless async_generation
        while self.step < self.max_steps:
            if self.batch is None or self.batch_position >= micro_per_cycle:
                self.batch, self.batch_position = self.algorithm.next_batch(self), 0  # sampled + scored, or read
            index = self.batch_position % config.effective_steps_per_generation
            self._window.append(self._micro_step(self.batch.micro_batch(index, config.per_device_train_batch_size)))
            self.batch_position += 1
            self.micro_step += 1
            if self.micro_step % config.gradient_accumulation_steps:
                continue
            window = self.shards.mean_metrics(_mean_rows(self._window))  # averaged over processes
            row = {"step": self.step + 1, **self._optimizer_step(), **window, **self.batch.metrics}
            self._window = []
            doctor_stop = self._log_step(row)
            # Ctrl-C on any process stops them all, as does an error finding under doctor="stop"
            stop = self.shards.sum(float(interrupt.requested or doctor_stop)) > 0
            if config.save_steps > 0 and (self.step % config.save_steps == 0 or self.step == self.max_steps) or stop:
                self.save_checkpoint()
            if stop:
                self.interrupted, self.stop_signal = True, interrupt.signum
                break
        self._report.close_bar()
        if not self.interrupted and self.shards.is_main:
            self.save_final()
        self.accelerator.wait_for_everyone()
        self.logger.close()
        self._report.closing(self.output_dir, self.step, self.interrupted, config.report_to)
        return self.logger.rows

    def _generate_or_save(self) -> Generated:
        """``_generate()``; when the asynchronous generation worker fails, first save what the trainer
        has (its completed steps, as a stop signal does) and say in the error what is on disk."""
        if self.pipeline is None:
            return self._generate()
        sampler = self.sampler.state()  # before this cycle's prompts are drawn: the checkpoint's position
        try:
            return self._generate()
        except GenerationWorkerError as error:
            self.sampler.epoch, self.sampler.position = sampler["epoch"], sampler["position"]
            raise GenerationWorkerError(f"{error} {save_after_failure(self)}") from None

    def dataset_batch(self, kind: str) -> GenerationBatch:
        """A batch read from the dataset instead of sampled (SFT's rows, DPO's pairs)."""
        return dataset_batches.read(self, kind)

    def _log_step(self, row: dict) -> bool:
        """Step 5: throughput, in-loop evaluation when due, ``history.jsonl``, the run doctor, progress bar,
        sample table. True when the doctor asks the run to stop (``doctor="stop"``)."""
        config, (started, tokens_at_start) = self.config, self._clock
        elapsed = max(time.time() - started, 1e-9)
        episodes = self.cycle * config.effective_generation_batch_size
        row.update({"epoch": self.sampler.epoch + self.sampler.position / len(self.dataset),
                    "num_tokens": self.tokens_seen, "tokens/s": (self.tokens_seen - tokens_at_start) / elapsed,
                    "episode": episodes, "eps": episodes / elapsed, "lr": row["learning_rate"]})
        if self.evaluator is not None and self.evaluator.due(self.step, self.max_steps):
            self._sync_engine()
            row.update(self.evaluator.run(self.engine, self.model, self.step))
        row.update(self.step_clock.lap())
        self.logger.log(row)
        doctor_stop = self.doctor.after_step(self.step, self.logger, self.shards.is_main)
        if self.on_step is not None:
            self.on_step(row)
        self._report.step(self.step, row)
        if config.log_completions and self.step % config.logging_steps == 0 and self.shards.is_main:
            limit = config.num_completions_to_print  # None: every row
            samples = self._last_samples
            if config.log_unique_prompts:
                samples = unique_prompt_samples(*samples)
            tqdm.write(f"step {self.step}\n" + format_samples(*samples, limit=limit))
        return doctor_stop

    def _run_identity(self) -> dict:
        """The rows and rewards a resume must match (``course_lib.run.folder``)."""
        return run_identity(self._columns, [reward_function_name(f) for f in self.reward_funcs])

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
        return save_trainer_checkpoint(self)

    def save_final(self) -> Path:
        """``<output_dir>/final``: the model (merged with its adapters when LoRA) + tokenizer."""
        return save_final_model(self)
