"""Tasks: prompts with verifiable answers, in TRL's conversational format.

Every task is a `datasets.Dataset` with at least two columns:

- ``prompt``: a list of chat messages ``[{"role": "user", "content": "What is 23 + 45?"}]``
  (TRL's *conversational* prompt format, so the same rows feed our trainer and TRL's
  ``GRPOTrainer``);
- ``answer``: the reference answer as a string (``"68"``), read by reward functions
  through their ``**columns`` keyword arguments.

The synthetic tasks are generated offline from a seed, with a train/test split that is
disjoint by construction (a problem's split depends only on the problem itself, never on
the seed or the sample size). GSM8K loads from a local JSONL file or, when a network
exists, from the hub, and comes out in the same format; a single local file is split into
train and test by a hash of the question, so its "test" rows are held out from training.

Simplifications: the word problems come from a handful of templates, so they test
multi-step arithmetic, not reading comprehension.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from datasets import Dataset

from .common.splits import SplitNotice, is_test_problem as _is_test_problem  # noqa: F401 (SplitNotice: public here)
from .common.wording import fix

#: The instruction and worked example that teach a chat model the ``<answer>`` format.
#: Measured: with the instruction alone, SmolLM2-135M never emits the tags (reward 0,
#: nothing to learn); one worked example turn in the prompt is enough to start.
TAGGED_SYSTEM_PROMPT = (
    "You are a careful calculator. Work out the result, then give the final number "
    "inside <answer></answer> tags."
)
TAGGED_EXAMPLE = (
    {"role": "user", "content": "What is 12 + 7?"},
    {"role": "assistant", "content": "12 + 7 = 19. <answer>19</answer>"},
)

#: GSM8K's instruction and worked example: the layout its five rewards score
#: (``course_lib.rewards.gsm8k``), so a perfect answer to the prompt earns their maximum, 4.0.
GSM8K_SYSTEM_PROMPT = (
    "Solve the problem. Think it through inside <reasoning> tags, then give the final number alone inside "
    "<answer> tags. Put each tag on its own line, as in the example, and write nothing after </answer>."
)
GSM8K_EXAMPLE = (
    {"role": "user", "content": "Tom has 3 boxes of 4 pens and gives away 5 pens. How many pens does he have left?"},
    {"role": "assistant", "content": "<reasoning>\n3 boxes of 4 pens are 3 * 4 = 12 pens. After giving away 5 "
                                     "he has 12 - 5 = 7.\n</reasoning>\n<answer>\n7\n</answer>\n"},
)


def gsm8k_messages(question: str, tagged: bool = True) -> list[dict]:
    """A GSM8K prompt: with ``tagged``, the instruction and example of the ``<reasoning>/<answer>`` layout."""
    if not tagged:
        return [{"role": "user", "content": question}]
    return [{"role": "system", "content": GSM8K_SYSTEM_PROMPT}, *GSM8K_EXAMPLE, {"role": "user", "content": question}]


#: The sorting task's instruction and worked example (lesson 11's task of your own).
SORTING_SYSTEM_PROMPT = (
    "Sort the numbers in ascending order. Give the sorted list, separated by commas, inside "
    "<answer></answer> tags."
)
SORTING_EXAMPLE = (
    {"role": "user", "content": "Sort: 42, 7, 19"},
    {"role": "assistant", "content": "<answer>7, 19, 42</answer>"},
)

_OPERATORS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def _pick(split: str, candidates: list, n: int | None, seed: int, key: Callable) -> list:
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} is not a split; use 'train' or 'test'.")
    _check_size(n)
    want_test = split == "test"
    pool = [c for c in candidates if _is_test_problem(key(c), 0.1) == want_test]
    rng = random.Random(seed)
    rng.shuffle(pool)
    if n is None:
        return pool
    if n > len(pool):
        raise ValueError(f"n={n} is more than the {len(pool)} distinct {split} problems of this task; "
                         "lower n or widen the task (more digits or operations).")
    return pool[:n]


def _messages(question: str, tagged: bool) -> list[dict]:
    if not tagged:
        return [{"role": "user", "content": question}]
    return [{"role": "system", "content": TAGGED_SYSTEM_PROMPT}, *TAGGED_EXAMPLE,
            {"role": "user", "content": question}]


def arithmetic_dataset(n: int | None = 1000, *, split: str = "train", seed: int = 0, digits: int = 2,
                       operations: Iterable[str] = ("+",), tagged: bool = False) -> Dataset:
    """Synthetic arithmetic: ``What is a op b?`` with ``digits``-digit operands.

    Args:
        n: number of rows (``None``: every problem of the split).
        split: ``"train"`` or ``"test"`` (about 10% of all problems, disjoint from train).
        seed: which problems are drawn and in what order.
        digits: operand size; 2 gives 8,100 distinct problems per operation.
        operations: any of ``"+"``, ``"-"``, ``"*"``.
        tagged: add a system instruction and one worked example asking for
            ``<answer>N</answer>`` (what a small chat model needs to learn the format).
    Returns:
        Dataset with columns ``prompt`` (messages), ``answer`` (str), ``question`` (str).
    """
    ops = list(operations)
    unknown = [op for op in ops if op not in _OPERATORS]
    if unknown or not ops:
        raise ValueError(f"operations={ops!r}: use a non-empty subset of {sorted(_OPERATORS)}.")
    if not 1 <= digits <= 4:
        raise ValueError(f"digits={digits}: use 1 to 4.")
    low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    problems = [(a, op, b) for op in ops for a in range(low, high + 1) for b in range(low, high + 1)]
    chosen = _pick(split, problems, n, seed, key=lambda p: f"{p[0]}{p[1]}{p[2]}")
    questions = [f"What is {a} {op} {b}?" for a, op, b in chosen]
    return Dataset.from_dict({
        "prompt": [_messages(q, tagged) for q in questions],
        "answer": [str(_OPERATORS[op](a, b)) for a, op, b in chosen],
        "question": questions,
    })


@dataclass(frozen=True)
class _WordTemplate:
    text: str
    solve: Callable[[int, int, int], int]


_WORD_TEMPLATES = (
    _WordTemplate("{name} has {a} apples. {name} buys {b} more and gives away {c}. "
                  "How many apples does {name} have now?", lambda a, b, c: a + b - c),
    _WordTemplate("A box holds {a} pencils. {name} fills {b} boxes and then loses {c} pencils. "
                  "How many pencils are left?", lambda a, b, c: a * b - c),
    _WordTemplate("{name} reads {a} pages a day for {b} days, then {c} pages on the last day. "
                  "How many pages did {name} read in total?", lambda a, b, c: a * b + c),
    _WordTemplate("A shop had {a} cookies, sold {b} in the morning and baked {c} more. "
                  "How many cookies does the shop have?", lambda a, b, c: a - b + c),
)
_NAMES = ("Ana", "Ben", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana")


def word_problem_dataset(n: int | None = 1000, *, split: str = "train", seed: int = 0,
                         tagged: bool = True) -> Dataset:
    """Multi-step word problems (two operations each) with integer answers >= 0.

    Same columns as :func:`arithmetic_dataset`; ``tagged`` defaults to True because these
    prompts are meant for chat models that reason before answering.
    """
    problems = []
    for t_index, template in enumerate(_WORD_TEMPLATES):
        for a in range(3, 30):
            for b in range(2, 10):
                for c in range(1, 10):
                    if template.solve(a, b, c) >= 0:
                        problems.append((t_index, a, b, c))
    chosen = _pick(split, problems, n, seed, key=lambda p: "w" + ",".join(map(str, p)))
    questions, answers = [], []
    for t_index, a, b, c in chosen:
        template = _WORD_TEMPLATES[t_index]
        name = _NAMES[(a + b + c) % len(_NAMES)]
        questions.append(template.text.format(name=name, a=a, b=b, c=c))
        answers.append(str(template.solve(a, b, c)))
    return Dataset.from_dict({
        "prompt": [_messages(q, tagged) for q in questions],
        "answer": answers,
        "question": questions,
    })


def sorting_dataset(n: int | None = 1000, *, split: str = "train", seed: int = 0, count: int = 3,
                    high: int = 99) -> Dataset:
    """Sort ``count`` distinct integers from 1 to ``high``: ``"Sort: 9, 3, 5"`` -> ``"3, 5, 9"``.

    The prompt carries an instruction and one worked example that show the
    ``<answer>a, b, c</answer>`` format (lesson 11's verifier ``verify_sorted`` and reward
    ``sorting_reward`` read it). Which lists are held out depends only on the list itself.
    Same columns as :func:`arithmetic_dataset`.
    """
    if not 2 <= count <= 8:
        raise ValueError(f"count={count}: sort 2 to 8 numbers.")
    if high < count + 1:
        raise ValueError(f"high={high}: need more than count={count} values to draw from.")
    if n is None:
        raise ValueError("sorting_dataset draws lists at random: give n (a row count), not None.")
    _check_size(n)
    rng = random.Random(f"sorting-{split}-{seed}")
    want_test, seen, rows = split == "test", set(), []
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} is not a split; use 'train' or 'test'.")
    while len(rows) < n:
        numbers = tuple(rng.sample(range(1, high + 1), count))
        if numbers in seen or _is_test_problem("s" + ",".join(map(str, numbers)), 0.1) != want_test:
            continue
        seen.add(numbers)
        rows.append(numbers)
    questions = ["Sort: " + ", ".join(map(str, numbers)) for numbers in rows]
    return Dataset.from_dict({
        "prompt": [[{"role": "system", "content": SORTING_SYSTEM_PROMPT}, *SORTING_EXAMPLE,
                    {"role": "user", "content": q}] for q in questions],
        "answer": [", ".join(map(str, sorted(numbers))) for numbers in rows],
        "question": questions,
    })


def gsm8k_answer(solution: str) -> str:
    """The final number of a GSM8K solution (the text after ``####``), without commas."""
    if "####" not in solution:
        raise ValueError("a GSM8K answer ends with '#### <number>'; this one has no '####'.")
    return solution.split("####")[-1].strip().replace(",", "")


class DataError(ValueError):
    """A task's data cannot be read as asked (file, row, split or size); the message names the fix."""


#: Share of a single GSM8K file held out as ``test`` (the official split holds out 1,319 of 8,792).
GSM8K_TEST_FRACTION = 0.15


def _read_jsonl(file: Path) -> list[dict]:
    """Rows of a JSONL file with ``question`` and ``answer``; a bad line is named by number.

    Each line must be UTF-8 text holding a JSON object whose ``question`` is a non-empty
    string and whose ``answer`` is a string ending in ``#### <number>``.
    """
    from .rewards.extract import parse_number
    from .common.jsonl import read_jsonl

    rows = []
    for number, row in read_jsonl(file, DataError, '{"question": ..., "answer": "... #### 42"}'):
        missing = [key for key in ("question", "answer") if not isinstance(row, dict) or key not in row]
        if missing:
            found = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise DataError(f"{file}: line {number} lacks {' and '.join(map(repr, missing))} (it holds {found}). "
                            "Fix: give every row a 'question' and an 'answer' ending in '#### <number>'.")
        for key in ("question", "answer"):
            if not isinstance(row[key], str) or not row[key].strip():
                raise DataError(f"{file}: line {number}: {key}={_short_repr(row[key])} is not text. Fix: give every "
                                f"row a {key} string.")
        if "####" not in row["answer"]:
            raise DataError(f"{file}: line {number}: the answer has no '#### <number>' final line. Fix: end every "
                            "answer with '#### <number>', as GSM8K does.")
        final = row["answer"].rsplit("####", 1)[1].strip()
        if parse_number(final) is None:
            raise DataError(f"{file}: line {number}: the final answer {final[:40]!r} after '####' is not a number, "
                            "so no completion could match it. Fix: end the answer with '#### <number>'.")
        rows.append(row)
    return rows


def _short_repr(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _local_gsm8k_rows(path: str | os.PathLike, split: str) -> list[dict]:
    """The ``split`` rows of a folder (``train.jsonl`` / ``test.jsonl``) or of one file split in two."""
    if split not in ("train", "test"):
        raise DataError(f"split={split!r} is not a split. Fix: use 'train' or 'test'.")
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / f"{split}.jsonl"
        if not file.is_file():
            raise DataError(f"No GSM8K file at {file}. Fix: put train.jsonl and test.jsonl in {file.parent}, or "
                            "pass one JSONL file (it is then split in two).")
        rows = _read_jsonl(file)
        if split == "test" and (file.parent / "train.jsonl").is_file():
            _check_held_out(rows, _read_jsonl(file.parent / "train.jsonl"), file)
        return rows
    if not file.is_file():
        raise DataError(f"No GSM8K file or folder at {file}. Fix: pass a JSONL file, or a folder holding "
                        "train.jsonl and test.jsonl.")
    rows = _read_jsonl(file)
    warnings.warn(f"gsm8k:{file} is a single file: its rows are split by question, {1 - GSM8K_TEST_FRACTION:.0%} "
                  f"train and {GSM8K_TEST_FRACTION:.0%} test (a fixed hash rule, so the two never overlap and the "
                  "split is the same on every run). For your own split, pass a folder with train.jsonl and "
                  "test.jsonl.", SplitNotice, stacklevel=4)
    want_test = split == "test"
    return [r for r in rows if _is_test_problem(str(r["question"]), GSM8K_TEST_FRACTION) == want_test]


def _check_held_out(test_rows: list[dict], train_rows: list[dict], file: Path) -> None:
    """A test split that repeats train questions measures memory, not skill: refuse all, warn some."""
    train = {" ".join(r["question"].split()) for r in train_rows}
    shared = sum(" ".join(r["question"].split()) in train for r in test_rows)
    if shared and shared == len(test_rows):
        raise DataError(f"{file}: every test question is also in {file.parent / 'train.jsonl'}, so the evaluation "
                        "would not be held out. Fix: put different problems in test.jsonl (or pass one file: it is "
                        "split by question).")
    if shared:
        warnings.warn(f"{file}: {shared} of {len(test_rows)} test questions are also in train.jsonl; accuracy on "
                      "them is not held out.", SplitNotice, stacklevel=4)


def _local_gsm8k_fix() -> str:
    return fix("--task gsm8k:<folder with train.jsonl and test.jsonl>",
               "load_gsm8k(path=<folder with train.jsonl and test.jsonl>) or get_task('gsm8k:<folder>')")


def load_gsm8k(path: str | os.PathLike | None = None, *, split: str = "train", n: int | None = None,
               seed: int = 0, tagged: bool = True) -> Dataset:
    """GSM8K in the course's format.

    Args:
        path: a folder holding ``train.jsonl`` and ``test.jsonl`` (rows with ``question``
            and ``answer``), or one such JSONL file, whose rows are then split by a hash of
            the question (15% test, :data:`GSM8K_TEST_FRACTION`) with a :class:`SplitNotice`,
            so that ``split="test"`` is held out from ``split="train"``. ``None`` loads
            ``openai/gsm8k`` (config ``main``) from the hub, which needs a network.
        split, n, seed: which rows; ``n`` (at least 1, at most the rows of the split) rows
            are drawn with ``seed`` when given, all of them when ``None``.
    Returns:
        Dataset with ``prompt``, ``answer`` (the final number) and ``solution`` (the
        worked solution).

    Raises:
        DataError: a missing file, a malformed line (named by number), a row without
            ``question`` / ``answer``, an empty split, or an ``n`` out of range.
    """
    _check_size(n)
    if path is None:
        if any(os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
            raise DataError("task gsm8k loads openai/gsm8k from the hub, but offline mode is on (HF_HUB_OFFLINE / "
                            f"HF_DATASETS_OFFLINE). Fix: {_local_gsm8k_fix()}.")
        from datasets import load_dataset

        try:
            rows = list(load_dataset("openai/gsm8k", "main", split=split))
        except Exception as error:  # offline, or the hub is unreachable
            raise DataError("Could not load openai/gsm8k from the hub. Fix: pass a local copy, "
                            f"{_local_gsm8k_fix()}.") from error
        source = "openai/gsm8k"
    else:
        rows, source = _local_gsm8k_rows(path, split), str(path)
    if not rows:
        raise DataError(f"gsm8k:{source} holds no {split} rows. Fix: check the file, or give it more rows.")
    if n is not None:
        if n > len(rows):
            raise DataError(f"n={n} is more than the {len(rows)} {split} rows of gsm8k:{source}. Fix: lower n "
                            f"({fix('--n, --eval-n, --train-rows', 'the n argument')}).")
        rows = random.Random(seed).sample(rows, n)
    return Dataset.from_dict({
        "prompt": [gsm8k_messages(r["question"], tagged) for r in rows],
        "answer": [gsm8k_answer(r["answer"]) for r in rows],
        "solution": [r["answer"] for r in rows],
    })


def _check_size(n) -> None:
    """``n`` rows: None (all) or a positive int; 0 would report an accuracy of nothing, and a
    negative count would slice "all but k"."""
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int):
        raise DataError(f"n={n!r} is not a whole number. Fix: give a row count such as 200, or None for all rows.")
    if n < 1:
        raise DataError(f"n={n} is not a row count. Fix: give at least 1 row (None takes them all).")


#: Task names accepted by :func:`get_task` and the CLI's ``--task``.
TASKS: dict[str, Callable[..., Dataset]] = {
    "arithmetic": lambda **kw: arithmetic_dataset(**kw),
    "arithmetic-tagged": lambda **kw: arithmetic_dataset(tagged=True, **kw),
    "arithmetic-mixed": lambda **kw: arithmetic_dataset(operations=("+", "-", "*"), **kw),
    "word-problems": lambda **kw: word_problem_dataset(**kw),
    "sorting": lambda **kw: sorting_dataset(**kw),
}


def get_task(name: str, *, split: str = "train", n: int | None = 1000, seed: int = 0) -> Dataset:
    """A task by name: one of :data:`TASKS`, ``"gsm8k"`` (hub) or ``"gsm8k:<path>"`` (local), or your own:
    a ``.jsonl`` file or ``module:function`` (:mod:`course_lib.common.user_tasks`)."""
    from .common.user_tasks import is_user_task, load_user_task

    if not isinstance(name, str):
        raise ValueError(f"get_task: name={name!r} is a {type(name).__name__}, not a task name. Fix: pass one of "
                         f"{', '.join(TASKS)}, 'gsm8k', 'gsm8k:<folder>', a .jsonl file or module:function.")
    if name == "gsm8k" or name.startswith("gsm8k:"):
        path = name.partition(":")[2] or None
        return load_gsm8k(path, split=split, n=n, seed=seed)
    if name not in TASKS and is_user_task(name):
        return load_user_task(name, split=split, n=n, seed=seed)
    if name not in TASKS:
        raise ValueError(f"Unknown task {name!r}. Known tasks: {', '.join(TASKS)}, gsm8k, gsm8k:<folder or "
                         "jsonl file>, or your own: a .jsonl file with 'prompt' and 'answer', or module:function.")
    return TASKS[name](n=n, split=split, seed=seed)
