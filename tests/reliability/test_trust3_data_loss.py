"""Nothing is lost: no write through a link out of a run or an export, and a failure saves what it can.

- ``doctor RUN`` saves its figure in the run folder: a symbolic link ``doctor.png`` there is
  refused (as every other run-folder write refuses links), and the file it points to is unchanged.
- ``export-trl`` refuses an output folder whose ``grpo.yaml``, ``data/`` (or other file it
  writes) is a link, before anything is written.
- A generation worker killed with SIGKILL stops the run after the trainer saved its completed
  steps (as SIGTERM does); the message names the checkpoint on disk, and the run resumes from it.
- A full disk during a checkpoint says "no space left on <folder>", leaves no partial
  checkpoint, and leaves the last complete one intact (a fake writer fills the disk).
"""

from __future__ import annotations

import errno
import os
import signal

import pytest
import torch

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.doctor.report import doctor_run
from course_lib.run import checkpoint as ckpt
from course_lib.run.async_rollouts import GenerationWorkerError
from course_lib.cli.export_trl import export_run

from tiny_runs import deadline, tiny_trainer


def _history(folder, steps: int = 3) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "loss": 0.1, "reward": 0.5, "kl": 50.0 * s, "grad_norm": 1.0} for s in range(1, steps + 1)]
    (folder / "history.jsonl").write_text("".join(f"{__import__('json').dumps(r)}\n" for r in rows))


# ------------------------------------------------------------------ 1. doctor --figure
def test_doctor_refuses_a_linked_figure_in_the_run_folder(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "precious.txt"
    _history(run)
    outside.write_text("keep me")
    (run / "doctor.png").symlink_to(outside)
    with pytest.raises(ValueError, match=r"doctor\.png is a symbolic link .* Fix: delete the link"):
        doctor_run(run)
    assert outside.read_text() == "keep me"


# ------------------------------------------------------------------ 2. export-trl links
@pytest.fixture(scope="module")
def export_config(tmp_path_factory):
    return make_config("grpo", model_name_or_path="tiny", per_device_train_batch_size=4, num_generations=2,
                       max_completion_length=4, max_steps=2, save_steps=0,
                       output_dir=str(tmp_path_factory.mktemp("ours")))


@pytest.mark.parametrize("name", ["grpo.yaml", "data", "README.txt", "course_rewards.py"])
def test_export_refuses_links_where_it_writes(tmp_path, export_config, name):
    output, outside = tmp_path / "export", tmp_path / "outside"
    output.mkdir()
    outside.mkdir()
    target = outside / "victim"
    if name == "data":
        target.mkdir()
    else:
        target.write_text("keep me")
    (output / name).symlink_to(target)
    with pytest.raises(ValueError, match=rf"holds symbolic links where the export writes \({name}"):
        export_run(export_config, ["format_reward"], get_task("arithmetic", n=4, seed=0), output, copy_model=False)
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    if name == "data":
        assert list(target.iterdir()) == []
    else:
        assert target.read_text() == "keep me"


# ------------------------------------------------------------------ 3. a killed generation worker
def test_a_killed_worker_saves_the_completed_steps_and_says_so(tmp_path):
    run = tiny_trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=3, save_steps=0)
    killed = []

    def kill_worker(row):
        if row["step"] == 1:
            killed.append(run.pipeline.process)
            os.kill(run.pipeline.process.pid, signal.SIGKILL)

    run.on_step = kill_worker
    with deadline(240), pytest.raises(GenerationWorkerError) as failed:
        run.train()
    message = str(failed.value)
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None, f"nothing saved; the message was: {message}"
    assert latest.name == f"checkpoint-{run.step}" and run.step >= 1
    assert str(latest) in message and "resume" in message.lower()
    assert not killed[0].is_alive()
    resumed = tiny_trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=3, save_steps=0)
    with deadline(240):
        rows = resumed.train(resume_from="latest")
    assert [r["step"] for r in rows] == [1, 2, 3]


# ------------------------------------------------------------------ 4. a full disk
@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"),
    RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0: "
                 "file write failed"),
], ids=["ENOSPC", "torch-wording"])
def test_a_full_disk_names_the_folder_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, failure):
    run = tiny_trainer(tmp_path, max_steps=2, save_steps=1)
    real_save = torch.save

    def filling_save(obj, path, *args, **kwargs):
        if run.step == 2:  # checkpoint-2: write a little, then the disk is full
            with open(path, "wb") as handle:
                handle.write(b"\0" * 1000)
            raise failure
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", filling_save)
    with pytest.raises(ckpt.CheckpointError) as failed:
        run.train()
    message = str(failed.value)
    assert f"no space left on {tmp_path}" in message and "checkpoint-1" in message
    assert ckpt.checkpoint_problem(tmp_path / "checkpoint-1") is None  # the last complete one is intact
    assert ckpt.load_trainer_state(tmp_path / "checkpoint-1")["step"] == 1
    assert not (tmp_path / "checkpoint-2").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".checkpoint-")]
