"""RL must actually teach: GRPO and RLOO raise the tiny model's held-out accuracy.

Seeded runs on the embedded arithmetic task (two-digit addition). The tiny model starts
partly competent; held-out accuracy is measured greedily on 200 test problems (the
train/test split is disjoint by construction). Eval noise at this size is about
+/-3 points, so the bar is a clear margin above the start.
"""

import functools

import pytest

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.doctor.report import first_firing
from course_lib.evaluation import evaluate_accuracy
from course_lib.models import load_policy
from course_lib.presets import run_settings, task_settings
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer

MARGIN = 0.10


def _test_rows():
    return get_task("arithmetic", split="test", n=200, seed=1)


@functools.cache
def _accuracy_before() -> float:
    """The untrained model's held-out accuracy: both tests start from it, so it is measured once."""
    model, tokenizer = load_policy("tiny")
    return evaluate_accuracy(model, tokenizer, _test_rows(), max_new_tokens=6)


def _run(algo: str, tmp_path):
    before = _accuracy_before()
    model, tokenizer = load_policy("tiny")
    test = _test_rows()
    # Exactly the settings `python -m course_lib train --model tiny --task arithmetic` starts from.
    settings = dict(run_settings("tiny", "arithmetic", algo), model_name_or_path="tiny", output_dir=str(tmp_path),
                    seed=0, save_steps=0, logging_steps=100)
    trainer = Trainer(make_config(algo, **settings), get_reward_functions(task_settings("arithmetic")["rewards"]),
                      get_task("arithmetic", split="train", n=4000, seed=0), model, tokenizer, progress=False)
    history = trainer.train()
    # The healthy preset runs of the failure museum: the doctor finds nothing above "info".
    assert [str(f) for f in first_firing(history, trainer.config.to_dict()) if f.severity != "info"] == []
    after = evaluate_accuracy(trainer.model, tokenizer, test, max_new_tokens=6)
    print(f"{algo}: held-out accuracy {before:.3f} -> {after:.3f}; reward {history[0]['reward']:.3f} -> "
          f"{history[-1]['reward']:.3f}")
    return before, after


@pytest.mark.slow
def test_grpo_raises_held_out_accuracy(tmp_path):
    before, after = _run("grpo", tmp_path)
    assert after >= before + MARGIN


@pytest.mark.slow
def test_rloo_raises_held_out_accuracy(tmp_path):
    before, after = _run("rloo", tmp_path)
    assert after >= before + MARGIN
