"""Stop a forked copy of a training run before it writes into the run's folder.

User code (a tool, a reward) may call ``os.fork()``; the child returns into the training loop
and, left alone, trains on as a second writer of ``history.jsonl`` and the checkpoints. The
history logger and the tool runner call :func:`leave_if_forked` with the run's own pid.
"""

from __future__ import annotations

import contextlib
import os
import sys


#: Exit status of a forked copy of a run that :func:`leave_if_forked` stops.
FORKED_COPY_EXIT = 70


def leave_if_forked(owner_pid: int, what: str) -> None:
    """End this process at once when it is not ``owner_pid``: a copy of the run made by ``os.fork()``
    in user code (a tool, a reward) that returned into the training loop.

    Such a copy would go on training and write into the same ``history.jsonl`` and checkpoints
    as the run itself. ``os._exit`` ends it without running the run's clean-up (which would
    release the run's lock and stop its workers).
    """
    pid = os.getpid()
    if pid == owner_pid:
        return
    with contextlib.suppress(Exception):
        sys.stderr.write(f"error: process {pid} is a copy of training run {owner_pid} made by os.fork() in {what}; "
                         f"it stops here instead of writing a second run into the same output folder. Fix: end "
                         "the forked child with os._exit() (or use subprocess), and give the tool a tool_timeout.\n")
        sys.stderr.flush()
    os._exit(FORKED_COPY_EXIT)
