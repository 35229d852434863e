"""One short training run, in one process or under ``accelerate launch``; writes what it did.

Usage: ``python run_training.py OUT.pt ALGO [key=value ...]`` (config overrides). The main
process saves, to OUT.pt: every generation batch's completions in global row order, the
logged rows, and the final trainable parameters.
"""

from __future__ import annotations

import os
import sys

import torch

from course_lib.algos import make_config
from course_lib.config import apply_overrides
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer


def main(out: str, algo: str, *overrides: str) -> None:
    settings = dict(model_name_or_path="tiny", max_steps=3, learning_rate=1e-3, num_generations=4,
                    max_completion_length=6, temperature=1.5, logging_steps=1, save_steps=0, seed=3)
    config = apply_overrides(make_config(algo, **settings), list(overrides))
    if os.environ.get("RANK_DEPENDENT_SEED") and os.environ.get("RANK", "0") != "0":
        config = apply_overrides(config, ["seed=4"])  # a launch that gives the processes different configs
    model, tokenizer = load_policy("tiny")
    rewards = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])
    trainer = Trainer(config, rewards, get_task("arithmetic", n=64, seed=0), model, tokenizer, progress=False)
    rollouts = []
    score = trainer._score

    def recording_score(generated):
        batch = score(generated)
        from accelerate.utils import gather_object

        rollouts.append(gather_object(list(trainer._last_samples[1])))
        return batch

    trainer._score = recording_score
    rows = trainer.train(resume_from=os.environ.get("RESUME_FROM") or None)
    if trainer.accelerator.is_main_process:
        parameters = {name: p.detach().cpu().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
        if trainer.value_head is not None:
            parameters.update({f"value_head.{k}": v.detach().cpu().clone() for k, v in trainer.value_head.state_dict().items()})
        torch.save({"rollouts": rollouts, "rows": rows, "parameters": parameters}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
