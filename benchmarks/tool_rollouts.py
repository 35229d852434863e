"""Time per GRPO optimizer step: a multi-turn run with a tool against a single-turn run.

Both runs train the same warmed-up tiny model on the same multiplication prompts, on CPU in
float32 with one torch thread, and generate the same number of model tokens per completion:

- **multi-turn**: ``Trainer(..., tools=[multiply])``; the model (warmed up on scripted
  traces by ``course_lib.rollout.warmup``, so that it writes calls itself) writes a call,
  the tool's result is appended, the model answers. Tool-result tokens are attended to and
  masked out of the loss.
- **single-turn**: no tools, every completion exactly ``L`` tokens long (``min_new_tokens =
  max_completion_length = L``), ``L`` the mean number of model tokens per completion that the
  multi-turn run generated.

Reported per run: seconds per optimizer step (mean over the timed steps, from one step's end
to the next), model tokens and all completion tokens per completion, and for the multi-turn
run the share of the step spent in tools (running the calls, rendering and tokenizing their
results). The tiny model reads 128 positions; both runs raise ``max_position_embeddings`` to
512 (RoPE; the warm-up trains on those positions) so that the tool list fits in the prompt.

    python benchmarks/tool_rollouts.py [--steps 6] [--warmup-steps 120]
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import statistics
import time

import torch


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def _respond(text: str) -> str:
    if "<|im_start|>tool" not in text:
        a, b = re.findall(r"(\d+)\*(\d+)", text)[-1]
        return f'<tool_call>{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
    return text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]


def _dataset(rows: int, seed: int):
    from datasets import Dataset

    generator = torch.Generator().manual_seed(seed)
    pairs = torch.randint(10, 99, (rows, 2), generator=generator).tolist()
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"{a}*{b}"}] for a, b in pairs],
                              "answer": [str(a * b) for a, b in pairs]})


def _warm_model(warmup_steps: int):
    from course_lib.models import load_policy
    from course_lib.rollout import SamplingConfig, tokenize_prompts
    from course_lib.rollout.agents import run_agent_rollouts
    from course_lib.rollout.tool_calls import TOOL_CHAT_TEMPLATE
    from course_lib.rollout.tools import ToolBox
    from course_lib.rollout.warmup import ScriptedPolicy, supervised_warmup

    model, tokenizer = load_policy("tiny")
    model.config.max_position_embeddings = 512
    traces = []
    for seed in range(8):
        prompts = _dataset(8, 1000 + seed)["prompt"]
        ids = tokenize_prompts(tokenizer, prompts, chat_template_kwargs={"tools": [multiply],
                                                                          "chat_template": TOOL_CHAT_TEMPLATE})
        traces.append(run_agent_rollouts(ScriptedPolicy(tokenizer, _respond, 512), tokenizer, ids,
                                         [ToolBox([multiply])] * 8, SamplingConfig(max_tokens=128),
                                         max_tool_calling_iterations=1, max_completion_length=128,
                                         chat_template=TOOL_CHAT_TEMPLATE))
    supervised_warmup(model, traces, epochs=max(1, warmup_steps // len(traces)), learning_rate=3e-3)
    return model, tokenizer


def _run(model, tokenizer, steps: int, tools: bool, length: int | None, output_dir: str):
    from course_lib.algos import make_config
    from course_lib.rewards import get_reward_functions
    from course_lib.rollout import agents
    from course_lib.rollout import tools as tool_module
    from course_lib.trainer import Trainer

    settings = dict(model_name_or_path="tiny", output_dir=output_dir, max_steps=steps + 1, learning_rate=1e-4,
                    per_device_train_batch_size=8, num_generations=4, temperature=1.0, beta=0.0,
                    save_steps=0, logging_steps=1, seed=0, overwrite_output_dir=True)
    if tools:
        settings.update(max_completion_length=128, max_tool_calling_iterations=1)
    else:
        settings.update(max_completion_length=length, generation_kwargs={"min_new_tokens": length})
    config = make_config("grpo", **settings)
    stamps, tool_seconds = [], [0.0]

    def timed(function):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                tool_seconds[0] += time.perf_counter() - started
        return wrapper

    call, fit = tool_module.ToolBox.call, agents._ResultFitter.fit
    tool_module.ToolBox.call, agents._ResultFitter.fit = timed(call), timed(fit)
    try:
        trainer = Trainer(config, get_reward_functions(["correctness_reward"]), _dataset(64, 0), model, tokenizer,
                          progress=False, tools=[multiply] if tools else None,
                          on_step=lambda row: stamps.append((time.perf_counter(), tool_seconds[0])))
        model_tokens, all_tokens = [], []
        score = trainer._score

        def counting(generated):
            batch = score(generated)
            model_tokens.append(batch.completion_mask.sum(1).float().mean().item())
            attention = batch.attention_mask if batch.attention_mask is not None else batch.completion_mask
            all_tokens.append(attention.sum(1).float().mean().item())
            return batch
        trainer._score = counting
        rows = trainer.train()
    finally:
        tool_module.ToolBox.call, agents._ResultFitter.fit = call, fit
    gaps = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])]
    tool_share = (stamps[-1][1] - stamps[0][1]) / max(stamps[-1][0] - stamps[0][0], 1e-9)
    return {"s/step": statistics.mean(gaps), "model tokens": statistics.mean(model_tokens[1:]),
            "all tokens": statistics.mean(all_tokens[1:]), "tool share": tool_share,
            "calls/completion": statistics.mean(r.get("tools/call_frequency", 0.0) for r in rows[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps per run")
    parser.add_argument("--warmup-steps", type=int, default=120, help="supervised steps on scripted traces")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tokenizer = _warm_model(args.warmup_steps)
    multi = _run(copy.deepcopy(model), tokenizer, args.steps, True, None, "/tmp/bench-tools-multi")
    length = max(1, round(multi["model tokens"]))
    single = _run(copy.deepcopy(model), tokenizer, args.steps, False, length, "/tmp/bench-tools-single")
    print(f"load average: {os.getloadavg()}")
    print("| run | s/step | model tokens / completion | all tokens / completion | calls / completion | tool share |")
    print("|---|---|---|---|---|---|")
    for name, row in (("multi-turn (1 tool round)", multi), ("single-turn, same model tokens", single)):
        print(f"| {name} | {row['s/step']:.3f} | {row['model tokens']:.1f} | {row['all tokens']:.1f} | "
              f"{row['calls/completion']:.2f} | {100 * row['tool share']:.1f}% |")


if __name__ == "__main__":
    main()
