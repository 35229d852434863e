"""The smollm2-135m demo's pace on each path: start-up, seconds per held-out problem, seconds per step.

``make demo`` takes one of two paths (``course_lib.demo.path_and_estimate``): the vLLM CPU
engine with a bfloat16 sampler and bfloat16 training where the CPU has native bfloat16, or
Hugging Face ``generate`` and float32 training elsewhere (``--engine hf`` forces it here).
This script runs the demo's real settings (the measured preset, LoRA, 2 prompts x 8
completions) for a few steps and a few held-out problems, times each phase, and prints one
JSON line with the rates and the load average, so the README's times and the demo's
estimate come from a measurement. Shortened on purpose: the full demo is 30 steps and
2 x 200 problems; the rates multiply out to it.

    python benchmarks/demo_paths.py --engine hf --steps 3 --eval-n 25
    python benchmarks/demo_paths.py --float32 --steps 3 --eval-n 25   # vLLM in float32
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["hf", "vllm"], default=None, help="default: the demo's choice here")
    parser.add_argument("--float32", action="store_true",
                        help="vLLM with a float32 sampler and float32 training: what a CPU without bfloat16 "
                             "would get from vLLM")
    parser.add_argument("--sync", action="store_true", help="no generation worker (the demo's default on the "
                        "Hugging Face path samples in a second process)")
    parser.add_argument("--steps", type=int, default=3, help="training steps (the first is timed as start-up)")
    parser.add_argument("--eval-n", type=int, default=25)
    args = parser.parse_args()

    from course_lib.algos import GRPOConfig
    from course_lib.data import get_task
    from course_lib.demo import DEMOS, _quiet_vllm, demo_settings, greedy_correct, path_and_estimate
    from course_lib.models import load_policy
    from course_lib.presets import task_settings
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    model = "smollm2-135m"
    task = DEMOS[model]["task"]
    with tempfile.TemporaryDirectory() as folder:
        settings = demo_settings(model, folder, max_steps=args.steps, engine=args.engine,
                                 asynchronous=False if args.sync else None)
        if args.float32:
            settings.update(engine="vllm", vllm_dtype="float32", dtype="float32")
        path, why, _ = path_and_estimate(model, settings, args.eval_n)
        if settings.get("engine") == "vllm":
            _quiet_vllm()
        began = time.monotonic()
        policy, tokenizer = load_policy(model)
        test = get_task(task, split="test", n=args.eval_n, seed=0)
        train = get_task(task, split="train", n=2000, seed=0)
        trainer = Trainer(GRPOConfig(**settings), get_reward_functions(task_settings(task)["rewards"]), train,
                          policy, tokenizer)
        trainer.generate(test["prompt"][:1])  # the engine's first call (vLLM compiles and warms up here)
        start_s = time.monotonic() - began
        began = time.monotonic()
        greedy_correct(trainer, test)
        eval_s = (time.monotonic() - began) / args.eval_n
        began, ends = time.monotonic(), []
        trainer.on_step = lambda row: ends.append(time.monotonic())
        trainer.train()
        # steps after the first: the first also pays for starting a generation worker, which counts as start-up
        step_s = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else ends[0] - began
        start_s += ends[0] - began - step_s
    print(json.dumps({"path": path, "why": why, "start_s": round(start_s, 1), "eval_s_per_problem": round(eval_s, 3),
                      "step_s": round(step_s, 2), "steps": args.steps, "eval_n": args.eval_n,
                      "full_demo_s": round(start_s + 2 * 200 * eval_s + 30 * step_s),
                      "load_average": os.getloadavg(), "cpus": os.cpu_count(), "processor": platform.processor(),
                      "threads": os.environ.get("OMP_NUM_THREADS")}))


if __name__ == "__main__":
    main()
