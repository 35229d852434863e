"""Checks shared by the notebooks (instant feedback) and pytest (grading).

Each lesson's checks live in ``course_lib/checks/exNN.py`` as functions
``check_<exercise>(fn)`` that raise ``AssertionError`` with a hint at the likely mistake.
Tests call them directly; notebook cells call :func:`feedback`, which prints the verdict
instead of raising, so a notebook always runs top to bottom.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import torch


class Hint(AssertionError):
    """A failed check with a diagnosis of the likely mistake."""


def assert_close(actual, expected, *, name: str, atol: float = 1e-5, rtol: float = 1e-5,
                 hints: dict[str, Any] | None = None) -> None:
    """Compare ``actual`` with ``expected``; on mismatch, name the first matching hint.

    ``hints`` maps a message to a wrong value a typical mistake produces; when ``actual``
    equals one of them, that message is the diagnosis.
    """
    actual_t = torch.as_tensor(actual, dtype=torch.float64)
    expected_t = torch.as_tensor(expected, dtype=torch.float64)
    if actual_t.shape != expected_t.shape:
        raise Hint(f"{name}: expected shape {tuple(expected_t.shape)}, got {tuple(actual_t.shape)}.")
    if torch.allclose(actual_t, expected_t, atol=atol, rtol=rtol, equal_nan=True):
        return
    for message, wrong in (hints or {}).items():
        wrong_t = torch.as_tensor(wrong, dtype=torch.float64)
        if wrong_t.shape == actual_t.shape and torch.allclose(actual_t, wrong_t, atol=atol, rtol=rtol, equal_nan=True):
            raise Hint(f"{name}: {message}")
    raise Hint(f"{name}: expected\n{expected_t}\ngot\n{actual_t}")


def feedback(check: Callable[[Callable], None], fn: Callable) -> bool:
    """Run a check in a notebook and print the verdict; returns True when it passes."""
    label = getattr(fn, "__name__", "your function")
    try:
        check(fn)
    except NotImplementedError:
        print(f"[todo] {label}: not implemented yet. Edit the exercise file and re-run this cell.")
        return False
    except AssertionError as error:
        print(f"[fail] {label}: {error}")
        return False
    except Exception:  # the learner's code crashed: show where
        print(f"[error] {label} raised:\n{traceback.format_exc(limit=-2)}")
        return False
    print(f"[pass] {label}: all checks passed.")
    return True
