"""Your own task: a JSONL file of rows, or a function that builds the rows.

``get_task`` (and the command line's ``--task``) accepts, beside the shipped names:

- ``path/to/rows.jsonl``: one JSON object a line with a ``prompt`` and the columns your
  rewards read (usually ``answer``). The prompt follows TRL's two formats, the same way in
  training, evaluation and the TRL export: a list of chat messages is *conversational*
  (the chat template is applied, completions reach the rewards as message lists); a string
  is *standard* (tokenized as it is, with no chat template; completions are strings).
- Splits: a ``train.jsonl`` beside a ``test.jsonl`` (or the other way round) is a pair, and
  each split reads its own file. Any other single file is split by a hash of each prompt,
  85% train and 15% test (:data:`TEST_FRACTION`), with a :class:`~course_lib.common.splits.SplitNotice`
  saying so, so that ``--eval-n`` and ``eval`` measure rows training never saw; the split is
  the same on every run. ``n`` takes the first ``n`` rows of the split.
- ``module:function`` or ``file.py:function`` (``course_lib.common.user_code``): called with the
  keywords it accepts among ``split``, ``n`` and ``seed``; returns a ``datasets.Dataset``
  or a list of row dicts. A function that takes no ``split`` (nor ``**kwargs``) returns the
  same rows for both splits, so its rows are split by the same hash rule, with the notice.
"""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path

from datasets import Dataset

from .jsonl import read_jsonl
from .splits import SplitNotice, is_test_problem
from .user_code import looks_like_reference, resolve_callable


class TaskError(ValueError):
    """A user task that cannot be read (the message names the file or function and the fix)."""


def is_user_task(name: str) -> bool:
    return name.endswith(".jsonl") or (looks_like_reference(name) and not name.startswith("gsm8k"))


#: Share of a single file's rows (or of a split-less function's) held out as ``test``.
TEST_FRACTION = 0.15


def _prompt_key(prompt) -> str:
    """The text a row's split is decided by: the prompt, whichever its format."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def hash_split(rows: list[dict], split: str, source: str) -> list[dict]:
    """The ``split`` rows of ``rows`` by a hash of each prompt (same rule as GSM8K's single file)."""
    if split not in ("train", "test"):
        raise TaskError(f"split={split!r} is not a split. Fix: use 'train' or 'test'.")
    warnings.warn(f"{source} holds one set of rows: they are split by a hash of each prompt, "
                  f"{1 - TEST_FRACTION:.0%} train and {TEST_FRACTION:.0%} test (the same split on every run, and the "
                  "two never overlap), so the evaluation is held out. For your own split, give train.jsonl and "
                  "test.jsonl side by side, or a function that takes split.", SplitNotice, stacklevel=2)
    want_test = split == "test"
    chosen = [row for row in rows if is_test_problem(_prompt_key(row["prompt"]), TEST_FRACTION) == want_test]
    if not chosen:
        raise TaskError(f"{source}: the hash split leaves no {split} rows (of {len(rows)}). Fix: add rows, or give "
                        "train.jsonl and test.jsonl side by side.")
    return chosen


def _prompt(value, where: str):
    if isinstance(value, str):
        if not value:
            raise TaskError(f"{where}: 'prompt' is an empty string. Fix: give the model some text.")
        return value  # TRL's standard format: the text as it is
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
    if not rows:
        raise TaskError(f"{path} holds no rows. Fix: add lines with 'prompt' and 'answer'.")
    return rows


def load_user_task(name: str, *, split: str = "train", n: int | None = None, seed: int = 0) -> Dataset:
    """Rows of a JSONL file or of a task function (see the module docstring)."""
    if name.endswith(".jsonl"):
        path = Path(name).expanduser()
        pair = {"train.jsonl", "test.jsonl"}
        if path.name in pair and (path.parent / (pair - {path.name}).pop()).is_file():
            if split not in ("train", "test"):
                raise TaskError(f"split={split!r} is not a split. Fix: use 'train' or 'test'.")
            rows = _rows_from_jsonl(path.parent / f"{split}.jsonl", None)
        else:
            rows = hash_split(_rows_from_jsonl(path, None), split, f"task {str(path)!r}")
        return Dataset.from_list(rows[:n] if n is not None else rows)
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
        if rows is None:
            if "prompt" not in dataset.column_names:
                raise TaskError(f"task {name!r} returned a Dataset without a 'prompt' column "
                                f"(columns: {dataset.column_names}).")
            if takes_any or "split" in accepted:
                return dataset.select(range(min(n, len(dataset)))) if n is not None else dataset
            rows = dataset.to_list()
        if not rows:
            raise TaskError(f"task {name!r} returned no rows.")
        rows = [{**r, "prompt": _prompt(r.get("prompt"), f"task {name!r}, row {i}")} for i, r in enumerate(rows)]
        if not (takes_any or "split" in accepted):
            rows = hash_split(rows, split, f"task {name!r} (a function without a split argument)")
        rows = rows[:n] if n is not None else rows
    return Dataset.from_list(rows)
