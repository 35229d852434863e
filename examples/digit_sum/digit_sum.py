"""A task the library does not ship: the sum of the digits of a 3-digit number.

Everything a run needs, in one plain module that the command line, the Python API and the
TRL export all import by ``digit_sum.py:<name>``:

- :func:`digit_sum_task`: the rows, ``prompt`` (chat messages) and ``answer`` (an int);
- :func:`digit_sum_reward`: 1.0 when the first number of the completion is the sum, else
  0.0 (TRL's reward signature: ``f(prompts, completions, answer, **kwargs)``);
- :func:`brevity_reward`: 0.2 for a completion of at most 4 characters (the answer alone);
- :func:`is_digit_sum_correct`: the evaluation's rule, ``f(completion, answer) -> bool``.
"""

from __future__ import annotations

import random
import re

INSTRUCTION = "Add up the digits of the number. Reply with the sum only."


def digit_sum_task(split: str = "train", n: int | None = 1000, seed: int = 0) -> list[dict]:
    """``n`` rows of 3-digit numbers; train and test draw from disjoint numbers (even/odd hundreds' parity)."""
    rng = random.Random(f"{split}-{seed}")
    numbers = [x for x in range(100, 1000) if (x // 100) % 2 == (0 if split == "train" else 1)]
    chosen = [rng.choice(numbers) for _ in range(n or 1000)]
    return [{"prompt": [{"role": "user", "content": f"{INSTRUCTION}\n{x}"}], "answer": sum(map(int, str(x)))}
            for x in chosen]


def _first_number(text: str) -> int | None:
    match = re.search(r"-?\d+", text)
    return int(match.group()) if match else None


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)


def digit_sum_reward(prompts, completions, answer, **kwargs) -> list[float]:
    return [1.0 if _first_number(_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]


def brevity_reward(prompts, completions, **kwargs) -> list[float]:
    return [0.2 if len(_text(c).strip()) <= 4 else 0.0 for c in completions]


def is_digit_sum_correct(completion: str, answer) -> bool:
    return _first_number(completion) == int(answer)
