"""Checkpoints that resume a run exactly: weights, optimizer, scheduler, RNG, data order.

A checkpoint folder ``<output_dir>/checkpoint-<step>/`` holds:

- ``model/``: the policy (only the adapters for a LoRA run) via ``save_pretrained``;
- ``value_head.pt`` (PPO), ``optimizer.pt``, ``scheduler.pt``: state dicts of tensors and
  numbers, read back with ``torch.load(weights_only=True)``;
- ``rng.json`` + ``rng.safetensors``: Python, NumPy and torch generator states;
- ``rollout.json`` + ``rollout.safetensors``: the generation batch being consumed, so a
  run stopped in the middle of a generation cycle resumes on the same samples;
- ``trainer_state.json``: step counters, the prompt sampler's state and the config;
- ``history.jsonl``: the metrics logged up to this step.

A checkpoint survives a kill at any instant: it is written to a hidden temporary folder
(``.checkpoint-<step>.tmp-<pid>``), each file flushed to disk, and only then renamed to
``checkpoint-<step>`` (a rename within one file system is atomic). A folder with that
name is therefore complete; leftovers of a killed save are hidden temporary folders,
removed by the next save. ``save_total_limit`` keeps the newest few checkpoints;
``resolve_resume("latest", output_dir)`` picks the newest complete one; a damaged folder
(copied by hand, edited, or written by an older version) gets a ``CheckpointError`` that
names it and the fix. Nothing in a checkpoint is unpickled as code (``course_lib.run.state_io``):
a crafted file gets a ``CheckpointError``, never an execution. ``StopOnInterrupt`` turns
Ctrl-C, SIGTERM and SIGHUP into "save and stop" at the next optimizer step (``course_lib.run.signals``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import shutil
import threading
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ..models import first_non_finite, make_adapter_portable
from .signals import StopOnSignals
from ..common.wording import fix, resume_latest
from .state_io import StateFileError, load_rng, load_rollout, load_tensor_state, read_tensors, save_rng, save_rollout


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


REQUIRED_FILES = ("trainer_state.json", "history.jsonl", "optimizer.pt", "scheduler.pt", "rng.json",
                  "rng.safetensors", "rollout.json", "rollout.safetensors", "model")
_NAME = re.compile(r"^checkpoint-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be resumed from; the message names it and the fix."""


def _fsync_tree(folder: Path) -> None:
    """Flush every file, then the folders, so that the rename publishes data that is on disk."""
    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_folder(folder: str | Path) -> Iterator[Path]:
    """Write a folder all at once: yield a hidden temporary folder beside ``folder``, then
    flush it to disk and rename it to ``folder`` (replacing an older one). If the block
    raises or the process dies, ``folder`` is untouched and the temporary is a leftover
    that the next ``save_checkpoint`` removes."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if _out_of_space(error):
            raise CheckpointError(_no_space_message(folder)) from error
        raise
    _fsync_tree(tmp)
    if folder.exists():  # saved again (a resumed run): hide the old one, then publish the new one
        _discard(folder)
    os.replace(tmp, folder)
    _fsync_dir(folder.parent)


def _out_of_space(error: BaseException) -> bool:
    """True for a write that failed for want of space: ``ENOSPC`` / ``EDQUOT``, or torch's and
    safetensors' own wording of it (they report a failed write without the errno)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    return isinstance(error, (OSError, RuntimeError)) and any(
        mark in text for mark in ("No space left", "file write failed", "Disk quota exceeded"))


def _no_space_message(folder: Path) -> str:
    try:
        free = f"{shutil.disk_usage(folder.parent).free / 2**20:.1f} MiB free after the partial write was removed"
    except OSError:
        free = "free space unknown"
    latest = latest_checkpoint(folder.parent) if _NAME.match(folder.name) else None
    kept = (f"the last complete checkpoint, {latest.name}, is intact" if latest is not None
            else "no complete checkpoint exists yet")
    return (f"no space left on {folder.parent} ({free}): {folder.name} was not saved, and nothing of it is left "
            f"behind; {kept}. Fix: free space there, or move the run folder to a disk with room, then continue "
            f"with {resume_latest()}.")


def save_checkpoint(folder: str | Path, *, model, tokenizer, optimizer, scheduler, trainer_state: dict,
                    rollout: dict | None, value_head=None, history: list[dict] | None = None,
                    save_total_limit: int | None = None) -> Path:
    """Write a checkpoint atomically (``atomic_folder``); keep the newest ``save_total_limit``."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(folder.parent)
    with atomic_folder(folder) as tmp:
        model.save_pretrained(tmp / "model", safe_serialization=True)
        make_adapter_portable(tmp / "model")  # LoRA on an embedded model: its name, not this machine's path
        tokenizer.save_pretrained(tmp / "model")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        save_rng(tmp, rng_state())
        save_rollout(tmp, rollout)
        if value_head is not None:
            torch.save(value_head.state_dict(), tmp / "value_head.pt")
        (tmp / "history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in history or []))
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2))
    if save_total_limit is not None and save_total_limit > 0:
        for stale in list_checkpoints(folder.parent)[:-save_total_limit]:
            if stale != folder:
                _discard(stale)
    return folder


def _discard(folder: Path) -> None:
    """Delete a checkpoint without ever leaving a half-deleted ``checkpoint-<step>``: hide it
    with a rename first (atomic), then delete the hidden folder."""
    hidden = folder.parent / f".{folder.name}.old-{os.getpid()}"
    shutil.rmtree(hidden, ignore_errors=True)
    os.replace(folder, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def _remove_leftovers(output_dir: Path) -> None:
    """Delete temporary folders of saves that were killed before their rename."""
    for pattern in (".checkpoint-*.tmp-*", ".checkpoint-*.old-*", ".final.tmp-*", ".final.old-*"):
        for leftover in output_dir.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """``checkpoint-<step>`` folders of ``output_dir``, oldest step first (hidden temporaries excluded)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if p.is_dir() and (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def checkpoint_problem(folder: str | Path) -> str | None:
    """None when ``folder`` looks resumable, else what is wrong with it (no tensors are loaded)."""
    folder = Path(folder)
    if not folder.is_dir():
        return "it does not exist" if not folder.exists() else "it is not a folder"
    missing = [name for name in REQUIRED_FILES if not (folder / name).exists()]
    if missing and (folder / "rng.pt").exists():
        return ("it was written by an older version that stored RNG and rollout state as pickles (rng.pt, "
                "rollout.pt), which are no longer read because a pickle can run code")
    if missing:
        return f"it lacks {', '.join(missing)}"
    try:
        state = json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError) as error:
        return f"trainer_state.json does not parse ({error})"
    if not isinstance(state, dict) or not {"step", "algo", "sampler"} <= set(state):
        return "trainer_state.json lacks the step, algo or sampler entries"
    return trainer_state_problem(state)


_COUNTERS = ("step", "micro_step", "cycle", "tokens_seen", "batch_position")
_SAMPLER_KEYS = ("epoch", "position")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def trainer_state_problem(state: dict) -> str | None:
    """What is wrong with the counters and sampler state of a ``trainer_state.json``, or None.

    Counters are whole numbers >= 0 (``step=-7`` would train from step -6, ``step='2'``
    would fail deep in the loop); the sampler state holds only ``epoch`` and ``position``.
    """
    for key in _COUNTERS:
        if key in state and not _is_count(state[key]):
            return f"trainer_state.json has {key}={state[key]!r}, which is not a whole number >= 0"
    sampler = state.get("sampler")
    if not isinstance(sampler, dict):
        return f"trainer_state.json has sampler={sampler!r}, which is not an object"
    unknown = sorted(set(sampler) - set(_SAMPLER_KEYS))
    if unknown:
        return f"trainer_state.json's sampler holds unknown keys {unknown} (known: {', '.join(_SAMPLER_KEYS)})"
    bad = [k for k in _SAMPLER_KEYS if k in sampler and not _is_count(sampler[k])]
    if bad:
        return f"trainer_state.json's sampler has {bad[0]}={sampler[bad[0]]!r}, which is not a whole number >= 0"
    return None


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint in ``output_dir``, or None."""
    for folder in reversed(list_checkpoints(output_dir)):
        if checkpoint_problem(folder) is None:
            return folder
    return None


def resolve_resume(resume_from: str | Path, output_dir: str | Path) -> Path:
    """The folder to resume from: ``"latest"`` (newest complete checkpoint) or a checkpoint path.

    Raises:
        CheckpointError: nothing to resume, or a damaged folder; the message names the fix.
    """
    if str(resume_from) == "latest":
        folder = latest_checkpoint(output_dir)
        if folder is None:
            raise CheckpointError(f"{resume_latest()}: no complete checkpoint-<step> folder in {output_dir}. "
                                  f"Fix: check {fix('--output-dir', 'output_dir')}, or start without "
                                  f"{fix('--resume-from', 'resume_from')}.")
        return folder
    folder = Path(resume_from)
    problem = checkpoint_problem(folder)
    if problem is not None:
        newest = latest_checkpoint(folder.parent) if folder.parent.is_dir() else None
        remedy = (f"resume from {newest} ({resume_latest()} picks it)" if newest is not None and newest != folder
                  else "pass a complete <output_dir>/checkpoint-<step> folder, or start without "
                  f"{fix('--resume-from', 'resume_from')}")
        raise CheckpointError(f"cannot resume from {folder}: {problem}. Fix: {remedy}; delete the damaged folder "
                              "if it is a leftover.")
    return folder


def load_trainer_state(folder: str | Path) -> dict:
    folder = Path(folder)
    problem = checkpoint_problem(folder)
    if problem is not None:
        raise CheckpointError(f"cannot resume from {folder}: {problem}. Fix: pass a complete "
                              f"<output_dir>/checkpoint-<step> folder, or {resume_latest()}.")
    return json.loads((folder / "trainer_state.json").read_text())


# Ctrl-C, SIGTERM and SIGHUP all save and stop: one implementation, in ``course_lib.run.signals``.
StopOnInterrupt = StopOnSignals


def restore_weights(folder: str | Path, model, value_head=None) -> None:
    """Load the checkpoint's weights into ``model`` (full model or LoRA adapters) in place.

    Weights holding NaN or infinity are a ``CheckpointError`` (``check_finite_state``)."""
    from ..models import is_peft_model

    def load_file(path: Path) -> dict:
        return _read_state(Path(folder), read_tensors, path)

    model_dir = Path(folder) / "model"
    if is_peft_model(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(model_dir / "adapter_model.safetensors"))
    else:
        state = {}
        for shard in sorted(model_dir.glob("*.safetensors")):
            state.update(load_file(shard))
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as error:  # a tensor of another shape: another model's weights
            first = str(error).strip().splitlines()[-1].strip()[:300]
            raise CheckpointError(f"cannot resume from {folder}: its model weights do not fit this model ({first}). "
                                  f"Fix: resume with the {fix('--model', 'model')} the checkpoint was trained "
                                  "from.") from None
        # Tied embeddings are saved once; anything else missing means a different model.
        missing = [k for k in missing if "lm_head" not in k]
        if missing or unexpected:
            raise ValueError(f"checkpoint {folder} does not match the model: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")
    if value_head is not None:
        value_head.load_state_dict(_read_state(Path(folder), load_tensor_state, Path(folder) / "value_head.pt"))
    check_finite_state(folder, model.named_parameters(), "model weights")
    if value_head is not None:
        check_finite_state(folder, value_head.named_parameters(), "value head weights (value_head.pt)")


def _read_state(folder: Path, reader, *args):
    """Call a ``state_io`` reader; a damaged or hostile file becomes a ``CheckpointError``."""
    try:
        return reader(*args)
    except StateFileError as error:
        raise CheckpointError(f"cannot resume from {folder}: {error}. Fix: resume from another checkpoint "
                              f"({resume_latest()} picks the newest complete one); never resume from a "
                              "checkpoint you did not write yourself.") from None


def restore_training_state(folder: str | Path, optimizer, scheduler) -> dict | None:
    """Load optimizer, scheduler and RNG states; return the saved rollout buffer (or None).

    Everything is read before anything is applied, so a damaged file leaves the trainer as it was.
    An optimizer state holding NaN or infinity is a ``CheckpointError``.
    """
    folder = Path(folder)
    optimizer_state = _read_state(folder, load_tensor_state, folder / "optimizer.pt")
    scheduler_state = _read_state(folder, load_tensor_state, folder / "scheduler.pt")
    rng = _read_state(folder, load_rng, folder)
    rollout = _read_state(folder, load_rollout, folder)
    check_finite_state(folder, ((f"{key} of parameter {index}", value) for index, entries in
                                optimizer_state.get("state", {}).items() for key, value in entries.items()),
                       "optimizer state (optimizer.pt)")
    optimizer.load_state_dict(optimizer_state)
    scheduler.load_state_dict(scheduler_state)
    set_rng_state(rng)
    return rollout


def check_finite_state(folder: str | Path, named_tensors, where: str) -> None:
    """Raise ``CheckpointError`` when tensors read from checkpoint ``folder`` hold NaN or infinity.

    Args:
        named_tensors: ``(name, tensor)`` pairs (a module's ``named_parameters()``, an
            optimizer state's entries); ``where``: what they are, for the message.
    """
    bad = first_non_finite(named_tensors)
    if bad is not None:
        raise CheckpointError(f"cannot resume from {folder}: its {where} hold NaN or infinity (first: {bad}); "
                              "training from them would spread NaN to every weight. Fix: resume from an earlier "
                              "checkpoint (one saved before the values diverged).")
