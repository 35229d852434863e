"""Evaluation during training: held-out reward and greedy accuracy, every `eval_steps` steps.

Training reward alone cannot tell learning from memorising the training prompts. With
`eval_strategy="steps"` the trainer calls :meth:`InLoopEvaluator.run` every `eval_steps`
optimizer steps (and after the last one) and logs, under `eval/` in `history.jsonl`:

- `eval/reward`, `eval/reward_std`, `eval/rewards/<name>/mean`: `num_generations_eval`
  completions per held-out prompt, sampled as in training (same engine, temperature and
  reward functions), so train and eval reward compare directly;
- `eval/greedy_reward`: the reward of one greedy completion per prompt;
- `eval/greedy_accuracy`: the fraction of greedy completions that are correct by the rule
  of :func:`course_lib.evaluation.is_correct`, when the dataset has an `answer` column.

The sampled completions use a fixed seed per evaluation, so two evaluations of the same
weights give the same numbers.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ..algos.base import reward_metrics
from ..models import eval_mode
from ..rewards import completions_like, compute_rewards, reward_function_name
from ..rewards.answers import is_correct
from ..rollout import SamplingConfig


class InLoopEvaluator:
    """Held-out metrics for a trainer's current policy.

    Args:
        config: the run's config (`eval_strategy`, `eval_steps`, `num_generations_eval`,
            sampling fields).
        eval_dataset: rows with a `prompt` and the columns the reward functions read.
        reward_funcs, reward_weights: as in training.
    """

    def __init__(self, config, eval_dataset, reward_funcs: Sequence[Callable], reward_weights: Sequence[float],
                 correct_fn: Callable | None = None):
        if eval_dataset is None:
            raise ValueError(f"eval_strategy={config.eval_strategy!r} needs held-out prompts. Fix: pass "
                             "Trainer(..., eval_dataset=...) or set eval_strategy='no'.")
        if "prompt" not in eval_dataset.column_names:
            raise ValueError(f"eval_dataset has no 'prompt' column (columns: {eval_dataset.column_names}).")
        self.config, self.reward_funcs, self.reward_weights = config, list(reward_funcs), list(reward_weights)
        self.correct_fn = correct_fn or is_correct  # correct_fn(completion, answer) -> bool
        self.columns = {name: list(eval_dataset[name]) for name in eval_dataset.column_names}

    def due(self, step: int, max_steps: int) -> bool:
        """Whether to evaluate after optimizer step `step` (1-based)."""
        return self.config.eval_strategy == "steps" and (step % self.config.effective_eval_steps == 0
                                                          or step == max_steps)

    def _score(self, engine, n: int, sampling: SamplingConfig) -> tuple[list[str], torch.Tensor, torch.Tensor]:
        prompts = self.columns["prompt"]
        rollout = engine.generate(list(prompts), n=n, sampling=sampling)
        repeated = [p for p in prompts for _ in range(n)]
        completions = completions_like(repeated, rollout.texts)
        columns = {k: [v for v in values for _ in range(n)] for k, values in self.columns.items() if k != "prompt"}
        per_func, total = compute_rewards(self.reward_funcs, repeated, completions, columns, self.reward_weights,
                                          timeout_s=self.config.reward_timeout_s)
        return rollout.texts, per_func, total

    @torch.no_grad()
    def run(self, engine, model, step: int) -> dict[str, Any]:
        """Evaluate `model` (already synced into `engine`); return the `eval/...` metrics."""
        config = self.config
        with eval_mode(model):
            sampled = SamplingConfig.from_config(config, seed=config.seed * 7_919 + 17)
            _, per_func, total = self._score(engine, config.effective_num_generations_eval, sampled)
            greedy = SamplingConfig.from_config(config, seed=0, greedy=True)
            texts, _, greedy_total = self._score(engine, 1, greedy)
        G = config.effective_num_generations_eval
        metrics = {f"eval/{name}": value for name, value in reward_metrics(total, G, zero_std=False).items()}
        metrics["eval/greedy_reward"] = torch.nanmean(greedy_total).item()
        for f, function in enumerate(self.reward_funcs):
            metrics[f"eval/rewards/{reward_function_name(function)}/mean"] = torch.nanmean(per_func[:, f]).item()
        if "answer" in self.columns:
            correct = [bool(self.correct_fn(text, answer)) for text, answer in zip(texts, self.columns["answer"])]
            metrics["eval/greedy_accuracy"] = sum(correct) / len(correct)
        return metrics
