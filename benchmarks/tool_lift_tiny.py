"""The tiny model with a calculator tool: held-out accuracy before and after the supervised warm-up.

The companion of ``tool_lift.py`` (SmolLM2) for the project's ~1M-parameter tiny model, which
reads 128 positions. Task: ``a*b`` with ``a`` and ``b`` in 10-98, a ``mul`` tool, and a
*compact* tool template (the system turn lists only the tool's name; calls are written
without spaces), so that the question and the call sit inside the trained positions
(``max_position_embeddings`` is raised to 512 only for the tool result and the answer).
The warm-up traces (``course_lib.rollout.warmup``) call ``mul`` on the question's numbers
and then repeat its result. Reported for each stage: the greedy held-out accuracy
(``evaluate_tool_accuracy``), the share of problems whose call carries both of the
question's numbers, and the paired lift. ``--steps`` adds GRPO steps on a correctness reward.

    OMP_NUM_THREADS=1 python benchmarks/tool_lift_tiny.py          # the measured run (README)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time

import torch

import tool_lift  # this folder is on sys.path when a benchmark runs as a script

COMPACT_TOOL_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- for tool in tools %}"
    "{%- set f = tool['function'] if 'function' in tool else tool %}{{- f['name'] + ' ' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] %}{%- set c = call['function'] if 'function' in call else call %}"
    "{{- '<tool_call>{\"name\":\"' + c['name'] + '\",\"arguments\":' + (c['arguments'] | tojson) + '}</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def mul(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def problems(rows: int, seed: int, exclude=frozenset()):
    """Two-digit products in the compact prompt ``a*b`` (tool_lift.py's problems, smaller)."""
    return tool_lift.problems(rows, seed, exclude, a_range=(10, 98), b_range=(10, 98), question="{a}*{b}")


def scripted_turn(text: str) -> str:
    if "<|im_start|>tool" not in text:
        a, b = re.findall(r"(\d+)\*(\d+)", text)[-1]
        return f'<tool_call>{{"name":"mul","arguments":{{"a":{a},"b":{b}}}}}</tool_call>'
    return text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]


correct_answer = tool_lift.correct_answer  # 1.0 when the last model turn (not a call) holds the product


def copied_share(result, dataset) -> float:
    """Share of problems whose first call is ``mul`` on the question's two numbers (either order)."""
    hits = 0
    for text, a, b in zip(result.texts, dataset["a"], dataset["b"]):
        found = re.search(r"<tool_call>(.*?)</tool_call>", text)
        try:
            arguments = json.loads(found.group(1))["arguments"] if found else {}
        except (ValueError, KeyError, TypeError):
            arguments = {}
        hits += isinstance(arguments, dict) and sorted(map(str, arguments.values())) == sorted([str(a), str(b)])
    return hits / len(dataset)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-n", type=int, default=100)
    parser.add_argument("--warmup-batches", type=int, default=120)
    parser.add_argument("--warmup-batch-size", type=int, default=8)
    parser.add_argument("--warmup-epochs", type=int, default=4)
    parser.add_argument("--warmup-lr", type=float, default=2e-3)
    parser.add_argument("--steps", type=int, default=0, help="GRPO steps after the warm-up")
    parser.add_argument("--lr", type=float, default=1e-4, help="GRPO learning rate")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    from course_lib.algos import make_config
    from course_lib.evaluation import lift_interval
    from course_lib.models import load_policy
    from course_lib.rollout import SamplingConfig, tokenize_prompts
    from course_lib.rollout.agents import run_agent_rollouts
    from course_lib.rollout.tools import ToolBox
    from course_lib.rollout.warmup import ScriptedPolicy, supervised_warmup
    from course_lib.tool_evaluation import evaluate_tool_accuracy
    from course_lib.trainer import Trainer

    start = time.time()
    torch.manual_seed(0)
    model, tokenizer = load_policy("tiny")
    model.config.max_position_embeddings = 512
    tokenizer.chat_template = COMPACT_TOOL_TEMPLATE  # renders tools, so the tool runs use it as the model's own
    kwargs = {"tools": [mul], "chat_template": COMPACT_TOOL_TEMPLATE}
    held_out = problems(args.eval_n, seed=777)
    seen = set(zip(held_out["a"], held_out["b"]))
    prompt = tokenize_prompts(tokenizer, held_out["prompt"][:1], chat_template_kwargs=kwargs)[0]
    print(f"prompt ({len(prompt)} tokens): {tokenizer.decode(prompt)!r}")

    def evaluate(name):
        result = evaluate_tool_accuracy(model, tokenizer, held_out, tools=[mul], max_completion_length=128,
                                        batch_size=50)
        print(f"[{time.time() - start:6.0f} s] {name:5s} {result.summary()}, "
              f"{100 * copied_share(result, held_out):.0f}% call on the question's numbers", flush=True)
        for text in result.texts[:3]:
            print(f"         e.g. {text[:150]!r}")
        return result

    results = {"base": evaluate("base")}
    traces = []
    for s in range(args.warmup_batches):
        rows = problems(args.warmup_batch_size, seed=1000 + s, exclude=seen)
        ids = tokenize_prompts(tokenizer, rows["prompt"], chat_template_kwargs=kwargs)
        traces.append(run_agent_rollouts(ScriptedPolicy(tokenizer, scripted_turn, context_limit=512), tokenizer, ids,
                                         [ToolBox([mul]) for _ in ids], SamplingConfig(max_tokens=128),
                                         max_tool_calling_iterations=1, max_completion_length=128,
                                         chat_template=COMPACT_TOOL_TEMPLATE))
    losses = supervised_warmup(model, traces, epochs=args.warmup_epochs, learning_rate=args.warmup_lr)
    print(f"[{time.time() - start:6.0f} s] warm-up: {len(losses)} steps on {len(traces) * args.warmup_batch_size} "
          f"traces, loss {losses[0]:.2f} -> {losses[-1]:.2f}", flush=True)
    results["warm"] = evaluate("warm")
    if args.steps:
        # the run's folder (history, the trained model) goes when the script ends
        run_folder = tempfile.TemporaryDirectory(prefix="tool-lift-")
        config = make_config("grpo", model_name_or_path="tiny", output_dir=run_folder.name,
                             max_steps=args.steps, learning_rate=args.lr, per_device_train_batch_size=16,
                             num_generations=8, temperature=1.0, beta=0.0, max_completion_length=128,
                             max_tool_calling_iterations=1, save_steps=0, logging_steps=1, seed=0)
        trainer = Trainer(config, [correct_answer], problems(args.steps * 2, seed=0, exclude=seen), model, tokenizer,
                          progress=False, tools=[mul])
        for row in trainer.train():
            print(f"step {row['step']:3d}  tools/call_frequency {row['tools/call_frequency']:.2f}  "
                  f"reward {row['rewards/correct_answer/mean']:.3f}")
        model = trainer.model
        results["grpo"] = evaluate("grpo")
    names = list(results)
    for first, second in zip(names, names[1:]):
        lift, low, high = lift_interval(results[first].correct, results[second].correct)
        print(f"  {second} - {first}: {100 * lift:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] points")
    print(f"total {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
