"""``python -m course_lib train``: one command for GRPO, RLOO, PPO, SFT, rejection-sampling, DPO and distillation runs.

Example::

    python -m course_lib train --algo grpo --model tiny --task arithmetic --max-steps 200 \\
        --output-dir runs/tiny-grpo --set learning_rate=3e-5 --set per_device_train_batch_size=32

Without ``--set`` a run starts from the settings measured to work for the model and task
(``course_lib.presets``). Every config field can be set with ``--set key=value`` (``--list-fields`` prints them with
their documentation). Writes ``<output-dir>/history.jsonl``, checkpoints and ``final/``.
"""

from __future__ import annotations

import argparse
import os
import json
import sys

def count_argument(minimum: int):
    """An argparse ``type`` for a count of at least ``minimum``: ``-5`` must not mean "all but 5"."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}; give a count of at least {minimum}")
        return value

    parse.__name__ = "count"
    return parse


#: Rows drawn from a generated task (or a task function) when --train-rows is not given.
GENERATED_ROWS = 2000

TASK_HELP = ("arithmetic, arithmetic-tagged, arithmetic-mixed, word-problems, sorting, gsm8k, gsm8k:<folder or jsonl>, "
             "or your own: a .jsonl file with 'prompt' and 'answer' on each line, or module:function returning the "
             "rows (course_lib.common.user_tasks)")
CORRECT_HELP = ("your function f(completion, answer) -> bool deciding a correct answer in evaluations, as "
                "module:function or file.py:function (default: the number in <answer> tags, else the first number)")


def correct_function(args):
    """The ``--correct`` function, or None for the default rule."""
    from ..evaluation import check_correct_fn
    from ..common.user_code import resolve_callable, strict_correctness

    if not getattr(args, "correct", None):
        return None
    function = resolve_callable(args.correct, what="--correct")
    check_correct_fn(function)
    return strict_correctness(function, what="--correct")


def add_train_arguments(parser: argparse.ArgumentParser, export: bool = False) -> None:
    """The options of ``train``; ``export``: the same for ``export-trl``, whose ``--help`` hides the
    options that only a run reads (resuming, the output folder's handling, the evaluation)."""
    import functools

    only_train = functools.partial(_train_only, export)
    parser.add_argument("--algo", choices=["grpo", "rloo", "ppo", "sft", "rejection", "dpo", "distill"], default="grpo",
                        help="RL (grpo, rloo, ppo), or sft (the task's answers as demonstrations), rejection "
                        "(expert iteration), dpo (pairs from the start model's samples), distill (--set "
                        "teacher_model=PATH)")
    parser.add_argument("--model", default="tiny", help="tiny, smollm2-135m, a local folder or a hub id")
    parser.add_argument("--task", default="arithmetic", help=TASK_HELP)
    parser.add_argument("--train-rows", type=count_argument(1), default=None,
                        help="rows of the task to train on (default: every row of a .jsonl file or gsm8k:<path>; "
                             f"{GENERATED_ROWS} of a generated task or a task function)")
    parser.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="optimizer steps (default: the measured preset for the model and task, else 100; "
                             "-1 runs num_train_epochs passes)")
    parser.add_argument("--output-dir", default="runs/latest", help=only_train("the run's folder"))
    parser.add_argument("--resume-from", default=None, help=only_train("a <output-dir>/checkpoint-<step> folder, or "
                        "'latest' for the newest complete checkpoint in --output-dir"))
    parser.add_argument("--overwrite-output-dir", action="store_true", help=only_train("delete the run already in "
                        "--output-dir (history, checkpoints, final/) and start a new one there; without it a "
                        "non-empty --output-dir is refused unless --resume-from continues the run in it"))
    parser.add_argument("--rewards", default=None, help="comma-separated reward functions: shipped names or your "
                        "own as module:function / file.py:function (default: the task's, see course_lib.presets)")
    parser.add_argument("--correct", default=None, metavar="MODULE:FUNCTION", help=only_train(CORRECT_HELP))
    parser.add_argument("--preset", default=None, help="a named set of config values, e.g. older_trl_rloo (the "
                        "older TRL RLOOTrainer's defaults); --set wins over it (course_lib.presets.NAMED)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="any config field, e.g. --set learning_rate=3e-5 (repeatable)")
    parser.add_argument("--eval-n", type=count_argument(0), default=0,
                        help=only_train("held-out problems to evaluate before and after (0 skips the evaluation)"))
    parser.add_argument("--list-fields", action="store_true", help="print every config field with its doc and exit")
    parser.add_argument("--num-processes", type=int, default=1,
                        help="data-parallel processes: launches this command on N processes (CPU: torch's "
                             "launcher with gloo; GPUs: accelerate launch --multi_gpu)")


def _train_only(export: bool, text: str) -> str:
    return argparse.SUPPRESS if export else text


def check_run_arguments(args) -> None:
    """Refuse arguments that would otherwise be read silently as something else."""
    if args.rewards is not None and not [name for name in args.rewards.split(",") if name.strip()]:
        raise ValueError(f"--rewards {args.rewards!r} names no reward function (an empty list would silently "
                         "mean the task's defaults). Fix: name them, e.g. --rewards correctness_reward,format_reward, "
                         "or leave --rewards out for the task's own.")
    if getattr(args, "resume_from", None) is not None and not args.resume_from.strip():
        raise ValueError("--resume-from '' names no checkpoint (it would silently start a new run). Fix: "
                         "--resume-from latest, or a <output-dir>/checkpoint-<step> folder, or leave it out.")
    for item in args.overrides:
        key, _, value = item.partition("=")
        if key.strip().removeprefix("--").replace("-", "_") != "num_processes":
            continue
        # Under an outside launcher (accelerate launch) --set num_processes names its process count;
        # otherwise this command starts the processes, from --num-processes.
        started = os.environ.get("WORLD_SIZE") if "LOCAL_RANK" in os.environ else str(args.num_processes)
        if value.strip() != started:
            source = ("the launcher started WORLD_SIZE=" if "LOCAL_RANK" in os.environ
                      else "this command starts --num-processes ")
            raise ValueError(f"--set {item} conflicts with the processes that run ({source}{started}): the batch "
                             "arithmetic would assume another number of processes. Fix: use --num-processes N (or "
                             "the launcher's count) and leave num_processes out of --set.")


def build_run(args):
    """Config, reward functions and dataset for the parsed arguments (no model loaded)."""
    from ..config import apply_overrides
    from ..algos import make_config
    from ..data import get_task
    from ..presets import run_settings, task_settings
    from ..rewards import get_reward_functions

    check_run_arguments(args)
    settings = run_settings(args.model, args.task, args.algo)
    if getattr(args, "preset", None):
        from ..presets import named_preset

        settings.update(named_preset(args.preset, args.algo))
    if args.max_steps is not None:
        settings["max_steps"] = args.max_steps
    config = make_config(args.algo, model_name_or_path=args.model, engine=args.engine, output_dir=args.output_dir,
                         overwrite_output_dir=args.overwrite_output_dir, num_processes=args.num_processes,
                         **settings)
    config = apply_overrides(config, args.overrides)
    reward_names = args.rewards.split(",") if args.rewards else task_settings(args.task)["rewards"]
    dataset = get_task(args.task, split="train", n=train_rows(args), seed=config.seed)
    if config.algo in ("sft", "dpo"):  # data the algorithm reads instead of rewards (course_lib.post_training.data)
        from ..post_training.data import prepared_dataset

        dataset = prepared_dataset(config, dataset, get_reward_functions(reward_names))
    return config, get_reward_functions(reward_names), dataset


def train_rows(args) -> int | None:
    """``--train-rows``, else every row of a file (None) and :data:`GENERATED_ROWS` of anything generated."""
    if args.train_rows is not None:
        return args.train_rows
    return None if args.task.endswith(".jsonl") or args.task.startswith("gsm8k:") else GENERATED_ROWS


#: Fields the start-up line always names; any field given with --set or --preset is named too.
SHOWN_FIELDS = ("learning_rate", "lr_scheduler_type", "per_device_train_batch_size", "num_generations",
                "max_completion_length", "temperature", "beta", "max_steps", "use_lora")


def describe_settings(config, args) -> str:
    """The settings a run starts from and where they came from, as printed before the first step."""
    from ..presets import settings_source

    changed = [item.partition("=")[0].strip().removeprefix("--").replace("-", "_") for item in args.overrides]
    names = list(SHOWN_FIELDS) + [n for n in changed if n not in SHOWN_FIELDS and hasattr(config, n)]
    values = ", ".join(f"{name}={getattr(config, name)!r}" for name in names if hasattr(config, name))
    sources = [settings_source(args.model, args.task, args.algo)]
    if getattr(args, "preset", None):
        sources.append(f"--preset {args.preset}")
    if args.max_steps is not None:
        sources.append("--max-steps")
    if changed:
        sources.append("--set " + ", ".join(changed))
    return f"settings: {values}\n  from: " + "; then ".join(sources)


def run_train(args) -> int:
    from ..config import field_docs
    from ..algos import make_config

    if args.list_fields:
        config = make_config(args.algo)
        for name, doc in field_docs(type(config)).items():
            print(f"{name} = {getattr(config, name, None)!r}\n    {doc}")
        return 0
    if args.num_processes < 1:
        raise ValueError(f"--num-processes {args.num_processes}: use 1 or more processes.")
    if args.num_processes > 1 and "LOCAL_RANK" not in os.environ:
        return _launch(args)
    if "LOCAL_RANK" in os.environ:  # a worker of a launched run: it dies with its launcher
        from .lifeline import die_with_parent

        die_with_parent()
    from ..trainer import Trainer

    config, reward_funcs, dataset = build_run(args)
    if "LOCAL_RANK" not in os.environ or os.environ.get("RANK", "0") == "0":
        print(describe_settings(config, args), file=sys.stderr)
    eval_dataset = None
    if config.eval_strategy != "no":  # held-out prompts for evaluation during training
        from ..data import get_task

        eval_dataset = get_task(args.task, split="test", n=args.eval_n or 64, seed=0)
    correct = correct_function(args)
    if correct is not None and not args.eval_n and eval_dataset is None:
        print(f"warning: --correct {args.correct} is read by the evaluations, and this run has none. Fix: add "
              "--eval-n N (before and after) or --set eval_strategy=steps (during training).", file=sys.stderr)
    # The in-loop evaluation reads correct_fn; the before/after one takes it from args.
    trainer = Trainer(config, reward_funcs, dataset, eval_dataset=eval_dataset,
                      correct_fn=correct if eval_dataset is not None else None)
    main = trainer.accelerator.is_main_process
    before = _evaluate(trainer, args) if args.eval_n and main else None
    history = trainer.train(resume_from=args.resume_from)
    if trainer.interrupted:
        from ..run.signals import exit_code, signal_name

        signum = getattr(trainer, "stop_signal", None) or 2  # another process's stop: Ctrl-C's code
        print(f"stopped by {signal_name(signum)}: saved {trainer.output_dir}/checkpoint-{trainer.step}; continue "
              "with the same command and --resume-from latest", file=sys.stderr)
        return exit_code(signum)
    after = _evaluate(trainer, args) if args.eval_n and main else None
    if not main:
        return 0
    last = history[-1] if history else {}
    summary = {"algo": args.algo, "steps": trainer.step, "output_dir": str(trainer.output_dir),
               "final_reward": last.get("reward"), "accuracy_before": before, "accuracy_after": after}
    print(json.dumps(summary))
    return 0


def _launch(args) -> int:
    """Run this command on ``args.num_processes`` processes through the launcher; its exit code.

    Everything that can be refused is checked here first, once, as one error line (a bad
    config, a checkpoint that cannot be resumed, an output folder in use or holding
    another run) rather than inside N workers' tracebacks. The launcher dies with this
    process and the workers with the launcher (``course_lib.cli.lifeline``).
    """
    from ..run.checkpoint import load_trainer_state, resolve_resume
    from ..run.distributed import cuda_requested, launch_command
    from ..run.folder import check_resume_config, claim_output_dir
    from .lifeline import launcher_preexec
    from ..run.signals import run_forwarding_signals

    config, _, _ = build_run(args)
    resume_folder = resolve_resume(args.resume_from, config.output_dir) if args.resume_from else None
    if resume_folder is not None:
        check_resume_config(load_trainer_state(resume_folder).get("config"), config.to_dict(), resume_folder)
    cores = os.cpu_count() or 1
    if not cuda_requested(config.device) and args.num_processes > cores:
        print(f"warning: --num-processes {args.num_processes} on a machine with {cores} CPU cores: the processes "
              "take turns on the cores, so the run is slower than with fewer processes.", file=sys.stderr)
    with claim_output_dir(config.output_dir, resume_folder=resume_folder, overwrite=config.overwrite_output_dir):
        pass  # released at once: the main worker takes the lock for the run
    command = launch_command(args.num_processes, sys.argv[1:], cpu=not cuda_requested(config.device))
    print("launching:", " ".join(command), file=sys.stderr)
    # Each stop signal (Ctrl-C, SIGTERM, SIGHUP) is passed on to the launcher, once, and the exit
    # code is 128 + that signal (course_lib.run.signals).
    return run_forwarding_signals(command, preexec_fn=launcher_preexec(os.getpid()))


def _evaluate(trainer, args) -> float:
    from ..data import get_task
    from ..evaluation import evaluate_accuracy

    test = get_task(args.task, split="test", n=args.eval_n, seed=0)
    config = trainer.config
    return evaluate_accuracy(trainer.model, trainer.tokenizer, test, max_new_tokens=config.max_completion_length,
                             correct_fn=correct_function(args), progress=True, max_prompt_length=config.max_prompt_length,
                             lengths_fix=f"lower --set max_completion_length={config.max_completion_length}, or cut "
                             "the prompts with --set max_prompt_length=N (as training does), or evaluate without "
                             "--eval-n")
