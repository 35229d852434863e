"""Your own task: a JSONL file of rows, or a function that builds the rows.

``get_task`` (and the command line's ``--task``) accepts, beside the shipped names:

- ``path/to/rows.jsonl``: one JSON object a line with a ``prompt`` (a string, sent as one
  user message, or a list of chat messages) and the columns your rewards read (usually
  ``answer``). A file named ``train.jsonl`` reads its sibling ``test.jsonl`` for the test
  split (evaluation), when there is one; any other file is its own test split, so give a
  separate file to ``eval``. ``n`` takes the first ``n`` rows.
- ``module:function`` or ``file.py:function`` (``course_lib.common.user_code``): called with the
  keywords it accepts among ``split``, ``n`` and ``seed``; returns a ``datasets.Dataset``
  or a list of row dicts.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from datasets import Dataset

from .jsonl import read_jsonl
from .user_code import looks_like_reference, resolve_callable


class TaskError(ValueError):
    """A user task that cannot be read (the message names the file or function and the fix)."""


def is_user_task(name: str) -> bool:
    return name.endswith(".jsonl") or (looks_like_reference(name) and not name.startswith("gsm8k"))


def _prompt(value, where: str):
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                 and isinstance(m.get("content"), str) for m in value):
        return value
    raise TaskError(f"{where}: 'prompt' must be a string or a list of messages with 'role' and 'content' strings, "
                    f"got {type(value).__name__}. Fix: write e.g. \"prompt\": \"What is 1 + 2?\".")


def _rows_from_jsonl(path: Path, n: int | None) -> list[dict]:
    if not path.is_file():
        raise TaskError(f"task {str(path)!r}: no such file. Fix: give an existing .jsonl file with 'prompt' and "
                        "'answer' on each line.")
    rows = []
    for number, row in read_jsonl(path, TaskError, '{"prompt": "...", "answer": "..."}'):
        if not isinstance(row, dict) or "prompt" not in row:
            raise TaskError(f"{path}, line {number}: no 'prompt' field. Fix: each line needs 'prompt' (and "
                            "the columns your rewards read, e.g. 'answer').")
        row["prompt"] = _prompt(row["prompt"], f"{path}, line {number}")
        rows.append(row)
        if n is not None and len(rows) >= n:
            break
    if not rows:
        raise TaskError(f"{path} holds no rows. Fix: add lines with 'prompt' and 'answer'.")
    return rows


def load_user_task(name: str, *, split: str = "train", n: int | None = None, seed: int = 0) -> Dataset:
    """Rows of a JSONL file or of a task function (see the module docstring)."""
    if name.endswith(".jsonl"):
        path = Path(name).expanduser()
        if split != "train" and path.name == "train.jsonl" and (path.parent / f"{split}.jsonl").is_file():
            path = path.parent / f"{split}.jsonl"
        rows = _rows_from_jsonl(path, n)
    else:
        function = resolve_callable(name, what=f"task {name!r}")
        accepted = inspect.signature(function).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        keywords = {k: v for k, v in dict(split=split, n=n, seed=seed).items() if takes_any or k in accepted}
        result = function(**keywords)
        if isinstance(result, Dataset):
            rows = None
            dataset = result
        elif isinstance(result, list) and all(isinstance(r, dict) for r in result):
            rows = result
        else:
            raise TaskError(f"task {name!r} returned a {type(result).__name__}. Fix: return a datasets.Dataset or "
                            "a list of row dicts with a 'prompt'.")
        if rows is not None:
            if not rows:
                raise TaskError(f"task {name!r} returned no rows.")
            rows = [{**r, "prompt": _prompt(r.get("prompt"), f"task {name!r}, row {i}")} for i, r in enumerate(rows)]
        else:
            if "prompt" not in dataset.column_names:
                raise TaskError(f"task {name!r} returned a Dataset without a 'prompt' column "
                                f"(columns: {dataset.column_names}).")
            return dataset.select(range(min(n, len(dataset)))) if n is not None else dataset
        rows = rows[:n] if n is not None else rows
    return Dataset.from_list(rows)
