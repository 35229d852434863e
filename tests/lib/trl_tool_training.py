"""Child process of ``test_agents_trl_training.py``: TRL 1.16's ``GRPOTrainer`` trains lesson 12's
environment for two steps on the CPU, with the tokenizer made ready by ``prepare_for_trl``.

Usage: ``python trl_tool_training.py OUTPUT_DIR [WARMUP_STEPS]``: first WARMUP_STEPS steps of this
library's supervised warm-up on scripted traces of the same environment (so TRL's rollouts
call the tool), then TRL; writes ``result.json`` (the logged rows and
what the reward function received) into OUTPUT_DIR.
"""

from __future__ import annotations

import json
import random
import re
import sys

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from course_lib.models import load_policy
from course_lib.rollout.tool_calls import prepare_for_trl
from course_lib.rollout.warmup import scripted_traces, supervised_warmup


class MultiplyDesk:
    """Lesson 12's environment: a calculator desk for one multiplication problem."""

    def reset(self, a, b, **row):
        self.a, self.b, self.calls = int(a), int(b), []
        return None

    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: first factor
            b: second factor
        """
        self.calls.append((a, b))
        return a * b

    def get_reward(self) -> float:
        if {(self.a, self.b), (self.b, self.a)} & set(self.calls):
            return 1.0
        return 0.2 if self.calls else 0.0


SEEN: list = []


def called(prompts, completions, **_):
    """1 for a trajectory with a call; records the messages TRL hands reward functions."""
    SEEN.extend(completions)
    return [float(any(m.get("tool_calls") for m in c)) for c in completions]


def respond(text: str) -> str:
    """The scripted desk clerk: call multiply on the question's numbers, then repeat the result."""
    if "<|im_start|>tool" not in text:
        a, b = re.findall(r"(\d+)\*(\d+)", text)[-1]
        return f'<tool_call>{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
    return text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]


def warm_up(model, tokenizer, steps: int) -> list[float]:
    """This library's warm-up on scripted traces of the same environment, so TRL's rollouts call the tool."""
    rng = random.Random(1)
    batches = []
    for _ in range(steps):
        pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(8)]
        rows = {"prompt": [[{"role": "user", "content": f"{a}*{b}"}] for a, b in pairs],
                "a": [a for a, _ in pairs], "b": [b for _, b in pairs]}
        batches.append(scripted_traces(tokenizer, respond, rows, environment_factory=MultiplyDesk,
                                       max_completion_length=128, context_limit=512))
    return supervised_warmup(model, batches, learning_rate=1e-3)


def main(out: str, warmup_steps: int) -> None:
    torch.manual_seed(0)
    model, tokenizer = load_policy("tiny")
    model.config.max_position_embeddings = 512  # as in lesson 12: the tool list needs more than 128
    prepare_for_trl(tokenizer, context_limit=128)
    losses = warm_up(model, tokenizer, warmup_steps) if warmup_steps else []
    pairs = [(12, 34), (56, 78), (23, 45), (67, 89)]
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"{a}*{b}"}] for a, b in pairs],
                              "a": [a for a, _ in pairs], "b": [b for _, b in pairs]})
    args = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
                      seed=0, max_steps=2, logging_steps=1, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=128, max_tool_calling_iterations=2, learning_rate=1e-5, temperature=1.0)
    trainer = GRPOTrainer(model=model, reward_funcs=[called], args=args, train_dataset=data,
                          processing_class=tokenizer, environment_factory=MultiplyDesk)
    trainer.train()
    rows = [r for r in trainer.state.log_history if "loss" in r]
    with open(f"{out}/result.json", "w") as f:
        json.dump({"rows": rows, "seen": SEEN[:8], "chat_template": tokenizer.chat_template, "warmup": losses}, f,
                  default=str)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
