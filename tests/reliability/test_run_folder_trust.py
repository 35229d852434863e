"""A run folder holds one run, writes nothing outside itself, and resumes only the run that wrote it.

- Symbolic links where a run writes (``history.jsonl``, ``.lock``, a checkpoint) are refused, or
  removed by ``overwrite``: the files they point to are never written or created.
- ``overwrite_output_dir`` removes what the earlier run wrote and nothing else: its ``wandb/`` or
  ``tensorboard/`` only when its saved config reported there.
- A lock whose run is dead but whose file is still held (by a process the run forked) is stale
  and taken over; a lock of a live run is still refused.
- Resume refuses other training rows or reward functions, a ``trainer_state.json`` without a
  config, and counters or sampler state that are not whole numbers >= 0; resuming from an
  earlier checkpoint deletes the abandoned branch's later checkpoints and ``final/``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import warnings
from pathlib import Path

import pytest

from course_lib.run import checkpoint as ckpt
from course_lib.data import get_task
from course_lib.run.folder import OutputDirError, claim_output_dir

from tiny_runs import tiny_trainer


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished 2-step run: history.jsonl, checkpoint-1, checkpoint-2, final/."""
    folder = tmp_path_factory.mktemp("finished") / "run"
    tiny_trainer(folder).train()
    return folder


def _copy_run(finished_run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(finished_run, target, symlinks=True)
    (target / ".lock").unlink(missing_ok=True)
    return target


# ------------------------------------------------------------------------------ symbolic links


def test_a_history_file_that_is_a_link_is_refused_and_its_target_untouched(finished_run, tmp_path):
    run = _copy_run(finished_run, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / "history.jsonl").unlink()
    (run / "history.jsonl").symlink_to(victim)
    with pytest.raises(OutputDirError, match=r"symbolic links.*history\.jsonl"):
        tiny_trainer(run, max_steps=3).train(resume_from="latest")
    assert victim.read_text() == "precious\n"


def test_a_lock_file_that_is_a_link_is_not_followed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "created-by-the-lock"
    (run / ".lock").symlink_to(target)
    with pytest.raises(OutputDirError, match=r"symbolic links.*\.lock"):
        with claim_output_dir(run):
            pass
    assert not target.exists()


def test_overwrite_removes_links_never_their_targets(finished_run, tmp_path):
    run = _copy_run(finished_run, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (run / "history.jsonl").unlink()
    (run / "history.jsonl").symlink_to(outside / "keep.txt")
    (run / "checkpoint-7").symlink_to(outside)
    (run / ".lock").symlink_to(tmp_path / "lock-target")
    with claim_output_dir(run, overwrite=True):
        pass
    assert (outside / "keep.txt").read_text() == "keep"
    assert not (tmp_path / "lock-target").exists()
    assert not (run / "checkpoint-7").exists() and not (run / "history.jsonl").is_symlink()


# ------------------------------------------------------------------------------ overwrite


def _fake_run(folder: Path, report_to: str) -> None:
    (folder / "checkpoint-1").mkdir(parents=True)
    state = {"step": 1, "algo": "grpo", "sampler": {"epoch": 0, "position": 0}, "config": {"report_to": report_to}}
    (folder / "checkpoint-1" / "trainer_state.json").write_text(json.dumps(state))
    (folder / "history.jsonl").write_text('{"step": 1}\n')
    for logs in ("wandb", "tensorboard"):
        (folder / logs).mkdir()
        (folder / logs / "another-run.log").write_text("not ours")


def test_overwrite_leaves_log_folders_the_earlier_run_did_not_write(tmp_path):
    run = tmp_path / "run"
    _fake_run(run, report_to="none")
    with claim_output_dir(run, overwrite=True):
        pass
    assert (run / "wandb" / "another-run.log").exists() and (run / "tensorboard" / "another-run.log").exists()
    assert not (run / "history.jsonl").exists() and not (run / "checkpoint-1").exists()


def test_overwrite_removes_the_log_folder_the_earlier_run_wrote(tmp_path):
    run = tmp_path / "run"
    _fake_run(run, report_to="tensorboard")
    with claim_output_dir(run, overwrite=True):
        pass
    assert not (run / "tensorboard").exists()
    assert (run / "wandb" / "another-run.log").exists()


# ------------------------------------------------------------------------------ stale locks


def test_a_lock_held_only_by_a_process_the_dead_run_forked_is_stale(tmp_path):
    """The run dies (SIGKILL); a process it forked keeps the lock file open (and locked)."""
    run = tmp_path / "run"
    read_end, write_end = os.pipe()
    run_pid = os.fork()
    if run_pid == 0:  # the run
        try:
            os.close(read_end)
            with claim_output_dir(run):
                leftover = os.fork()
                if leftover == 0:  # its forked helper: inherits the locked file, outlives the run
                    time.sleep(120)
                    os._exit(0)
                os.write(write_end, str(leftover).encode())
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)
    os.close(write_end)
    leftover = int(os.read(read_end, 32).decode())
    os.close(read_end)
    os.waitpid(run_pid, 0)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with claim_output_dir(run):
                pass
        assert any(f"run process {run_pid}, which is dead" in str(w.message) for w in caught)
    finally:
        os.kill(leftover, signal.SIGKILL)  # not our child (the run forked it): init reaps it


def test_a_lock_of_a_live_run_is_still_refused_and_names_it(tmp_path):
    with claim_output_dir(tmp_path / "run"):
        with pytest.raises(OutputDirError, match=rf"in use by another training run \(process {os.getpid()}"):
            with claim_output_dir(tmp_path / "run"):
                pass


# ------------------------------------------------------------------------------ resume checks


def test_resume_refuses_other_training_rows(finished_run, tmp_path):
    run = _copy_run(finished_run, tmp_path)
    more_rows = get_task("arithmetic", n=24, seed=0)
    with pytest.raises(ValueError, match=r"16 training rows in the checkpoint, 24 now \(train_dataset\)"):
        tiny_trainer(run, max_steps=3, dataset=more_rows).train(resume_from="latest")
    other_task = get_task("arithmetic", n=16, seed=1)
    with pytest.raises(ValueError, match=r"training rows differ in content \(train_dataset"):
        tiny_trainer(run, max_steps=3, dataset=other_task).train(resume_from="latest")


def test_resume_refuses_other_reward_functions(finished_run, tmp_path):
    run = _copy_run(finished_run, tmp_path)
    with pytest.raises(ValueError, match=r"reward functions \['correctness_first_number_reward'\] in the checkpoint"):
        tiny_trainer(run, max_steps=3, rewards=("proximity_reward",)).train(resume_from="latest")


def _edit_state(run: Path, edit) -> Path:
    folder = run / "checkpoint-2"
    state = json.loads((folder / "trainer_state.json").read_text())
    edit(state)
    (folder / "trainer_state.json").write_text(json.dumps(state))
    return folder


def test_resume_refuses_a_trainer_state_without_config(finished_run, tmp_path):
    run = _copy_run(finished_run, tmp_path)
    folder = _edit_state(run, lambda state: state.pop("config"))
    with pytest.raises(ValueError, match="holds no config"):
        tiny_trainer(run, max_steps=3, learning_rate=0.5).train(resume_from=folder)


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(step=-7), r"step=-7, which is not a whole number >= 0"),
    (lambda s: s.update(step="2"), r"step='2', which is not a whole number >= 0"),
    (lambda s: s["sampler"].update(shuffle_seed=3), r"sampler holds unknown keys \['shuffle_seed'\]"),
    (lambda s: s["sampler"].update(position=-1), r"sampler has position=-1"),
])
def test_resume_refuses_counters_that_are_not_counts(finished_run, tmp_path, edit, message):
    run = _copy_run(finished_run, tmp_path)
    folder = _edit_state(run, edit)
    with pytest.raises(ckpt.CheckpointError, match=message):
        tiny_trainer(run, max_steps=3).train(resume_from=folder)


def test_resuming_from_an_earlier_checkpoint_prunes_the_abandoned_branch(tmp_path):
    run = tmp_path / "run"
    tiny_trainer(run, max_steps=4).train()
    assert [c.name for c in ckpt.list_checkpoints(run)] == [f"checkpoint-{s}" for s in (1, 2, 3, 4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_trainer(run, max_steps=3).train(resume_from=run / "checkpoint-2")
    assert any("deleted checkpoint-3, checkpoint-4, final" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    # The new branch ends at step 3: nothing of the old one may be picked later.
    assert [c.name for c in ckpt.list_checkpoints(run)] == [f"checkpoint-{s}" for s in (1, 2, 3)]
    assert ckpt.resolve_resume("latest", run).name == "checkpoint-3"
    from course_lib.run.history import load_history

    def metric_steps(rows):  # rows with a "type" are events (the run doctor's findings), not metrics
        return [row["step"] for row in rows if "type" not in row]

    assert metric_steps(load_history(run)) == [1, 2, 3]
    assert metric_steps(load_history(ckpt.resolve_resume("latest", run))) == [1, 2, 3]
