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
exists, from the hub, and comes out in the same format.

Simplifications: the word problems come from a handful of templates, so they test
multi-step arithmetic, not reading comprehension.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from datasets import Dataset

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

_OPERATORS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def _is_test_problem(key: str, test_fraction: float) -> bool:
    """A problem's split is a pure function of its text, so train and test never overlap."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < test_fraction


def _pick(split: str, candidates: list, n: int | None, seed: int, key: Callable) -> list:
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} is not a split; use 'train' or 'test'.")
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


def gsm8k_answer(solution: str) -> str:
    """The final number of a GSM8K solution (the text after ``####``), without commas."""
    if "####" not in solution:
        raise ValueError("a GSM8K answer ends with '#### <number>'; this one has no '####'.")
    return solution.split("####")[-1].strip().replace(",", "")


def load_gsm8k(path: str | os.PathLike | None = None, *, split: str = "train", n: int | None = None,
               seed: int = 0, tagged: bool = True) -> Dataset:
    """GSM8K in the course's format.

    Args:
        path: a local JSONL file (rows with ``question`` and ``answer``) or a folder holding
            ``{split}.jsonl``. ``None`` loads ``openai/gsm8k`` (config ``main``) from the hub,
            which needs a network.
        split, n, seed: which rows; ``n`` rows are drawn with ``seed`` when given.
    Returns:
        Dataset with ``prompt``, ``answer`` (the final number) and ``solution`` (the
        worked solution).
    """
    if path is None:
        from datasets import load_dataset

        try:
            rows = list(load_dataset("openai/gsm8k", "main", split=split))
        except Exception as error:  # offline, or the hub is unreachable
            raise RuntimeError("Could not load openai/gsm8k from the hub. Pass path= to a local "
                               "JSONL copy (rows with 'question' and 'answer').") from error
    else:
        file = Path(path)
        if file.is_dir():
            file = file / f"{split}.jsonl"
        if not file.exists():
            raise FileNotFoundError(f"No GSM8K file at {file}; pass a JSONL file or a folder with {split}.jsonl.")
        rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    if n is not None:
        rows = random.Random(seed).sample(rows, min(n, len(rows)))
    return Dataset.from_dict({
        "prompt": [_messages(r["question"], tagged) for r in rows],
        "answer": [gsm8k_answer(r["answer"]) for r in rows],
        "solution": [r["answer"] for r in rows],
    })


#: Task names accepted by :func:`get_task` and the CLI's ``--task``.
TASKS: dict[str, Callable[..., Dataset]] = {
    "arithmetic": lambda **kw: arithmetic_dataset(**kw),
    "arithmetic-tagged": lambda **kw: arithmetic_dataset(tagged=True, **kw),
    "arithmetic-mixed": lambda **kw: arithmetic_dataset(operations=("+", "-", "*"), **kw),
    "word-problems": lambda **kw: word_problem_dataset(**kw),
}


def get_task(name: str, *, split: str = "train", n: int | None = 1000, seed: int = 0) -> Dataset:
    """A task by name: one of :data:`TASKS`, ``"gsm8k"`` (hub) or ``"gsm8k:<path>"`` (local)."""
    if name == "gsm8k" or name.startswith("gsm8k:"):
        path = name.partition(":")[2] or None
        return load_gsm8k(path, split=split, n=n, seed=seed)
    if name not in TASKS:
        raise ValueError(f"Unknown task {name!r}. Known tasks: {', '.join(TASKS)}, gsm8k, gsm8k:<path to jsonl>.")
    return TASKS[name](n=n, split=split, seed=seed)
