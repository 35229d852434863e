"""One run per output folder, and a resumed run that is the run it claims to continue.

Two ways a training run used to lose or blur work, both refused here:

- **a reused folder**: starting again into a folder that holds an earlier run rewrote its
  ``history.jsonl`` and left its ``checkpoint-<step>`` folders beside the new ones, so a
  later ``--resume-from latest`` could pick the *old* run. :func:`claim_output_dir`
  refuses a non-empty folder unless the run says what to do with it: resume the run that
  lives there (``resume_from``), or replace it (``overwrite_output_dir=True``, which
  deletes that run's files and nothing else). It also holds an exclusive lock on the
  folder for the whole run, so two runs started at once cannot both write there; the
  operating system drops the lock when a process dies, so a killed run never blocks the
  next one.
- **a changed config on resume**: a checkpoint resumes exactly only under the config that
  wrote it. :func:`check_resume_config` compares the saved config with the new one and
  refuses a changed field unless it is in :data:`RESUME_SAFE_FIELDS` (how long to run,
  where and how often to log and save, how much memory the sampler takes), listing both
  kinds in the message.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import warnings
from pathlib import Path
from typing import Callable, Iterator

from .checkpoint import latest_checkpoint

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the emptiness check still applies
    fcntl = None

__all__ = ["RESUME_SAFE_FIELDS", "OutputDirError", "ResumeConfigWarning", "check_resume_config", "claim_output_dir"]

LOCK_NAME = ".lock"

#: Config fields that may differ between a checkpoint and the run resuming it, and why.
RESUME_SAFE_FIELDS = {
    "max_steps": "run length",
    "num_train_epochs": "run length",
    "output_dir": "where new files go",
    "overwrite_output_dir": "what to do with the output folder",
    "logging_steps": "logging",
    "log_completions": "logging",
    "num_completions_to_print": "logging",
    "report_to": "logging",
    "save_steps": "checkpointing",
    "save_total_limit": "checkpointing",
    "gradient_checkpointing": "memory (recomputes the same values)",
    "vllm_gpu_memory_utilization": "sampler memory",
    "vllm_kv_cache_gib": "sampler memory",
}
_RUN_LENGTH = ("max_steps", "num_train_epochs")


class OutputDirError(ValueError):
    """The output folder holds another run, or another process is writing to it."""


class ResumeConfigWarning(UserWarning):
    """A resumed run changed a field that is safe to change; the message says what it does."""


def _jsonable(value):
    return json.loads(json.dumps(value))


def check_resume_config(saved: dict | None, current: dict, folder: str | Path) -> dict[str, tuple]:
    """Compare the config saved in a checkpoint with the config of the run resuming it.

    Args:
        saved: ``trainer_state.json``'s ``config`` entry (``RLConfig.to_dict()`` at save time).
        current: ``RLConfig.to_dict()`` of the resuming run.
    Returns:
        ``{field: (saved value, new value)}`` for the changed safe fields. A changed run
        length under a decaying schedule also emits a :class:`ResumeConfigWarning`. Fields
        present on one side only (a checkpoint of an older version) are not compared.
    Raises:
        ValueError: a changed field outside :data:`RESUME_SAFE_FIELDS`; the message lists
            each with both values, and the fields that may change.
    """
    if not saved:
        return {}
    current = _jsonable(current)
    changed = {k: (saved[k], current[k]) for k in saved.keys() & current.keys()
               if k != "algo" and saved[k] != current[k]}
    refused = {k: v for k, v in changed.items() if k not in RESUME_SAFE_FIELDS}
    if refused:
        listing = "; ".join(f"{k}: {old!r} in the checkpoint, {new!r} now" for k, (old, new) in sorted(refused.items()))
        raise ValueError(f"cannot resume from {folder} with a changed config ({listing}): the optimizer state, "
                         "the data order and the samples in flight were made under the saved values, so the run "
                         "would no longer be the run it continues. Fix: resume with the checkpoint's values (the "
                         "--set options of the command that wrote it), or start a new run in another --output-dir. "
                         f"Fields that may change on resume: {', '.join(RESUME_SAFE_FIELDS)}.")
    allowed = {k: v for k, v in changed.items() if k in RESUME_SAFE_FIELDS}
    length = {k: v for k, v in allowed.items() if k in _RUN_LENGTH}
    if length and current.get("lr_scheduler_type") != "constant":
        notes = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in sorted(length.items()))
        warnings.warn(f"resuming from {folder} with {notes}: the {current.get('lr_scheduler_type')} learning-rate "
                      "schedule is recomputed for the new length, so the rate changes from the resumed step on "
                      "(lr_scheduler_type='constant' keeps it).", ResumeConfigWarning, stacklevel=3)
    return allowed


def _entries(output_dir: Path) -> list[str]:
    return sorted(p.name for p in output_dir.iterdir() if p.name != LOCK_NAME) if output_dir.is_dir() else []


def _is_run_file(name: str) -> bool:
    """Files and folders a training run writes in its output folder."""
    return (name in ("history.jsonl", "final", "tensorboard", "wandb")
            or name.startswith(("checkpoint-", ".checkpoint-", ".final.")))


@contextlib.contextmanager
def claim_output_dir(output_dir: str | Path, *, resume_folder: str | Path | None = None, overwrite: bool = False,
                     main: bool = True, agree: Callable[[float], float] | None = None) -> Iterator[Path]:
    """Lock ``output_dir`` for one run and make sure the run may write there.

    Allowed: a missing or empty folder; the folder of the checkpoint being resumed
    (``resume_folder``'s parent: the run continues there); anything with ``overwrite``,
    which first deletes the earlier run's files (history, checkpoints, ``final/``, logs)
    and leaves other files alone.

    A run of several processes: only the main process (``main=True``) checks, locks and
    deletes; ``agree`` (a sum over processes, e.g. ``Shards.sum``) then tells every process
    whether it refused, so that all of them stop together instead of waiting for it.

    Raises:
        OutputDirError: the folder holds something else, or another process holds the lock.
    """
    output_dir = Path(output_dir)
    handle, refusal = None, None
    try:
        if main:
            try:
                handle = _lock_and_check(output_dir, resume_folder, overwrite)
            except OutputDirError as error:
                refusal = error
        if agree is not None and agree(float(refusal is not None)) > 0 and refusal is None:
            refusal = OutputDirError(f"the main process refused output_dir={str(output_dir)!r} (its message says "
                                     "why). Fix: see the main process's error.")
        if refusal is not None:
            raise refusal
        yield output_dir
    finally:
        if handle is not None:
            handle.close()  # releases the lock


def _lock_and_check(output_dir: Path, resume_folder: str | Path | None, overwrite: bool):
    """The lock file's open handle, locked, once the folder may be written; else ``OutputDirError``."""
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputDirError(f"output_dir={str(output_dir)!r} is a file, not a folder. Fix: pass a folder path.")
    output_dir.mkdir(parents=True, exist_ok=True)
    handle = open(output_dir / LOCK_NAME, "a+")
    try:
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise OutputDirError(f"output_dir={str(output_dir)!r} is in use by another training run (it holds "
                                     f"{output_dir / LOCK_NAME}). Fix: wait for that run to end, or pick another "
                                     "--output-dir.") from None
        continuing = resume_folder is not None and Path(resume_folder).resolve().parent == output_dir.resolve()
        existing = _entries(output_dir)
        if existing and not continuing:
            if not overwrite:
                shown = ", ".join(existing[:5]) + (", ..." if len(existing) > 5 else "")
                resume = ("continue that run with --resume-from latest, " if latest_checkpoint(output_dir) is not None
                          else "(it holds no complete checkpoint to continue from) ")
                raise OutputDirError(
                    f"output_dir={str(output_dir)!r} is not empty (it holds {shown}); writing there would mix two "
                    f"runs and rewrite the earlier one's history.jsonl. Fix: {resume}replace it with "
                    "--overwrite-output-dir (overwrite_output_dir=True), or pick another --output-dir.")
            for name in existing:
                if _is_run_file(name):
                    path = output_dir / name
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    except BaseException:
        handle.close()
        raise
    return handle
