"""Short training runs, in one process or under ``accelerate launch``; writes what each did.

Usage: ``python run_training.py OUT.pt ALGO [key=value ...]`` (config overrides), or
``python run_training.py --plan PLAN.json`` for several runs one after the other in the same
processes (a list of ``{"out", "algo", "overrides", "tools"}``): each run builds its own
model, config and trainer, so only the interpreter start and the imports are shared. The
main process saves, to each OUT.pt: every generation batch's completions in global row
order, the logged rows, and the final trainable parameters.
"""

from __future__ import annotations

import json
import os
import sys

import torch

from course_lib.algos import make_config
from course_lib.config import apply_overrides
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer


def main(out: str, algo: str, *overrides: str, tools: bool = False) -> None:
    settings = dict(model_name_or_path="tiny", max_steps=3, learning_rate=1e-3, num_generations=4,
                    max_completion_length=6, temperature=1.5, logging_steps=1, save_steps=0, seed=3)
    config = apply_overrides(make_config(algo, **settings), list(overrides))
    if os.environ.get("RANK_DEPENDENT_SEED") and os.environ.get("RANK", "0") != "0":
        config = apply_overrides(config, ["seed=4"])  # a launch that gives the processes different configs
    model, tokenizer = load_policy("tiny")
    rewards = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])
    if tools or os.environ.get("TOOLS"):  # multi-turn: an environment with one tool and its own reward
        trainer = _tool_trainer(config, model, tokenizer)
    else:
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


class Counter:
    """Count to a target with one tool; rewarded 1 on reaching it."""

    def reset(self, target, **_):
        self.target, self.value = int(target), 0

    def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: how much to add
        """
        self.value += step
        return self.value

    def get_reward(self) -> float:
        return float(self.value == self.target)


class ScriptedFirstTurn:
    """The tiny model writes no tool calls: turn 0 is a call whose step comes from the row's own
    seed (global, so sharding cannot change it); later turns are the model's sampled answer."""

    def __init__(self, engine, tokenizer):
        self.engine, self.tokenizer = engine, tokenizer
        self.record_logps, self.eos_ids, self.context_limit = engine.record_logps, engine.eos_ids, 512

    def sync_weights(self, model):
        self.engine.sync_weights(model)

    def generate_from_ids(self, prompt_ids, sampling, seeds=None):
        import dataclasses

        if "<|im_start|>tool" in self.tokenizer.decode(prompt_ids[0]):
            return self.engine.generate_from_ids(prompt_ids, dataclasses.replace(sampling, max_tokens=6), seeds)
        calls = [f'<tool_call>{{"name": "increment", "arguments": {{"step": {1 + seed % 2}}}}}</tool_call>'
                 for seed in seeds]
        outs = [self.tokenizer(c, add_special_tokens=False)["input_ids"] + self.eos_ids for c in calls]
        return outs, [[-1.0] * len(o) for o in outs]


def _tool_trainer(config, model, tokenizer):
    from datasets import Dataset

    model.config.max_position_embeddings = 512  # RoPE: room for the tool list in the prompt
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Go {i}"}] for i in range(16)],
                              "target": [2] * 16})
    trainer = Trainer(config, None, rows, model, tokenizer, progress=False, environment_factory=Counter)
    trainer.engine = ScriptedFirstTurn(trainer.engine, tokenizer)
    return trainer


def _report_teardown(path: str) -> None:
    """At exit, after the trainer's own handlers (atexit runs last-registered first), write
    whether this process's group is still alive."""
    import atexit

    def report():
        with open(f"{path}.rank{os.environ.get('RANK', '0')}", "w") as file:
            file.write(str(torch.distributed.is_initialized()))

    atexit.register(report)


def run_plan(path: str) -> None:
    for run in json.loads(open(path).read()):
        main(run["out"], run["algo"], *run["overrides"], tools=run.get("tools", False))


if __name__ == "__main__":
    work = (lambda: run_plan(sys.argv[2])) if sys.argv[1] == "--plan" else (lambda: main(*sys.argv[1:]))
    if os.environ.get("TEARDOWN_REPORT"):  # the ordinary exit, to check the trainer's atexit teardown
        _report_teardown(os.environ["TEARDOWN_REPORT"])
        work()
    else:
        from course_lib.run.distributed import exit_worker

        work()
        exit_worker(0)
