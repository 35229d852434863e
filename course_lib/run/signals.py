"""Stop signals: Ctrl-C, ``timeout``/``docker stop``/Slurm/Kubernetes (SIGTERM) and a closed terminal (SIGHUP).

A run that receives any of them saves a checkpoint at the next optimizer step, releases
its output folder and exits with the shell's convention, ``128 + signal number`` (130 for
SIGINT, 143 for SIGTERM, 129 for SIGHUP). Schedulers send SIGTERM and wait a grace period
before SIGKILL (``docker stop`` 10 s, Kubernetes 30 s, Slurm ``KillWait`` 30 s by default),
so a step must end within it for the save to land.

- :class:`StopOnSignals` is what the training loop holds: the first signal sets
  ``requested`` (and ``signum``); a second Ctrl-C raises ``KeyboardInterrupt`` at once, as
  usual, while a repeated SIGTERM or SIGHUP is ignored (Slurm sends one to every process
  of a job, and the sender escalates to SIGKILL after its grace period anyway).
- :func:`run_forwarding_signals` is what a launching command holds while its launcher
  (``torchrun``, ``accelerate launch``) runs the workers: each stop signal is passed on to
  the launcher, which passes it to every worker; the launcher has its own session, so a
  Ctrl-C at the terminal reaches the workers once, through this path, not twice.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from typing import Sequence

#: The signals that mean "save and stop" (SIGHUP does not exist on Windows).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def exit_code(signum: int) -> int:
    """The shell's exit status of a process stopped by ``signum``: ``128 + signum``."""
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopOnSignals:
    """Ask the training loop to save and stop at the next optimizer step on SIGINT, SIGTERM or SIGHUP.

    ``with StopOnSignals() as stop: ... if stop.requested: save; break``; ``stop.signum`` is
    the first signal received. Outside the main thread (where Python cannot install signal
    handlers) it does nothing and ``requested`` stays False.
    """

    def __init__(self, signals: Sequence[int] = STOP_SIGNALS) -> None:
        self.signals = tuple(signals)
        self.requested = False
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handler(self, signum, frame) -> None:
        if self.requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return  # a repeated SIGTERM / SIGHUP: already stopping
        self.requested, self.signum = True, signum

    def __enter__(self) -> "StopOnSignals":
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    @property
    def exit_code(self) -> int | None:
        """``128 + signum`` once a signal arrived, else None."""
        return None if self.signum is None else exit_code(self.signum)


def run_forwarding_signals(command: Sequence[str], **popen_kwargs) -> int:
    """Run ``command`` (a launcher) to its end, passing SIGINT, SIGTERM and SIGHUP on to it.

    Returns the launcher's exit status, or ``128 + signum`` of the first stop signal
    received (the launcher's own status after a stop is its shutdown's, not the run's).
    """
    process = subprocess.Popen(list(command), start_new_session=True, **popen_kwargs)
    received: list[int] = []

    def forward(signum, frame) -> None:
        received.append(signum)
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
    try:
        while True:
            try:
                code = process.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries wait() itself
                continue
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return exit_code(received[0]) if received else code
