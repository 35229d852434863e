"""Held-out accuracy with a calculator tool before and after training, with paired intervals.

Task: ``What is a * b?`` with ``a`` of 3 digits and ``b`` of 2 or 3 digits; SmolLM2-135M-
Instruct cannot compute these products by itself. A ``multiply`` tool is offered (the
course's ChatML tool template writes it into the prompt). Three greedy evaluations of the
same held-out problems (:func:`course_lib.tool_evaluation.evaluate_tool_accuracy`):

1. **base**: the model as shipped, with the tool available;
2. **warm**: after a short supervised warm-up on traces of a scripted policy
   (:mod:`course_lib.rollout.warmup`: call the tool on the question's numbers, then write
   ``The answer is <result>.``), the loss on the model's tokens only;
3. **grpo**: after GRPO with ``tools=[multiply]`` and one reward, the correctness of the final
   answer (the last model turn, read with the course's ``is_correct`` rule).

Each lift (warm - base, grpo - warm, grpo - base) comes with its paired 95% interval
(:func:`course_lib.evaluation.lift_interval`); the GRPO run logs ``tools/call_frequency``
per step. Training and warm-up problems never include a held-out pair.

    OMP_NUM_THREADS=1 python benchmarks/tool_lift.py                   # the measured run (README)
    OMP_NUM_THREADS=1 python benchmarks/tool_lift.py --eval-n 20 --steps 2   # a quick look
"""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
import time

import torch

QUESTION = "What is {a} * {b}?"


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def problems(rows: int, seed: int, exclude=frozenset(), a_range=(100, 999), b_range=(10, 999), question=QUESTION):
    """``rows`` problems (prompt, answer, a, b) drawn with ``seed``, none of them a pair in ``exclude``;
    ``a`` and ``b`` uniform in their inclusive ranges, the prompt ``question`` with them filled in."""
    from datasets import Dataset

    rng = random.Random(seed)
    pairs = []
    while len(pairs) < rows:
        pair = (rng.randint(*a_range), rng.randint(*b_range))
        if pair not in exclude:
            pairs.append(pair)
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": question.format(a=a, b=b)}] for a, b in pairs],
                              "answer": [str(a * b) for a, b in pairs],
                              "a": [a for a, _ in pairs], "b": [b for _, b in pairs]})


def scripted_turn(text: str) -> str:
    """The scripted policy: call the tool on the question's numbers, then state its result."""
    if "<|im_start|>tool" not in text:
        a, b = re.findall(r"What is (\d+) \* (\d+)\?", text)[-1]
        return f'<tool_call>{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
    return "The answer is " + text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0] + "."


def correct_answer(prompts, completions, answer, **_):
    """1.0 when the trajectory's final model turn (not a tool call) holds the right product."""
    from course_lib.rewards.answers import is_correct
    from course_lib.tool_evaluation import final_turn

    return [float(is_correct(final_turn(messages), reference)) for messages, reference in zip(completions, answer)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--eval-n", type=int, default=100, help="held-out problems")
    parser.add_argument("--warmup-batches", type=int, default=4, help="warm-up steps (one batch each)")
    parser.add_argument("--warmup-batch-size", type=int, default=4)
    parser.add_argument("--warmup-lr", type=float, default=3e-5)
    parser.add_argument("--steps", type=int, default=8, help="GRPO optimizer steps")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch", type=int, default=8, help="completions per step")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--skip-base", action="store_true", help="skip the base evaluation (slow: long answers)")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    from course_lib.algos import make_config
    from course_lib.evaluation import lift_interval
    from course_lib.models import load_policy
    from course_lib.rollout import SamplingConfig, tokenize_prompts
    from course_lib.rollout.agents import run_agent_rollouts
    from course_lib.rollout.tool_calls import tool_chat_template
    from course_lib.rollout.tools import ToolBox
    from course_lib.rollout.warmup import ScriptedPolicy, supervised_warmup
    from course_lib.tool_evaluation import evaluate_tool_accuracy
    from course_lib.trainer import Trainer

    start = time.time()
    torch.manual_seed(0)
    model, tokenizer = load_policy(args.model)
    template = tool_chat_template(tokenizer)
    held_out = problems(args.eval_n, seed=777)
    seen = set(zip(held_out["a"], held_out["b"]))
    length = args.max_completion_length

    def evaluate(name):
        t = time.time()
        result = evaluate_tool_accuracy(model, tokenizer, held_out, tools=[multiply], max_completion_length=length,
                                        batch_size=50)
        print(f"[{time.time() - start:6.0f} s] {name:5s} {result.summary()}  ({time.time() - t:.0f} s)", flush=True)
        print(f"         e.g. {result.texts[0][:160]!r}", flush=True)
        return result

    results = {}
    if not args.skip_base:
        results["base"] = evaluate("base")
    traces = []
    for s in range(args.warmup_batches):
        rows = problems(args.warmup_batch_size, seed=1000 + s, exclude=seen)
        prompt_ids = tokenize_prompts(tokenizer, rows["prompt"],
                                      chat_template_kwargs={"tools": [multiply], "chat_template": template})
        traces.append(run_agent_rollouts(ScriptedPolicy(tokenizer, scripted_turn, context_limit=2048), tokenizer,
                                         prompt_ids, [ToolBox([multiply]) for _ in prompt_ids],
                                         SamplingConfig(max_tokens=length), max_tool_calling_iterations=1,
                                         max_completion_length=length, chat_template=template))
    losses = supervised_warmup(model, traces, epochs=1, learning_rate=args.warmup_lr)
    print(f"[{time.time() - start:6.0f} s] warm-up: {len(losses)} steps on {args.warmup_batches * args.warmup_batch_size} "
          f"traces, loss {' '.join(f'{x:.2f}' for x in losses)}", flush=True)
    results["warm"] = evaluate("warm")

    # the run's folder (history, the trained model) goes when the script ends
    run_folder = tempfile.TemporaryDirectory(prefix="tool-lift-")
    config = make_config("grpo", model_name_or_path=args.model, output_dir=run_folder.name,
                         max_steps=args.steps, learning_rate=args.lr, per_device_train_batch_size=args.batch,
                         num_generations=args.generations, temperature=1.0, beta=0.0, max_completion_length=length,
                         max_tool_calling_iterations=1, save_steps=0, logging_steps=1, seed=0)
    trainer = Trainer(config, [correct_answer], problems(args.steps * args.batch, seed=0, exclude=seen), model,
                      tokenizer, progress=False, tools=[multiply])
    history = trainer.train()
    print("step  tools/call_frequency  reward (correct answer)  frac_reward_zero_std")
    for row in history:
        print(f"{row['step']:4d}  {row['tools/call_frequency']:20.2f}  {row['rewards/correct_answer/mean']:23.3f}  "
              f"{row.get('frac_reward_zero_std', float('nan')):20.2f}")
    model = trainer.model
    results["grpo"] = evaluate("grpo")

    print(f"\nheld-out problems: {args.eval_n}; lifts with paired 95% intervals (percentage points):")
    for first, second in (("base", "warm"), ("warm", "grpo"), ("base", "grpo")):
        if first in results:
            lift, low, high = lift_interval(results[first].correct, results[second].correct)
            print(f"  {second} - {first}: {100 * lift:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
                  f"{'  (excludes 0)' if low > 0 or high < 0 else ''}")
    print(f"total {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
