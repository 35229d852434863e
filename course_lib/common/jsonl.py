"""JSON Lines files read one object a line, every unreadable line named by its number.

Shared by the GSM8K loader (``course_lib.data``) and your own task files
(``course_lib.common.user_tasks``): bytes are decoded line by line, so a file that is not UTF-8
is named with the line that breaks it, and a line nested past the parser is an error, not a
``RecursionError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator


def read_jsonl(file: Path, error: type[Exception], example: str) -> Iterator[tuple[int, object]]:
    """``(line number, parsed JSON value)`` for each non-blank line of ``file``.

    ``error`` is the exception class raised for a line that is not UTF-8 or not JSON, with
    the file, the line and the fix; ``example`` is a line of the expected shape, quoted in it.
    """
    for number, raw in enumerate(Path(file).read_bytes().splitlines(), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as problem:
            raise error(f"{file}: line {number} is not UTF-8 text (byte {problem.start + 1}). Fix: save the file "
                        "as UTF-8.") from None
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except RecursionError:
            raise error(f"{file}: line {number} nests too deeply to read. Fix: one flat JSON object per "
                        "line.") from None
        except json.JSONDecodeError as problem:
            raise error(f"{file}: line {number} is not JSON ({problem.msg} at column {problem.colno}). Fix: one "
                        f"JSON object per line, e.g. {example}.") from None
