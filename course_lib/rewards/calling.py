"""Calling a reward function so that it can neither hang the run nor change what the next one sees.

Two guards around every call that ``compute_rewards`` makes:

- **a time limit**: a reward function that never returns (a remote judge that does not
  answer, a loop on hostile model text) would stop training without a word. Past
  ``timeout_s`` seconds, :class:`RewardTimeout` names the function and the limit. In the
  main thread of a POSIX process (a script, a notebook) the call runs in place under a
  timer signal (``SIGALRM``) that interrupts it; a handoff to another thread would cost
  every call a few scheduling delays on a busy machine. Elsewhere (another thread, Windows,
  or when the program has its own ``SIGALRM`` handler or timer) the call runs on a daemon
  thread that the caller waits for; Python cannot stop a thread, so a stuck call there is
  abandoned, not killed: it ends with the process (a daemon thread never keeps the
  interpreter alive).
- **private copies**: every function gets its own deep copy of the prompts, completions
  and columns, so one that edits them in place (sorts ``answer``, strips a completion
  dict) cannot change the inputs of the functions after it, nor the trainer's data.
"""

from __future__ import annotations

import asyncio
import copy
import signal
import threading
from typing import Any, Callable

__all__ = ["DEFAULT_REWARD_TIMEOUT_S", "RewardTimeout", "call_with_timeout", "check_timeout", "in_thread",
           "private_copies"]

#: Seconds one call of a reward function on one batch may take (``RLConfig.reward_timeout_s``).
DEFAULT_REWARD_TIMEOUT_S = 600.0


class RewardTimeout(TimeoutError):
    """A reward function did not return within its time limit."""


def check_timeout(timeout_s: float | None, name: str = "reward_timeout_s") -> float | None:
    """``timeout_s`` if it is None (no limit) or a positive finite number of seconds, else ``ValueError``."""
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise ValueError(f"{name}={timeout_s!r} is not a time limit. Fix: give a positive number of seconds "
                         f"(default {DEFAULT_REWARD_TIMEOUT_S:g}), or None for no limit.")
    return float(timeout_s)


def call_with_timeout(function: Callable[..., Any], timeout_s: float | None, label: str, *args, **kwargs) -> Any:
    """``function(*args, **kwargs)``, or :class:`RewardTimeout` after ``timeout_s`` seconds.

    ``label`` names what was called in the message. Exceptions of the call are re-raised
    as they are. ``timeout_s=None`` calls in the current thread, without a limit.
    """
    if timeout_s is None:
        return function(*args, **kwargs)
    if _timer_signal_free():
        return _under_timer(lambda: function(*args, **kwargs), timeout_s, label)
    return _in_thread(lambda: function(*args, **kwargs), timeout_s, label)


class _Expired(BaseException):
    """Raised by the timer signal inside the call (a BaseException: ``except Exception`` lets it through)."""


def _timer_signal_free() -> bool:
    """Whether this thread may time a call with ``SIGALRM``: the main thread of a POSIX process whose
    program has neither a handler of its own for the signal nor a timer running."""
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


def _under_timer(call: Callable[[], Any], timeout_s: float, label: str) -> Any:
    """``call()`` in this thread, interrupted by ``SIGALRM`` after ``timeout_s`` seconds."""
    def expire(signum, frame):
        raise _Expired

    signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Expired:
        raise _timeout_error(label, timeout_s) from None
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _timeout_error(label: str, timeout_s: float) -> RewardTimeout:
    return RewardTimeout(f"{label} did not return within {timeout_s:g} s. Fix: make it faster or give it a "
                         "time limit of its own (a request timeout), or raise reward_timeout_s "
                         "(None removes the limit).")


def in_thread(call: Callable[[], Any], timeout_s: float | None, name: str | None = None,
              expired: Callable[[], BaseException] | None = None) -> Any:
    """``call()`` on a daemon thread, waited for at most ``timeout_s`` seconds (None: no limit).

    Past the limit it raises ``expired()`` (default: ``TimeoutError``); the call is abandoned,
    not killed (Python cannot stop a thread). What the call raises is re-raised here. The one
    implementation behind reward functions' and tools' time limits (``rollout/tools.py``).
    """
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error
        finally:
            finished.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not finished.wait(timeout_s):
        raise expired() if expired is not None else TimeoutError(f"timed out after {timeout_s} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _in_thread(call: Callable[[], Any], timeout_s: float | None, label: str) -> Any:
    return in_thread(call, timeout_s, label, lambda: _timeout_error(label, timeout_s))


def await_all(awaitables: list, timeout_s: float | None, label: str) -> list:
    """Run awaitables concurrently on a fresh event loop; each result, or the exception it raised.

    The loop runs on a worker thread, so this works from plain scripts and from a notebook
    (whose own loop already runs in the main thread); the whole batch shares ``timeout_s``.
    """
    async def gather():
        return await asyncio.gather(*awaitables, return_exceptions=True)

    return _in_thread(lambda: asyncio.run(gather()), timeout_s, label)


def private_copies(*values: Any) -> tuple:
    """A deep copy of each value (one set per reward function call)."""
    return copy.deepcopy(values)
