"""Processes of a multi-process run die with the command that launched them.

``train --num-processes N`` starts a launcher (torch's ``torch.distributed.run`` on CPUs,
``accelerate launch`` on GPUs), which starts the N workers. A ``kill -9`` of the command
or of the launcher cannot be handled by the process that receives it, and used to leave
the workers training (writing checkpoints) and holding the output folder's lock. Linux's
parent-death signal (``prctl(PR_SET_PDEATHSIG)``) closes that gap from the child's side:

- the launcher gets ``SIGTERM`` when the command dies (it forwards it to its workers and
  exits, as it does for any ``SIGTERM``);
- each worker gets ``SIGKILL`` when its launcher dies (nothing is left to coordinate a
  clean stop with; checkpoints are written atomically, so a kill never damages one).

Elsewhere (macOS, Windows) ``prctl`` does not exist and these calls do nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["die_with_parent", "launcher_preexec"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, expected_parent: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only).

    If the parent is already gone (``expected_parent`` given and no longer the parent),
    the signal is sent at once: the request would otherwise never fire. Returns whether
    the request was made.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if expected_parent is not None and os.getppid() != expected_parent:
        os.kill(os.getpid(), sig)
    return True


def launcher_preexec(parent: int):
    """A ``preexec_fn`` for ``subprocess.Popen``: the launcher gets ``SIGTERM`` when ``parent`` dies."""

    def preexec() -> None:
        die_with_parent(signal.SIGTERM, expected_parent=parent)

    return preexec
