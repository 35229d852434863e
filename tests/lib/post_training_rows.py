"""Rows the post-training tests train on: demonstrations and preference pairs of the arithmetic task."""

from __future__ import annotations

from course_lib.data import get_task
from course_lib.post_training.data import demonstrations


def sft_rows(n: int = 16):
    """``n`` arithmetic prompts with their answers as completions."""
    return demonstrations(get_task("arithmetic", n=n, seed=0))


def pair_rows(n: int = 16):
    """The same rows as pairs: the answer chosen, the answer plus one rejected."""
    rows = sft_rows(n)
    return rows.add_column("chosen", list(rows["answer"])).add_column(
        "rejected", [str(int(a) + 1) for a in rows["answer"]])
