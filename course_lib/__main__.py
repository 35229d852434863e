"""Command line: ``python -m course_lib <command>`` (run with ``--help`` for the list)."""

from __future__ import annotations

import argparse
import json
import os
import sys


def _cmd_env(args) -> int:
    from .machine import format_report

    print(format_report())
    return 0


def _cmd_build_tiny(args) -> int:
    from dataclasses import replace

    from .tiny import TINY_DIR, TinyRecipe, train_tiny

    from pathlib import Path

    if args.output_dir is not None and Path(args.output_dir).exists() and not Path(args.output_dir).is_dir():
        raise ValueError(f"--output-dir {args.output_dir} is a file, not a folder. Fix: pass a folder path (it is "
                         "created when missing).")
    recipe = TinyRecipe() if args.steps is None else replace(TinyRecipe(), steps=args.steps)
    report = train_tiny(args.output_dir or TINY_DIR, recipe)
    print(json.dumps(report, indent=2))
    return 0


def _cmd_eval(args) -> int:
    from .data import get_task
    from .evaluation import evaluate_accuracy
    from .models import load_policy

    model, tokenizer = load_policy(args.model)
    dataset = get_task(args.task, split=args.split, n=args.n, seed=args.seed)
    from .cli.train import correct_function

    accuracy, completions = evaluate_accuracy(model, tokenizer, dataset, max_new_tokens=args.max_new_tokens,
                                              return_completions=True, progress=True,
                                              correct_fn=correct_function(args))
    for question, completion, answer in list(zip(dataset["prompt"], completions, dataset["answer"]))[:args.show]:
        shown = question if isinstance(question, str) else question[-1]["content"]
        print(f"Q: {shown}\nA: {completion.strip()!r}  (reference {answer})")
    print(json.dumps({"model": str(args.model), "task": args.task, "split": args.split, "n": len(dataset),
                      "seed": args.seed, "accuracy": accuracy}))
    return 0


def _cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(model=args.model, output_dir=args.output_dir, max_steps=args.max_steps, engine=args.engine,
             eval_n=args.eval_n, asynchronous=False if args.sync else None)
    return 0


def _cmd_make_stubs(args) -> int:
    from .grading import write_stubs

    for path in write_stubs():
        print(f"wrote {path}")
    return 0


def _cmd_check_stubs(args) -> int:
    from .grading import check_stubs

    problems = check_stubs()
    for problem in problems:
        print(f"stub check: {problem}", file=sys.stderr)
    if problems:
        print("Regenerate the stubs with `python -m course_lib make-stubs`.", file=sys.stderr)
        return 1
    print("exercises/ matches the stubs generated from solutions/")
    return 0


def _cmd_grade(args) -> int:
    from .grading import format_grades, grade_functions

    extra = ["-k", f"test_ex{int(args.lesson):02d}_"] if args.lesson is not None else None
    grades = grade_functions(args.impl, extra_args=extra)
    if not grades and args.lesson is not None:
        raise ValueError(f"--lesson {args.lesson}: no exercise tests for that lesson (lessons are 0 to 11).")
    print(format_grades(grades, args.impl))
    return 0


def _cmd_check_fail_on_stubs(args) -> int:
    """Every exercise test must fail on the untouched stubs (or the test cannot tell)."""
    from .grading import check_stubs, run_exercise_tests

    if check_stubs():
        print("exercises/ is not the generated stubs; run `python -m course_lib make-stubs` first.", file=sys.stderr)
        return 1
    counts = run_exercise_tests("exercises")
    passing = {lesson: c["passed"] for lesson, c in counts.items() if c["passed"] or c["skipped"]}
    failed = sum(c["failed"] for c in counts.values())
    if not counts or failed == 0:
        print("no exercise tests ran", file=sys.stderr)
        return 1
    if passing:
        print(f"exercise tests that do not fail on the stubs: {passing}", file=sys.stderr)
        return 1
    print(f"stub check: all {failed} exercise tests fail on the untouched stubs, as they must")
    return 0


def _cmd_doctor(args) -> int:
    from .doctor.report import doctor_run

    try:
        findings, text, _ = doctor_run(args.run_dir, figure=args.figure)
    except (FileNotFoundError, ValueError) as error:  # unreadable or empty: never a clean report
        print(f"doctor: {error}", file=sys.stderr)
        return 2
    print(text)
    return 1 if any(f.severity == "error" for f in findings) else 0


def _cmd_train(args) -> int:
    from .cli.train import run_train

    return run_train(args)


def _cmd_export_trl(args) -> int:
    from .cli.train import build_run
    from .cli.export_trl import export_run, launch_command
    from .presets import task_settings

    if args.correct:
        print(f"note: --correct {args.correct} is not exported: TRL has no greedy before/after accuracy. Evaluate "
              "the TRL run's checkpoint with python -m course_lib eval --model <folder>/trl-output/checkpoint-N "
              f"--correct {args.correct}.", file=sys.stderr)
    config, _, dataset = build_run(args)
    reward_names = args.rewards.split(",") if args.rewards else task_settings(args.task)["rewards"]
    folder = export_run(config, reward_names, dataset, args.output, num_processes=args.num_processes)
    print((folder / "README.txt").read_text())
    print(f"now: {launch_command(folder, config.algo)}")
    return 0


def _cmd_probe_rewards(args) -> int:
    from .cli.probe_rewards import run_probe

    return run_probe(args)


def build_parser() -> argparse.ArgumentParser:
    from .cli.train import CORRECT_HELP, TASK_HELP, add_train_arguments, count_argument

    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error (any position)")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("env", help="report device, versions and available engines").set_defaults(func=_cmd_env)

    p = sub.add_parser("build-tiny", help="rebuild the embedded tiny model (reproducible, ~3 min on CPU)")
    p.add_argument("--output-dir", default=None, help="default: course_lib/assets/tiny")
    p.add_argument("--steps", type=count_argument(1), default=None, help="SFT steps (default: the recipe's)")
    p.set_defaults(func=_cmd_build_tiny)

    p = sub.add_parser("eval", help="greedy accuracy of a model on a task; last line is JSON")
    p.add_argument("--model", default="tiny", help="tiny, smollm2-135m, a folder (a run's checkpoint-<step> or "
                   "final/ too), or a hub id")
    p.add_argument("--task", default="arithmetic", help=TASK_HELP)
    p.add_argument("--correct", default=None, metavar="MODULE:FUNCTION", help=CORRECT_HELP)
    p.add_argument("--split", default="test")
    p.add_argument("--n", type=count_argument(1), default=200, help="held-out problems to evaluate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--show", type=int, default=3, help="print this many samples")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("demo", help="the main job (see README)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--output-dir", default="outputs/demo")
    p.add_argument("--max-steps", type=int, default=None, help="override the preset's number of steps")
    p.add_argument("--engine", choices=["hf", "vllm"], default=None,
                   help="rollout engine (default: vLLM with a bfloat16 sampler where this CPU runs it, else hf)")
    p.add_argument("--eval-n", type=count_argument(2), default=None, help="held-out problems (default 200)")
    p.add_argument("--sync", action="store_true", help="generate, then learn, in one process (default with "
                   "Hugging Face generate on a CPU: a second process samples while the trainer learns)")
    p.set_defaults(func=_cmd_demo)

    sub.add_parser("make-stubs", help="regenerate exercises/ from solutions/").set_defaults(func=_cmd_make_stubs)
    sub.add_parser("check-stubs", help="fail when exercises/ drifted from solutions/").set_defaults(func=_cmd_check_stubs)
    p = sub.add_parser("grade", help="each exercise function: done, wrong (with the hint) or not started")
    p.add_argument("--impl", default="exercises", choices=["exercises", "solutions"])
    p.add_argument("--lesson", type=int, default=None, help="grade one lesson only, e.g. --lesson 3")
    p.set_defaults(func=_cmd_grade)
    sub.add_parser("check-exercises-fail-on-stubs",
                   help="prove every exercise test fails on the untouched stubs").set_defaults(func=_cmd_check_fail_on_stubs)

    p = sub.add_parser("train", help="train with GRPO, RLOO or PPO")

    add_train_arguments(p)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("doctor", help="diagnose a run folder or a TRL trainer_state.json: each failure and its fix")
    p.add_argument("run_dir", help="the run's output_dir, or a TRL trainer_state.json (or its folder)")
    p.add_argument("--figure", default=None, help="where to save the signals' figure (default: RUN_DIR/doctor.png)")
    p.set_defaults(func=_cmd_doctor)

    from .cli.probe_rewards import add_probe_arguments

    p = sub.add_parser("probe-rewards", help="score degenerate completions (empty, 'I don't know', the prompt's "
                                             "numbers...) beside a correct one: flags a reward hack before training")
    add_probe_arguments(p)
    p.set_defaults(func=_cmd_probe_rewards)

    p = sub.add_parser("export-trl", help="write a TRL config, data and command for the same GRPO, SFT or DPO run")
    add_train_arguments(p, export=True)
    p.add_argument("--output", required=True, help="folder for grpo.yaml (sft.yaml, dpo.yaml), data/, course_rewards.py, README.txt")
    p.set_defaults(func=_cmd_export_trl)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors caused by what the user passed (a value, a path, a file, a reward, the machine):
    a message, not a traceback. Each of them names the cause and the fix. Anything else is a
    bug in the library and keeps its traceback."""
    from .run.async_rollouts import GenerationWorkerError
    from .run.checkpoint import CheckpointError
    from .run.nonfinite import NonFiniteTrainingError
    from .models import ModelNotAvailableError
    from .rewards import RewardFunctionError
    from .sandbox import SandboxUnavailableError

    return (ValueError, KeyError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
            CheckpointError, NonFiniteTrainingError, RewardFunctionError, SandboxUnavailableError,
            ModelNotAvailableError, GenerationWorkerError)


def _short_warnings() -> None:
    """On the command line a warning is one ``Category: message`` block: the library's own
    source line, which Python prints under it by default, tells a user nothing."""
    import warnings

    warnings.formatwarning = lambda message, category, filename, lineno, line=None: (
        f"{category.__name__}: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """Run a command; a user error prints ``error: <what and the fix>`` and exits 2, with the
    traceback only under ``--debug`` (or ``COURSE_TRACEBACK=1``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or bool(os.environ.get("COURSE_TRACEBACK"))
    args = build_parser().parse_args([a for a in argv if a != "--debug"])
    from .common.wording import command_line_active, use_command_line

    was_active = command_line_active()
    use_command_line()  # fixes in error messages name flags, not Python arguments
    _short_warnings()
    try:
        return args.func(args)
    except _user_errors() as error:
        if debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"error: {message}\n(run with --debug to see the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        use_command_line(was_active)


if __name__ == "__main__":
    from .run.distributed import exit_worker

    sys.exit(exit_worker(main()))  # a launched worker leaves without interpreter teardown
