"""Short training runs on the tiny model, shared by the reliability tests of runs and checkpoints, and
the deadline that makes a test of a possible hang fail instead of hanging."""

from __future__ import annotations

import copy
import signal
from contextlib import contextmanager
from pathlib import Path

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.models import load_policy

#: Two optimizer steps of four completions of at most four tokens: a few seconds on a CPU.
RUN = dict(model_name_or_path="tiny", max_steps=2, learning_rate=1e-3, per_device_train_batch_size=4,
           num_generations=4, max_completion_length=4, logging_steps=1, save_steps=1, seed=5)
_LOADED: dict = {}


def tiny_trainer(output_dir: Path, rewards=("correctness_first_number_reward",), dataset=None, **overrides):
    """A GRPO trainer on a private copy of the tiny model (loaded once per process)."""
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    if not _LOADED:
        _LOADED.update(policy=load_policy("tiny"), data=get_task("arithmetic", n=16, seed=0))
    model, tokenizer = _LOADED["policy"]
    config = make_config("grpo", output_dir=str(output_dir), **{**RUN, **overrides})
    return Trainer(config, get_reward_functions(list(rewards)), dataset if dataset is not None else _LOADED["data"],
                   copy.deepcopy(model), tokenizer, progress=False)


def tiny_weights() -> dict:
    """The tiny model's initial weights (name -> tensor), for comparisons."""
    if not _LOADED:
        _LOADED.update(policy=load_policy("tiny"), data=get_task("arithmetic", n=16, seed=0))
    return {k: v.clone() for k, v in _LOADED["policy"][0].state_dict().items()}


@contextmanager
def deadline(seconds: int):
    """Fail instead of hanging: SIGALRM raises ``TimeoutError`` in the main thread after ``seconds``."""
    def expired(signum, frame):
        raise TimeoutError(f"no result after {seconds} s: it hangs")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
