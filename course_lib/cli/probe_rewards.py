"""``python -m course_lib probe-rewards``: degenerate completions against a correct one, before training.

Reads a task's first ``--n`` rows (``--split``), builds the reward functions by name (the
task's own rewards when ``--rewards`` is left out, as ``train`` does), and prints
:func:`course_lib.rewards.probe.probe_rewards`'s table. Exits 1 when a case without the right
answer in it ties or beats the reference (a hack a policy can find), 0 otherwise.
"""

from __future__ import annotations

import argparse


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="arithmetic",
                        help="a task name (arithmetic, arithmetic-tagged, gsm8k:<folder>, ...), a .jsonl file or "
                             "module:function, as for train")
    parser.add_argument("--rewards", default=None,
                        help="comma-separated reward functions by name or module:function (default: the task's)")
    parser.add_argument("--weights", default=None, help="comma-separated reward_weights (default: 1 each)")
    parser.add_argument("--n", type=int, default=3, help="prompts probed (default 3)")
    parser.add_argument("--split", default="test", help="the split the prompts come from (default test)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", action="store_true", help="print each flagged completion")


def run_probe(args) -> int:
    from ..data import get_task
    from ..presets import task_settings
    from ..rewards import get_reward_functions
    from ..rewards.probe import probe_rewards

    if args.n < 1:
        raise ValueError(f"--n {args.n}: probe at least one prompt. Fix: --n 3")
    names = [n.strip() for n in args.rewards.split(",")] if args.rewards else task_settings(args.task)["rewards"]
    weights = None
    if args.weights:
        try:
            weights = [float(w) for w in args.weights.split(",")]
        except ValueError:
            raise ValueError(f"--weights {args.weights!r} is not a list of numbers. Fix: --weights 1.0,0.5") from None
        if len(weights) != len(names):
            raise ValueError(f"--weights has {len(weights)} values for {len(names)} reward functions ({names}). "
                             "Fix: give one weight per reward.")
    funcs = get_reward_functions(names)
    rows = get_task(args.task, split=args.split, n=args.n, seed=args.seed)
    report = probe_rewards(funcs, rows, n_prompts=args.n, weights=weights)
    print(f"task {args.task}, {args.n} prompts, rewards {', '.join(names)}")
    print(report.table())
    if args.show:
        for case in report.flagged:
            print(f"\n{case}: {report.completions[case][0]!r:.300}")
    if report.hacks:
        print(f"\nflagged without the right answer: {', '.join(report.hacks)}: a policy can be paid for these "
              "without solving the task. Fix the reward before training (lesson 09).")
        return 1
    flagged = report.flagged
    print("\nno answer-free case ties or beats the reference"
          + (f"; flagged cases that hold the right answer: {', '.join(flagged)} (what the reward does not ask for)"
             if flagged else "."))
    return 0
