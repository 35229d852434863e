"""A task the course does not ship, written as a new user would: name the letter after a given one.

- :func:`next_letter_task`: conversational rows (``prompt`` as chat messages), ``answer`` the
  next letter; train and test take disjoint letters (a-m train, n-y test).
- ``rows.jsonl`` (written by :func:`write_rows`): the same question in TRL's *standard*
  format, a plain string prompt, in one file (the library splits it by a hash).
- :func:`next_letter_reward`: 1.0 when the first letter of the completion is the answer;
  :func:`short_reward`: 0.2 for a completion of at most 2 characters (shaping);
  both with TRL's signature ``f(prompts, completions, answer, **kwargs)``.
- :func:`is_next_letter`: the evaluation's rule, ``f(completion: str, answer) -> bool``.
"""

from __future__ import annotations

import json
import random
import string

LETTERS = string.ascii_lowercase


def question(letter: str) -> str:
    return f"Letter after {letter}?"


def next_letter_task(split: str = "train", n: int | None = 200, seed: int = 0) -> list[dict]:
    pool = LETTERS[:13] if split == "train" else LETTERS[13:25]
    rng = random.Random(f"{split}-{seed}")
    chosen = [rng.choice(pool) for _ in range(n or 200)]
    return [{"prompt": [{"role": "user", "content": question(c)}], "answer": LETTERS[LETTERS.index(c) + 1]}
            for c in chosen]


def write_rows(path) -> None:
    """Every letter a-y twice, once upper-case: 50 string prompts in one JSONL file."""
    with open(path, "w") as handle:
        for c in LETTERS[:25]:
            for shown in (c, c.upper()):
                handle.write(json.dumps({"prompt": question(shown), "answer": LETTERS[LETTERS.index(c) + 1]}) + "\n")


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def _first_letter(text: str) -> str | None:
    return next((ch.lower() for ch in text if ch.isalpha()), None)


def next_letter_reward(prompts, completions, answer, **kwargs) -> list[float]:
    return [1.0 if _first_letter(_text(c)) == a else 0.0 for c, a in zip(completions, answer)]


def short_reward(prompts, completions, **kwargs) -> list[float]:
    return [0.2 if len(_text(c).strip()) <= 2 else 0.0 for c in completions]


def is_next_letter(completion: str, answer) -> bool:
    return _first_letter(completion) == answer
