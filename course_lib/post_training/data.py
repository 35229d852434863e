"""The data SFT and DPO need, made from a task with a verifier.

- :func:`demonstrations`: SFT rows from a task's reference answers (``completion`` = the
  answer, the format the embedded model writes), when the dataset has no ``completion``.
- :func:`preference_pairs`: DPO pairs built on-line from a policy's own samples: ``k``
  completions per prompt, scored by the task's reward functions; a prompt gives a pair when
  its best and worst samples differ in reward (chosen = a best one, rejected = a worst one),
  the usual recipe of on-policy / self-play preference data (e.g. Xu et al. 2024, "Is DPO
  superior to PPO"; TRL's online DPO). Prompts whose samples all tie give no pair.
"""

from __future__ import annotations

import torch

from course_lib.rewards import compute_rewards
from course_lib.common.wording import fix


def demonstrations(dataset, column: str = "answer"):
    """The dataset with ``completion`` = its ``column`` (the reference answers), unless it has one."""
    if "completion" in dataset.column_names:
        return dataset
    if column not in dataset.column_names:
        raise ValueError(f"the dataset has neither 'completion' nor {column!r} (columns: {dataset.column_names}); "
                         "SFT needs a demonstration per prompt.")
    return dataset.add_column("completion", [str(value) for value in dataset[column]])


def preference_pairs(model, tokenizer, dataset, reward_funcs, k: int = 4, max_tokens: int = 16,
                     temperature: float = 1.0, seed: int = 0, batch_prompts: int = 32) -> tuple[list[dict], dict]:
    """``(rows, stats)``: DPO rows ``{prompt, chosen, rejected, **columns}`` from ``model``'s own samples.

    Args:
        model, tokenizer: the policy that samples (left unchanged).
        dataset: rows with ``prompt`` and the columns the reward functions read.
        reward_funcs: the task's reward functions (their weighted sum with weight 1 decides).
        k: samples per prompt (>= 2).
    Returns:
        the pairs, and ``{"prompts", "pairs", "tokens_sampled"}``: the sampling cost, prompt + completion
        tokens of every sample.
    """
    from course_lib.rollout import HFEngine, SamplingConfig

    if k < 2:
        raise ValueError(f"k={k}: a pair needs at least two samples of a prompt. Fix: k >= 2.")
    engine = HFEngine(model, tokenizer)
    columns = {name: list(dataset[name]) for name in dataset.column_names if name != "prompt"}
    rows, generated = [], 0
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(dataset), batch_prompts):
            prompts = list(dataset["prompt"][start:start + batch_prompts])
            sampling = SamplingConfig(temperature=temperature, max_tokens=max_tokens, seed=seed + start)
            batch = engine.generate(prompts, n=k, sampling=sampling)
            generated += int(batch.completion_mask.sum() + batch.prompt_mask.sum())
            repeated = [p for p in prompts for _ in range(k)]
            cols = {name: [values[start + i // k] for i in range(len(repeated))] for name, values in columns.items()}
            _, total = compute_rewards(reward_funcs, repeated, batch.texts, cols)
            scores = torch.nan_to_num(total, nan=float("-inf")).view(len(prompts), k)
            for p, prompt in enumerate(prompts):
                best, worst = int(scores[p].argmax()), int(scores[p].argmin())
                chosen, rejected = batch.texts[p * k + best], batch.texts[p * k + worst]
                if scores[p, best] > scores[p, worst] and chosen.strip() and rejected.strip() and chosen != rejected:
                    rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected,
                                 **{name: values[start + p] for name, values in columns.items()}})
    finally:
        model.train(was_training)
    return rows, {"prompts": len(dataset), "pairs": len(rows), "tokens_sampled": generated}


def prepared_dataset(config, dataset, reward_funcs):
    """The dataset an SFT or DPO run of the command line reads: demonstrations from the answers, or pairs
    sampled from the start model (``config.model_name_or_path``) and scored by ``reward_funcs``."""
    if config.algo == "sft":
        return demonstrations(dataset)
    if config.algo == "dpo" and not {"chosen", "rejected"} <= set(dataset.column_names):
        from datasets import Dataset

        from course_lib.models import load_policy

        model, tokenizer = load_policy(config.model_name_or_path)
        rows, stats = preference_pairs(model, tokenizer, dataset, reward_funcs, k=4,
                                       max_tokens=config.max_completion_length, seed=config.seed)
        if len(rows) < config.unique_prompts_per_generation:
            raise ValueError(f"the start model's samples gave {len(rows)} pairs from {stats['prompts']} prompts (a "
                             "pair needs a prompt whose samples differ in reward), fewer than one batch needs. Fix: "
                             f"more {fix('--train-rows', 'rows in the dataset')}, or pass a dataset with chosen/rejected columns.")
        return Dataset.from_list(rows)
    return dataset
