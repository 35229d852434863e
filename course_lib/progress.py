"""Progress for long waits: a bar where one can be drawn, periodic lines where it cannot.

A tqdm bar redraws one line with carriage returns. In a terminal or a notebook that is
what a reader wants; in a log file, a CI job or ``make demo | tee`` it becomes one very long
line that says nothing until the end. So ``progress_bar`` draws tqdm's bar (``tqdm.auto``,
the widget in Jupyter) when standard error is a terminal or a notebook kernel runs, and
otherwise prints a plain line every ``every_s`` seconds and one at the end:
``eval before: 40/200 (20%), 0:35 elapsed, about 2:20 left``.

``heartbeat`` is for one long call that cannot report its own progress (a model
conversion, an engine start-up): a line every ``every_s`` seconds while it runs, then how
long it took.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["progress_bar", "heartbeat", "draws_bars", "format_duration"]


def format_duration(seconds: float) -> str:
    """``75`` -> ``"1:15"``, ``3725`` -> ``"1:02:05"``."""
    seconds = int(round(max(seconds, 0)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def draws_bars() -> bool:
    """Whether a redrawn bar is visible: a notebook kernel, or standard error on a terminal."""
    if "ipykernel" in sys.modules:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _LineProgress:
    """The part of tqdm's interface the course uses, printed as periodic plain lines."""

    def __init__(self, total: int, desc: str, every_s: float, file):
        self.total, self.desc, self.every_s, self.file = total, desc, every_s, file
        self.n = 0
        self.start = self.last_print = time.monotonic()
        self.closed = False

    def _line(self) -> str:
        elapsed = time.monotonic() - self.start
        text = f"{self.desc}: {self.n}/{self.total}"
        if self.total:
            text += f" ({100 * self.n / self.total:.0f}%)"
        text += f", {format_duration(elapsed)} elapsed"
        if 0 < self.n < self.total:
            text += f", about {format_duration(elapsed / self.n * (self.total - self.n))} left"
        return text

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last_print >= self.every_s and self.n < self.total:
            self.last_print = now
            print(self._line(), file=self.file, flush=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            print(self._line(), file=self.file, flush=True)

    def __enter__(self) -> "_LineProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(total: int, desc: str, *, unit: str = "it", every_s: float = 15.0, disable: bool = False,
                 file=None):
    """A tqdm bar, or periodic lines where a bar cannot be seen (see the module docstring).

    Use as ``with progress_bar(total=200, desc="eval") as bar: ... bar.update(n)``.
    ``disable=True`` returns a bar that prints nothing.
    """
    from tqdm.auto import tqdm

    if disable or draws_bars():
        return tqdm(total=total, desc=desc, unit=unit, disable=disable, dynamic_ncols=True)
    return _LineProgress(total, desc, every_s, file if file is not None else sys.stdout)


@contextmanager
def heartbeat(desc: str, *, every_s: float = 10.0, file=None) -> Iterator[None]:
    """Print ``desc`` now, ``desc: still running, 0:20`` every ``every_s`` seconds, and the time it took."""
    out = file if file is not None else sys.stdout
    start = time.monotonic()
    stop = threading.Event()
    print(f"{desc} ...", file=out, flush=True)

    def beat() -> None:
        while not stop.wait(every_s):
            print(f"{desc}: still running, {format_duration(time.monotonic() - start)}", file=out, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    print(f"{desc}: done in {format_duration(time.monotonic() - start)}", file=out, flush=True)
