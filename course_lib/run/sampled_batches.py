"""Where an RL run's batches come from: sample, reward, score (nanochat's ``get_batch``, as an object).

:class:`SampledBatches` owns the trainer's first two steps, each a method the loop calls:

1. :meth:`~SampledBatches.generate`: ``unique prompts x G`` completions of this process's rows,
   prompt-major, and their rewards (here, because dynamic sampling keeps or redraws groups by them;
   :mod:`course_lib.run.dynamic_sampling`);
2. :meth:`~SampledBatches.score`: old / reference log-probs when the schedule or the KL needs
   them, the sampler-mismatch weight when a correction is on, and the algorithm's advantages.

It reads and advances the parts of the loop's state (:class:`~course_lib.run.loop_state.LoopState`)
that generation owns: the prompt sampler, the cycle count, the tokens seen, the samples to print.
Asynchronous generation is the same generator with another sampler of completions
(``course_lib.run.async_rollouts.AsyncSampledBatches``), and SFT / DPO read their batches from the
dataset instead (``course_lib.run.dataset_batches``); the trainer calls all three alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..algos.base import ScoredBatch
from ..models import eval_mode
from ..ops.importance import sampling_correction
from ..ops.stats import nanstd
from ..rewards import completions_like, compute_rewards, no_rewards, reward_function_name
from ..rollout import SamplingConfig
from .batches import DatasetRows, Generated, GenerationBatch, completion_metrics, cycle_seed, repeat_prompts
from .distributed import Shards
from .dynamic_sampling import draw_batch
from .history import prompt_text
from .loop_state import LoopState


@dataclass
class SampledBatches:
    """The RL batch generator: the policy samples the dataset's prompts, the reward functions score them.

    Built by the trainer from its parts; ``forward(model, tensors, with_values)`` is the trainer's
    no-gradient forward in micro-batch chunks (log-probs and values of a batch).
    """

    config: Any
    state: LoopState
    rows: DatasetRows
    tokenizer: Any
    shards: Shards
    device: torch.device
    algorithm: Any
    engine: Any
    model: torch.nn.Module
    tool_run: Any                 # multi-turn rollouts (course_lib.rollout.tool_run), or None
    reward_funcs: list
    reward_weights: Any
    reference: Any                # course_lib.policy.ReferencePolicy, or None (beta == 0)
    with_values: bool             # PPO: the old values come from the same forward as the old log-probs
    clock: Any                    # course_lib.run.history.StepClock: generation seconds
    forward: Callable
    reward_log: Any               # course_lib.run.reward_log.RewardLog: what reward functions log (log_metric)

    #: The clip's old log-probs are the sampler's own (asynchronous generation, ``async_old_logps="sampler"``).
    old_logps_from_sampler = False

    def after_step(self, step: int) -> None:
        """Called after each optimizer step; nothing to do when sampling in the trainer's process."""

    def close(self) -> None:
        """Called when ``train()`` returns or raises; nothing to release here."""

    def sample(self, prompts: list, sampling: SamplingConfig):
        """One completion a prompt from the rollout engine (a ``RolloutBatch``)."""
        return self.engine.generate(prompts, n=1, sampling=sampling)

    # ------------------------------------------------------------------ step 1: generate + reward
    def generate(self) -> Generated:
        """Step 1: ``unique prompts x G`` completions of this process's rows, prompt-major, with their
        rewards; with ``dynamic_sampling``, rounds until the groups' rewards differ (DAPO)."""
        self.state.sync_engine(self.engine, self.model)
        generated, generated.metrics, _ = draw_batch(self.generate_round, self.config, self.tokenizer.pad_token_id)
        generated.metrics.update(self.reward_log.pop_means())  # what reward functions logged (log_metric)
        self.state.cycle += 1
        return generated

    def generate_round(self, round_index: int = 0) -> Generated:
        config, G, state = self.config, self.config.num_generations, self.state
        # Every process draws the same prompts; it owns rows `self.shards.rows` of the U x G
        # completions (prompt-major) and samples them with their global indices as seeds.
        prompt_rows = state.sampler.take(config.unique_prompts_per_generation)
        rows = repeat_prompts(prompt_rows, G)[self.shards.rows]
        prompts, columns = self.rows.prompts_and_columns(rows)
        sampling = SamplingConfig.from_config(config, first_row=self.shards.rows.start,
                                              seed=cycle_seed(config, state.cycle, round_index))
        with eval_mode(self.model), self.clock.generating():
            tools = None if self.tool_run is None else self.tool_run.rollout(  # multi-turn (course_lib.rollout.agents)
                self.engine, self.tokenizer, list(prompts), columns, rows, sampling)
            # Engines tokenize on the CPU: the batch moves to where the model's forward passes run.
            rollout = (self.sample(list(prompts), sampling) if tools is None else tools.agent.batch).to(self.device)
        generated = Generated(rows=rows, prompts=prompts, columns=columns, rollout=rollout, tools=tools)
        state.tokens_seen += int(self.shards.sum(int(generated.loss_mask.sum() + rollout.prompt_mask.sum())))
        generated.per_func, generated.total = self.rewards(generated) if self.reward_funcs else no_rewards(len(rows))
        return generated

    def rewards(self, generated: Generated) -> tuple[torch.Tensor, torch.Tensor]:
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

    # ------------------------------------------------------------------ step 2: score
    def score(self, generated: Generated) -> GenerationBatch:
        """Step 2: log-probs before learning, sampler correction, then the algorithm's advantages (the
        rewards came with step 1)."""
        config, shards, rollout = self.config, self.shards, generated.rollout
        per_func, total = generated.per_func, generated.total
        mask = generated.loss_mask.clone()
        if config.mask_truncated_completions:  # DAPO: truncated answers carry no signal
            mask = mask * rollout.is_eos.unsqueeze(1).to(mask.dtype)
        metrics = {**self.rollout_metrics(rollout, per_func, generated.loss_mask), **generated.metrics}
        if generated.tools is not None:
            metrics.update(self.tool_run.metrics(generated.tools, total,
                                                 lambda t: shards.gather_rows(t.to(self.device)).cpu()))
        old_logps, old_values, ref_logps = self.logps_before_learning(rollout)
        corrected = config.effective_vllm_importance_sampling_correction and rollout.sampling_logps is not None
        sampling_ratio = (self.sampling_correction(old_logps, rollout.sampling_logps.float(), generated.loss_mask,
                                                   metrics) if corrected else None)
        # Advantages see the whole generation batch: gather what they read, keep this process's rows.
        gather = lambda t: shards.gather_rows(None if t is None else t.to(self.device))  # noqa: E731
        scored = ScoredBatch(rewards=gather(total), mask=gather(mask), is_eos=gather(rollout.is_eos),
                             num_generations=config.num_generations, old_logps=gather(old_logps),
                             ref_logps=gather(ref_logps), old_values=gather(old_values), rewards_per_func=gather(per_func))
        result = self.algorithm.advantages(scored, config)
        width = mask.shape[1]
        advantages, returns = shards.local_rows(result.advantages, width), shards.local_rows(result.returns, width)
        metrics.update(shards.mean_metrics({k: v for k, v in metrics.items() if k.startswith("sampling/")}))
        metrics.update(result.metrics)
        self.state.last_samples = ([prompt_text(p) for p in generated.prompts], rollout.texts,
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

    def rollout_metrics(self, rollout, per_func: torch.Tensor, loss_mask: torch.Tensor) -> dict:
        """TRL's completion-length and per-reward-function metrics over the whole generation batch."""
        device, shards = self.device, self.shards
        all_per_func = shards.gather_rows(per_func.to(device)).cpu()
        metrics = completion_metrics(shards.gather_rows(loss_mask.to(device)).cpu(),  # model tokens
                                     shards.gather_rows(rollout.is_eos.to(device)).cpu())
        for f, function in enumerate(self.reward_funcs):
            name = reward_function_name(function)
            metrics[f"rewards/{name}/mean"] = torch.nanmean(all_per_func[:, f]).item()
            metrics[f"rewards/{name}/std"] = nanstd(all_per_func[:, f]).nan_to_num(0.0).item()
        return metrics

    def logps_before_learning(self, rollout):
        """Old log-probs (and values) when the schedule, the correction or the algorithm needs them, or the
        generation worker's (async_old_logps="sampler", no forward); reference log-probs when beta != 0."""
        config, with_values = self.config, self.with_values
        off_policy = config.num_iterations > 1 or config.effective_steps_per_generation > config.gradient_accumulation_steps
        sampler_old = self.old_logps_from_sampler
        needs_old = not sampler_old and (off_policy or bool(config.effective_vllm_importance_sampling_correction)
                                         or self.algorithm.always_needs_old_logps)
        tensors = {"prompt_ids": rollout.prompt_ids, "prompt_mask": rollout.prompt_mask,
                   "completion_ids": rollout.completion_ids, "completion_mask": rollout.completion_mask}
        old_logps = old_values = ref_logps = None
        if needs_old or with_values or self.reference is not None:
            with eval_mode(self.model):  # no dropout in the reference passes
                if needs_old or with_values:
                    old_logps, old_values = self.forward(self.model, tensors, with_values=with_values)
                if self.reference is not None:
                    ref_logps = reference_logps(self.reference, self.forward, tensors)
        if sampler_old:  # the behaviour policy's own log-probs, recorded while sampling; 0 past each completion
            old_logps = rollout.sampling_logps.float().masked_fill(rollout.completion_mask == 0, 0.0)
        return old_logps, old_values, ref_logps

    def sampling_correction(self, old_logps, sampling_logps, completion_mask, metrics: dict) -> torch.Tensor:
        """The configured sampler-mismatch weight (no gradient), at the algorithm's level."""
        config = self.config
        weight, stats = sampling_correction(old_logps, sampling_logps, completion_mask,
                                            mode=config.vllm_importance_sampling_mode,
                                            clip_min=config.vllm_importance_sampling_clip_min,
                                            clip_max=config.vllm_importance_sampling_clip_max,
                                            level=self.algorithm.sampling_correction_level)
        metrics.update(stats)
        return weight


def reference_logps(reference, forward: Callable, tensors: dict) -> torch.Tensor:
    """(B, T) the reference policy's log-probs of a batch's completions (no gradient); the caller puts the
    policy in eval mode first (the reference may share its modules, as LoRA's adapters-off reference does)."""
    with reference.model() as model:
        logps, _ = forward(model, tensors)
    return logps
