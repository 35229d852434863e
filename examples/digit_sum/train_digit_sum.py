"""Train a model on your own task with your own rewards through the Python API, then hand the run to TRL.

    python examples/digit_sum/train_digit_sum.py --model tiny --max-steps 20 --output-dir runs/digit-sum

Steps: the rows from :func:`digit_sum.digit_sum_task`; greedy accuracy before, by the task's
own rule; GRPO with the two rewards (stopped by Ctrl-C or SIGTERM, ``train()`` saves and returns
with ``trainer.interrupted``; the script then exits with 128 + the signal); accuracy after; the checkpoint loaded back as a model;
``export_run`` writes a folder that ``trl grpo`` trains (the reward module is copied into it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # digit_sum.py beside this script

from datasets import Dataset  # noqa: E402

from digit_sum import brevity_reward, digit_sum_reward, digit_sum_task, is_digit_sum_correct  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    from course_lib.algos import make_config
    from course_lib.evaluation import evaluate_accuracy
    from course_lib.cli.export_trl import export_run
    from course_lib.models import load_policy
    from course_lib.trainer import Trainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--eval-n", type=int, default=64)
    parser.add_argument("--output-dir", default="runs/digit-sum")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters instead of every weight")
    args = parser.parse_args(argv)

    train = Dataset.from_list(digit_sum_task("train", n=512, seed=0))
    test = Dataset.from_list(digit_sum_task("test", n=args.eval_n, seed=0))
    config = make_config("grpo", model_name_or_path=args.model, output_dir=args.output_dir, max_steps=args.max_steps,
                         per_device_train_batch_size=16, num_generations=8, max_completion_length=6,
                         learning_rate=3e-5, temperature=1.0, lr_scheduler_type="constant", save_steps=args.max_steps,
                         use_lora=args.lora, overwrite_output_dir=True)
    trainer = Trainer(config, [digit_sum_reward, brevity_reward], train)
    before = evaluate_accuracy(trainer.model, trainer.tokenizer, test, max_new_tokens=6, correct_fn=is_digit_sum_correct)
    trainer.train()
    if trainer.interrupted:  # Ctrl-C, SIGTERM or SIGHUP: train() saved a checkpoint and returned
        from course_lib.run.signals import exit_code, signal_name

        signum = trainer.stop_signal or 2  # None: another process's stop, counted as Ctrl-C
        print(f"stopped by {signal_name(signum)}: saved {trainer.output_dir}/checkpoint-{trainer.step}; "
              "continue with trainer.train(resume_from='latest')", file=sys.stderr)
        raise SystemExit(exit_code(signum))  # the shell's convention, 128 + signal, as the command line
    after = evaluate_accuracy(trainer.model, trainer.tokenizer, test, max_new_tokens=6, correct_fn=is_digit_sum_correct)
    # The checkpoint folder is a model: load it back as another script would.
    checkpoint = Path(args.output_dir) / f"checkpoint-{trainer.step}"
    reloaded, tokenizer = load_policy(checkpoint)
    reloaded_accuracy = evaluate_accuracy(reloaded, tokenizer, test, max_new_tokens=6, correct_fn=is_digit_sum_correct)
    export = export_run(config, [digit_sum_reward, brevity_reward], train, Path(args.output_dir) / "trl")
    summary = {"accuracy_before": before, "accuracy_after": after, "checkpoint": str(checkpoint),
               "checkpoint_accuracy": reloaded_accuracy, "trl_export": str(export)}
    print(json.dumps(summary))
    print((export / "README.txt").read_text().split("\n\n")[0])
    return summary


if __name__ == "__main__":
    main()
