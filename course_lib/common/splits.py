"""Held-out splits of rows that come as one set: a pure function of each row's text.

A row is a test row when the first four bytes of the SHA-256 of its key (a GSM8K question, a
task's prompt), read as a fraction of 2**32, fall below the test fraction. The split is the
same on every run and machine, and the two sides never share a key. GSM8K's single file
(``course_lib.data``) and a task file of your own (``course_lib.common.user_tasks``) both use it.
"""

from __future__ import annotations

import hashlib


class SplitNotice(UserWarning):
    """One set of rows was split into train and test by :func:`is_test_problem` (or a pair shares rows)."""


def is_test_problem(key: str, test_fraction: float) -> bool:
    """A problem's split is a pure function of its text, so train and test never overlap."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < test_fraction
