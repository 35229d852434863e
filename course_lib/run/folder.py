"""One run per output folder, and a resumed run that is the run it claims to continue.

Two ways a training run used to lose or blur work, both refused here:

- **a reused folder**: starting again into a folder that holds an earlier run rewrote its
  ``history.jsonl`` and left its ``checkpoint-<step>`` folders beside the new ones, so a
  later ``--resume-from latest`` could pick the *old* run. :func:`claim_output_dir`
  refuses a non-empty folder unless the run says what to do with it: resume the run that
  lives there (``resume_from``), or replace it (``overwrite_output_dir=True``, which
  deletes the files that run wrote and nothing else: its ``wandb/`` or ``tensorboard/``
  logs only when its config reported there). It also holds an exclusive lock on the
  folder for the whole run, so two runs started at once cannot both write there; the
  operating system drops the lock when a process dies, and a lock whose run is dead but
  whose file is still held (a process forked by the run outlived it) is recognised as
  stale from the owner recorded in it and taken over, so a killed run never blocks the
  next one. Nothing in a run folder is followed through a symbolic link: a link in place
  of ``history.jsonl``, ``.lock`` or a checkpoint is refused (and removed with
  ``overwrite``), so a run never writes outside its folder.
- **an abandoned branch**: resuming from ``checkpoint-2`` in a folder that also holds
  ``checkpoint-3`` to ``-5`` starts a new branch at step 2; the later checkpoints (and
  ``final/``) belong to the abandoned one and are deleted, with a warning, so that
  ``--resume-from latest`` never picks them later.
- **a changed config on resume**: a checkpoint resumes exactly only under the config that
  wrote it. :func:`check_resume_config` compares the saved config with the new one and
  refuses a changed field unless it is in :data:`RESUME_SAFE_FIELDS` (how long to run,
  where and how often to log and save, how much memory the sampler takes), listing both
  kinds in the message; a checkpoint without a config is refused. :func:`check_resume_run`
  does the same for what the config does not hold: the training rows (their number and a
  fingerprint of their content) and the reward functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import warnings
from pathlib import Path
from typing import Callable, Iterator

from .checkpoint import list_checkpoints, latest_checkpoint
from ..common.wording import fix, resume_latest

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the emptiness check still applies
    fcntl = None

__all__ = ["RESUME_SAFE_FIELDS", "AbandonedBranchWarning", "OutputDirError", "ResumeConfigWarning",
           "check_resume_config", "check_resume_run", "claim_output_dir", "run_identity"]

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
    "doctor": "logging",
    "save_steps": "checkpointing",
    "save_total_limit": "checkpointing",
    "gradient_checkpointing": "memory (recomputes the same values)",
    "vllm_gpu_memory_utilization": "sampler memory",
    "vllm_kv_cache_gib": "sampler memory",
    "reward_timeout_s": "how long a reward function may take (a run that ends has the same rewards)",
    "async_generation": "where the samples are drawn (the same prompts and seeds; batches in flight are redrawn)",
    "max_staleness": "how old the sampling weights may be (batches in flight are redrawn on resume)",
    "weight_sync_steps": "which weight versions reach the generation worker",
    "async_old_logps": "how stale samples are corrected (the sampler's log-probs or the trainer's recomputed ones)",
    "async_batch_timeout_s": "how long the trainer waits for a batch from the generation worker",
}
_RUN_LENGTH = ("max_steps", "num_train_epochs")


class OutputDirError(ValueError):
    """The output folder holds another run, or another process is writing to it."""


class ResumeConfigWarning(UserWarning):
    """A resumed run changed a field that is safe to change; the message says what it does."""


class AbandonedBranchWarning(UserWarning):
    """Resuming from an earlier checkpoint deleted the later ones (and ``final/``) of the abandoned branch."""


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
        raise ValueError(f"cannot resume from {folder}: its trainer_state.json holds no config, so nothing says the "
                         "run would continue under the settings that wrote it. Fix: resume from a checkpoint this "
                         "library wrote (its trainer_state.json has a 'config' entry), or start a new run.")
    current = _jsonable(current)
    changed = {k: (saved[k], current[k]) for k in saved.keys() & current.keys()
               if k != "algo" and saved[k] != current[k]}
    refused = {k: v for k, v in changed.items() if k not in RESUME_SAFE_FIELDS}
    if refused:
        listing = "; ".join(f"{k}: {old!r} in the checkpoint, {new!r} now" for k, (old, new) in sorted(refused.items()))
        raise ValueError(f"cannot resume from {folder} with a changed config ({listing}): the optimizer state, "
                         "the data order and the samples in flight were made under the saved values, so the run "
                         "would no longer be the run it continues. Fix: resume with the checkpoint's values (the "
                         f"{fix('--set options', 'config values')} of the run that wrote it), or start a new run in another "
                         f"{fix('--output-dir', 'output_dir')}. "
                         f"Fields that may change on resume: {', '.join(RESUME_SAFE_FIELDS)}.")
    allowed = {k: v for k, v in changed.items() if k in RESUME_SAFE_FIELDS}
    length = {k: v for k, v in allowed.items() if k in _RUN_LENGTH}
    if length and current.get("lr_scheduler_type") != "constant":
        notes = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in sorted(length.items()))
        warnings.warn(f"resuming from {folder} with {notes}: the {current.get('lr_scheduler_type')} learning-rate "
                      "schedule is recomputed for the new length, so the rate changes from the resumed step on "
                      "(lr_scheduler_type='constant' keeps it).", ResumeConfigWarning, stacklevel=3)
    return allowed


def run_identity(dataset_columns: dict[str, list], reward_names: list[str]) -> dict:
    """What a checkpoint must match besides its config: the training rows and the reward functions.

    ``{"train_rows": N, "train_fingerprint": sha256 of the rows' content, "rewards": [names]}``;
    saved in ``trainer_state.json`` and compared by :func:`check_resume_run`.
    """
    digest = hashlib.sha256()
    for name in sorted(dataset_columns):
        digest.update(json.dumps([name, dataset_columns[name]], sort_keys=True, default=repr).encode())
    rows = len(next(iter(dataset_columns.values()))) if dataset_columns else 0
    return {"train_rows": rows, "train_fingerprint": digest.hexdigest(), "rewards": list(reward_names)}


def check_resume_run(saved: dict | None, current: dict, folder: str | Path) -> None:
    """Refuse to resume on other training rows or other reward functions than the checkpoint's.

    ``saved`` and ``current`` are :func:`run_identity` dicts. The prompt sampler's state is
    a position in the saved rows: on other rows (another ``--task``, ``--train-rows``) it
    would index other data, and other rewards (``--rewards``) would change what is learned.
    """
    if not saved:
        raise ValueError(f"cannot resume from {folder}: its trainer_state.json does not record the training rows "
                         "and reward functions it was trained with, so a resume on other data could not be "
                         "detected. Fix: start a new run (this checkpoint was written by an older version).")
    problems = []
    if saved.get("train_rows") != current["train_rows"]:
        problems.append(f"{saved.get('train_rows')} training rows in the checkpoint, {current['train_rows']} now "
                        f"({fix('--train-rows', 'train_dataset')})")
    elif saved.get("train_fingerprint") != current["train_fingerprint"]:
        problems.append(f"the training rows differ in content ({fix('--task, or the data file', 'train_dataset')})")
    if saved.get("rewards") != current["rewards"]:
        problems.append(f"reward functions {saved.get('rewards')} in the checkpoint, {current['rewards']} now "
                        f"({fix('--rewards', 'reward_funcs')})")
    if problems:
        same = fix("--task, --train-rows and --rewards of the command", "train_dataset and reward_funcs of the run")
        raise ValueError(f"cannot resume from {folder}: {'; '.join(problems)}. The sampler's position and the "
                         f"learned policy belong to the saved data and rewards. Fix: resume with the {same} "
                         f"that wrote it, or start a new run in another {fix('--output-dir', 'output_dir')}.")


def _entries(output_dir: Path) -> list[str]:
    return sorted(p.name for p in output_dir.iterdir() if p.name != LOCK_NAME) if output_dir.is_dir() else []


def _is_run_file(name: str, logs: tuple[str, ...] = ()) -> bool:
    """Files and folders a training run writes in its output folder; ``logs``: the log folders
    (``wandb``, ``tensorboard``) the earlier run's config reported to."""
    return (name in ("history.jsonl", "final", LOCK_NAME, *logs)
            or name.startswith(("checkpoint-", ".checkpoint-", ".final.")))


def _earlier_logs(output_dir: Path) -> tuple[str, ...]:
    """The log folders the run in ``output_dir`` wrote, read from its checkpoints' saved config."""
    for folder in reversed(list_checkpoints(output_dir)):
        try:
            config = json.loads((folder / "trainer_state.json").read_text()).get("config") or {}
        except (OSError, ValueError, AttributeError):
            continue
        report_to = config.get("report_to")
        return (report_to,) if report_to in ("wandb", "tensorboard") else ()
    return ()


def _symlinks(output_dir: Path) -> list[str]:
    return sorted(p.name for p in output_dir.iterdir()
                  if p.is_symlink() and _is_run_file(p.name, ("wandb", "tensorboard")))


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
    text = str(output_dir)
    shown = text if len(text) <= 120 else f"{text[:120]}... ({len(text)} characters)"
    if "\0" in str(output_dir):
        raise OutputDirError(f"output_dir={shown!r} holds a NUL character, which no path may hold. Fix: pass a "
                             "plain folder path.")
    try:
        if output_dir.exists() and not output_dir.is_dir():
            raise OutputDirError(f"output_dir={shown!r} is a file, not a folder. Fix: pass a folder path.")
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputDirError(f"cannot create output_dir={shown!r}: {error.strerror}. Fix: pass a shorter path "
                             "(at most 255 characters per folder name) in a folder you may write to.") from None
    links = _symlinks(output_dir)
    if links and not overwrite:
        raise OutputDirError(f"output_dir={str(output_dir)!r} holds symbolic links where a run writes its files "
                             f"({', '.join(links)}); writing through them would change files outside the folder. "
                             "Fix: replace each link by the file itself (or delete it), or pass "
                             f"{fix('--overwrite-output-dir', 'overwrite_output_dir=True')} to start a new run "
                             "there.")
    for name in links:  # overwrite: the link goes, never what it points to
        (output_dir / name).unlink()
    handle = _take_lock(output_dir)
    try:
        continuing = resume_folder is not None and Path(resume_folder).resolve().parent == output_dir.resolve()
        if continuing:
            _prune_abandoned_branch(output_dir, Path(resume_folder))
        existing = _entries(output_dir)
        if existing == ["history.jsonl"] and not continuing and _holds_no_step(output_dir / "history.jsonl"):
            # A run that stopped before its first step (a reward that raised, a bad prompt) left an
            # empty history and nothing else: there is no run to protect, so the folder is free.
            (output_dir / "history.jsonl").unlink()
            existing = []
        if existing and not continuing:
            if not overwrite:
                shown = ", ".join(existing[:5]) + (", ..." if len(existing) > 5 else "")
                resume = (f"continue that run with {resume_latest()}, " if latest_checkpoint(output_dir) is not None
                          else "(it holds no complete checkpoint to continue from) ")
                raise OutputDirError(
                    f"output_dir={str(output_dir)!r} is not empty (it holds {shown}); writing there would mix two "
                    f"runs and rewrite the earlier one's history.jsonl. Fix: {resume}replace it with "
                    f"{fix('--overwrite-output-dir', 'overwrite_output_dir=True')}, or pick another "
                    f"{fix('--output-dir', 'output_dir')}.")
            logs = _earlier_logs(output_dir)
            for name in existing:
                if _is_run_file(name, logs):
                    path = output_dir / name
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    except BaseException:
        handle.close()
        raise
    return handle


def _holds_no_step(history: Path) -> bool:
    """True for a plain ``history.jsonl`` without a single logged row."""
    try:
        return history.is_file() and not history.is_symlink() and not history.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False


def _prune_abandoned_branch(output_dir: Path, resume_folder: Path) -> None:
    """Delete the checkpoints after ``resume_folder`` (and ``final/``): the branch the resume abandons."""
    from .checkpoint import _NAME, _discard

    match = _NAME.match(resume_folder.name)
    if match is None:
        return
    step = int(match.group(1))
    later = [c for c in list_checkpoints(output_dir) if int(_NAME.match(c.name).group(1)) > step]
    final = output_dir / "final"
    if (later or _last_logged_step(output_dir) > step) and final.is_dir() and not final.is_symlink():
        later.append(final)  # written at a later step of the abandoned branch
    if not later:
        return
    for folder in later:
        _discard(folder)
    warnings.warn(f"resuming from {resume_folder.name} starts a new branch at step {step}: deleted "
                  f"{', '.join(f.name for f in later)} of the abandoned one, so that --resume-from latest never "
                  "picks them.", AbandonedBranchWarning, stacklevel=4)


def _last_logged_step(output_dir: Path) -> int:
    """The largest ``step`` in ``output_dir/history.jsonl`` (0 when there is none)."""
    from .history import load_history

    try:
        return max((row.get("step", 0) for row in load_history(output_dir / "history.jsonl")
                    if isinstance(row.get("step"), int)), default=0)
    except (OSError, ValueError):
        return 0


# ---------------------------------------------------------------------------------- the lock
def _open_lock_file(path: Path):
    """Open (create) the lock file without following a symbolic link (``O_NOFOLLOW``)."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        raise OutputDirError(f"cannot open the lock file {path} ({error.strerror}); it must be a plain file. Fix: "
                             "delete it.") from None
    return os.fdopen(fd, "r+")


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux ``/proc``), to tell it from a later process with its id."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_record() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _process_start(os.getpid())}


def _owner_is_dead(owner: dict) -> bool:
    """True when the recorded owner of a lock is known to be gone (same host, no such process)."""
    if (not isinstance(owner, dict) or owner.get("host") != socket.gethostname()
            or not isinstance(owner.get("pid"), int)):
        return False
    pid = owner["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    start = _process_start(pid)
    return start is not None and owner.get("start") is not None and start != owner["start"]  # the id was reused


def _read_owner(handle) -> dict | None:
    try:
        handle.seek(0)
        return json.loads(handle.read() or "null")
    except ValueError:
        return None


def _take_lock(output_dir: Path):
    """Lock ``output_dir/.lock`` and record this process as its owner; ``OutputDirError`` when a live run holds it.

    A lock can outlive its run: ``flock`` belongs to the open file, which a process forked
    by the run (a reward's worker pool, a sampler process) shares and may keep after the run
    is killed. When the owner recorded in the file is dead, the lock is stale: the file is
    replaced by a fresh one (the leftover process keeps a lock on the old, unlinked file).
    """
    path = output_dir / LOCK_NAME
    for _ in range(3):
        handle = _open_lock_file(path)
        if fcntl is None:
            return handle
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(handle)
            handle.close()
            if not _owner_is_dead(owner):
                known = isinstance(owner, dict) and "pid" in owner
                who = f" (process {owner['pid']} on {owner.get('host')})" if known else ""
                raise OutputDirError(f"output_dir={str(output_dir)!r} is in use by another training run{who}; it "
                                     f"holds {path}. Fix: wait for that run to end, or pick another "
                                     f"{fix('--output-dir', 'output_dir')}.") from None
            warnings.warn(f"{path} was held for run process {owner['pid']}, which is dead (a process it forked kept "
                          "the lock); the stale lock is replaced.", RuntimeWarning, stacklevel=4)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        if not _same_file(handle, path):  # replaced between open and flock by another starting run
            handle.close()
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(_owner_record()))
        handle.flush()
        return handle
    raise OutputDirError(f"could not lock {path}: other runs keep replacing it. Fix: start one run at a time "
                         f"in this {fix('--output-dir', 'output_dir')}.")


def _same_file(handle, path: Path) -> bool:
    try:
        return os.fstat(handle.fileno()).st_ino == os.stat(path, follow_symlinks=False).st_ino
    except FileNotFoundError:
        return False
