"""SIGKILL a training run while it writes checkpoints, resume each time, and end where a straight run ends.

Runs happen in forked children of the test process (torch already imported, so a child
starts in milliseconds). Two ways to die, many times each:

- **inside a save**: the child kills itself with SIGKILL at a random file write of a
  random ``save_checkpoint`` (after the k-th ``torch.save`` / ``write_text``), the
  worst moment for a checkpoint;
- **at a random instant**: the parent kills the child after a random delay.

After every kill the next child starts with ``--resume-from latest`` semantics
(``Trainer.train(resume_from="latest")``), or with ``overwrite_output_dir`` when the killed
run saved no checkpoint yet, and must neither fail nor diverge: the final
weights and the logged history equal those of an uninterrupted run, bit for bit.
Ctrl-C (SIGINT) is checked separately: it saves a checkpoint and returns cleanly.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from course_lib.run import checkpoint as ckpt
from course_lib.run.history import WALL_CLOCK_KEYS
from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
              pytest.mark.xdist_group("kill-resume")]

MAX_STEPS = 6
_PARENT = os.getpid()
SETTINGS = dict(model_name_or_path="tiny", max_steps=MAX_STEPS, learning_rate=1e-3, per_device_train_batch_size=4,
                gradient_accumulation_steps=1, num_generations=4, max_completion_length=4, logging_steps=1,
                save_steps=1, save_total_limit=2, seed=5, steps_per_generation=2, temperature=1.5, beta=0.04)


_LOADED: dict = {}


@pytest.fixture(autouse=True)
def _progress_bars_with_a_private_lock():
    """tqdm guards its bars with a process-shared semaphore, inherited by forked children: a
    child SIGKILLed while it draws a bar ("Writing model shards") leaves it held, and every
    later bar in the parent or another child waits forever. A thread lock is copied on fork
    instead, so a killed child takes only its own copy with it."""
    import threading

    from tqdm import std

    classes, stack = [], [std.tqdm]
    while stack:
        cls = stack.pop()
        classes.append(cls)
        stack.extend(cls.__subclasses__())
    saved = {cls: cls.__dict__["_lock"] for cls in classes if "_lock" in cls.__dict__}
    std.tqdm.set_lock(threading.RLock())
    for cls in saved:
        if cls is not std.tqdm:
            del cls._lock  # inherit the private lock
    yield
    if std.tqdm not in saved:
        del std.tqdm._lock
    for cls, lock in saved.items():
        cls._lock = lock


def _trainer(output_dir: Path, **overrides) -> Trainer:
    """A trainer on the tiny model. Model, data and rewards are loaded once and inherited by
    forked children (copy-on-write: a child's training never touches the parent's copy)."""
    if not _LOADED:
        _LOADED["policy"] = load_policy("tiny")
        _LOADED["rewards"] = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])
        _LOADED["data"] = get_task("arithmetic", n=32, seed=0)
        Trainer(make_config("grpo", output_dir=str(output_dir), **SETTINGS), _LOADED["rewards"], _LOADED["data"],
                *_LOADED["policy"], progress=False)  # first construction pays the lazy imports, in the parent
    config = make_config("grpo", output_dir=str(output_dir), **{**SETTINGS, **overrides})
    model, tokenizer = _LOADED["policy"]
    if os.getpid() == _PARENT:  # trained in this process: start from a private copy of the weights
        import copy

        model = copy.deepcopy(model)
    return Trainer(config, _LOADED["rewards"], _LOADED["data"], model, tokenizer, progress=False)


def _die_at_write(k: int) -> None:
    """Make the k-th file write inside save_checkpoint the last act of this process."""
    count = {"writes": 0}
    original_save, original_write = torch.save, Path.write_text

    def tick():
        count["writes"] += 1
        if count["writes"] >= k:
            os.kill(os.getpid(), signal.SIGKILL)

    def save(*args, **kwargs):
        result = original_save(*args, **kwargs)
        tick()
        return result

    def write_text(self, *args, **kwargs):
        result = original_write(self, *args, **kwargs)
        if self.parent.name.startswith(".checkpoint-"):
            tick()
        return result

    torch.save, Path.write_text = save, write_text


def _run_child(output_dir: Path, die_at_write: int | None = None) -> int:
    """Fork a child that trains (resuming from the latest checkpoint); return its wait status."""
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            if die_at_write is not None:
                _die_at_write(die_at_write)
            # What a user does after a kill: resume from the newest checkpoint, or, when the
            # killed run saved none, start over in the folder it left (--overwrite-output-dir).
            resumable = ckpt.latest_checkpoint(output_dir) is not None
            trainer = _trainer(output_dir, overwrite_output_dir=not resumable)
            trainer.train(resume_from="latest" if resumable else None)
            code = 0
        except BaseException:  # noqa: BLE001 - report anything to the parent
            (output_dir / "child-error.txt").write_text(traceback.format_exc())
        finally:
            sys.stdout.flush()
            os._exit(code)
    return pid


def _final_state(output_dir: Path) -> tuple[dict, list]:
    weights = {}
    for shard in sorted((output_dir / "final").glob("*.safetensors")):
        weights.update(load_file(shard))
    assert weights, f"{output_dir / 'final'} holds no weights"
    rows = [json.loads(line) for line in (output_dir / "history.jsonl").read_text().splitlines()]
    # Metric rows only: event rows (the doctor's config and findings, with a "type") are not step metrics.
    comparable = [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in rows if "type" not in row]
    return weights, comparable


def _wait(pid: int, output_dir: Path) -> int:
    _, status = os.waitpid(pid, 0)
    error = output_dir / "child-error.txt"
    assert not error.exists(), f"a resumed run failed:\n{error.read_text()}"
    return status


def test_sigkill_at_random_points_then_resume_matches_a_straight_run(tmp_path):
    straight = tmp_path / "straight"
    _trainer(tmp_path / "warm-up")  # load once, before forking
    started = time.monotonic()
    assert os.waitstatus_to_exitcode(_wait(_run_child(straight), straight)) == 0
    straight_seconds = time.monotonic() - started
    expected_weights, expected_rows = _final_state(straight)
    assert len(expected_rows) == MAX_STEPS

    rng = random.Random(1234)
    chained = tmp_path / "killed"
    kills = {"in-save": 0, "random-instant": 0}
    # Alternate the two ways to die until 8 of each have happened, then let a run finish.
    while min(kills.values()) < 8:
        if kills["in-save"] <= kills["random-instant"]:
            pid = _run_child(chained, die_at_write=rng.randint(1, 9))
            status = _wait(pid, chained)
            kind = "in-save"
        else:
            pid = _run_child(chained)
            time.sleep(rng.uniform(0.0, straight_seconds))
            os.kill(pid, signal.SIGKILL)
            status = _wait(pid, chained)
            kind = "random-instant"
        if os.WIFSIGNALED(status):
            kills[kind] += 1
        else:  # the run got to the end before its kill: check it, then start over
            assert os.waitstatus_to_exitcode(status) == 0
            for leftover in ckpt.list_checkpoints(chained):
                assert ckpt.checkpoint_problem(leftover) is None
            weights, rows = _final_state(chained)
            assert rows == expected_rows
            assert all(torch.equal(weights[k], expected_weights[k]) for k in expected_weights)
            for path in sorted(chained.iterdir(), reverse=True):
                if path.is_dir():
                    import shutil

                    shutil.rmtree(path)
                else:
                    path.unlink()
        # Whatever was killed, every checkpoint-<step> folder on disk is complete.
        for folder in ckpt.list_checkpoints(chained):
            assert ckpt.checkpoint_problem(folder) is None, folder
        assert len(ckpt.list_checkpoints(chained)) <= SETTINGS["save_total_limit"]
    assert os.waitstatus_to_exitcode(_wait(_run_child(chained), chained)) == 0
    weights, rows = _final_state(chained)
    assert rows == expected_rows
    for name, tensor in expected_weights.items():
        assert torch.equal(weights[name], tensor), name


def test_ctrl_c_saves_a_checkpoint_and_returns_cleanly(tmp_path):
    trainer = _trainer(tmp_path)
    trainer.on_step = lambda row: os.kill(os.getpid(), signal.SIGINT) if row["step"] == 2 else None
    history = trainer.train()
    assert trainer.interrupted and trainer.step == 2 and len(history) == 2
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert not (tmp_path / "final").exists()
    resumed = _trainer(tmp_path)
    assert len(resumed.train(resume_from="latest")) == MAX_STEPS
    assert not resumed.interrupted


def test_a_damaged_checkpoint_gets_a_clear_error_and_latest_skips_it(tmp_path):
    _trainer(tmp_path, max_steps=2, save_total_limit=None).train()
    damaged = tmp_path / "checkpoint-2"
    (damaged / "trainer_state.json").write_text('{"step": 2, "alg')  # torn by hand
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint-2: trainer_state.json does not parse.*checkpoint-1"):
        ckpt.resolve_resume(damaged, tmp_path)
    (tmp_path / "checkpoint-1" / "history.jsonl").unlink()
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint-1: it lacks history.jsonl"):
        _trainer(tmp_path).train(resume_from=tmp_path / "checkpoint-1")
    with pytest.raises(ckpt.CheckpointError, match=r"no complete checkpoint"):
        ckpt.resolve_resume("latest", tmp_path)
