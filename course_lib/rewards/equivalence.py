"""Answer equivalence through Hugging Face's ``math-verify``, beside the course's own number rules.

The course's verifier (:func:`course_lib.rewards.extract.same_answer`) reads plain numbers:
thousands commas, a currency sign, ``%``, exponents. It does not read fractions (``3/4``),
LaTeX (``\\frac{3}{4}``, ``\\boxed{72}``), sets or expressions: for MATH-style answers a
verifier needs *answer equivalence*, which ``math-verify`` (the checker of open-r1 and of
TRL's ``accuracy_reward``) does by parsing both sides into SymPy and comparing them.

:func:`equivalent` combines the two, and says which rule decided:

- both sides are plain numbers by the course's rule -> the course's rule decides, with no
  tolerance by default (``rel_tol=0``: ``18.0000001`` is not 18, which the correctness rewards'
  1e-6 would accept and ``math-verify`` refuses too). It reads what ``math-verify`` misses
  there (``1e3`` is 1000) and it is the rule lessons 02-09 teach;
- an answer that offers alternatives (``19 or 18``) is wrong: ``math-verify`` takes the
  last formula of a text, so it would accept the hedge;
- otherwise -> ``math-verify`` decides (``\\frac{1}{2}`` against ``0.5``, ``\\boxed{72}``
  against ``72``, ``x = 4`` against ``4``, ``The answer is 72.``).

``python benchmarks/answer_equivalence.py`` measures both rules and this combination on 300
GSM8K test problems, each answer written ten ways (3,000 answers: 1,802 disagreements between
the two rules, the combination right on 2,995), and prints every disagreement.

``math-verify`` is imported when first used; without it the functions raise an
``ImportError`` that names the install command (``pip install "math-verify>=0.9.0"``).
``benchmarks/answer_equivalence.py`` compares both rules on real GSM8K answers.
"""

from __future__ import annotations

import re
import signal
import threading
from typing import Any, Callable

from .extract import completion_text, extract_answer_tag, extract_hash_answer, parse_number, same_answer

__all__ = ["MATH_VERIFY_REQUIREMENT", "equivalent", "make_math_verify_reward", "math_verify_available",
           "math_verify_equal"]

#: The requirement line, as pyproject.toml declares it.
MATH_VERIFY_REQUIREMENT = "math-verify>=0.9.0"


def math_verify_available() -> bool:
    """True when ``math_verify`` can be imported (tests skip on False, saying why)."""
    try:
        _math_verify()
    except ImportError:
        return False
    return True


def _math_verify():
    try:
        import math_verify
    except ImportError as error:
        raise ImportError(
            f"answer equivalence needs the math-verify package ({error}). Fix: pip install "
            f"\"{MATH_VERIFY_REQUIREMENT}\" (a dependency of the course since it was declared in pyproject.toml; "
            "reinstall the course with `pip install -e .`)."
        ) from error
    return math_verify


def _timeout_s() -> int | None:
    """math-verify's own 5 s limit where it is safe, else None (the caller's limit is the only one).

    math-verify times out with ``SIGALRM``, which only the main thread may set, and its
    ``alarm(0)`` would cancel a timer already running: the one ``compute_rewards`` sets around
    every reward call (``course_lib.rewards.calling``). So its limit is used only in the main
    thread with no real-time timer running."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "getitimer"):
        return None
    return 5 if signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) else None


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def math_verify_equal(predicted: Any, reference: Any) -> bool:
    """``math-verify``'s verdict: parse both sides (LaTeX and plain expressions), then compare.

    A bare answer is wrapped in ``$...$`` so that ``math-verify`` reads it as a formula (it
    otherwise looks for the answer in a sentence, as its ``parse`` does for a model's reply).
    Unparsable input -> False.
    """
    if predicted is None or reference is None:
        return False
    mv = _math_verify()
    timeout = _timeout_s()
    if isinstance(reference, str) and "####" in reference:
        reference = extract_hash_answer(reference)

    def parse(value: Any) -> list:
        text = _as_text(value).strip()
        parsed = mv.parse(text, parsing_timeout=timeout)
        if not parsed and "$" not in text and "\\(" not in text:
            parsed = mv.parse(f"${text}$", parsing_timeout=timeout)
        return parsed

    gold, guess = parse(reference), parse(predicted)
    if not gold or not guess:
        return False
    return bool(mv.verify(gold, guess, timeout_seconds=timeout))


_HEDGE = re.compile(r"\bor\b", re.IGNORECASE)


def equivalent(predicted: Any, reference: Any, *, rel_tol: float = 0.0) -> tuple[bool, str]:
    """``(verdict, rule)``: the course's number rule when both sides are plain numbers, else math-verify.

    ``rule`` is ``"course"``, ``"hedge"`` (alternatives offered: wrong) or ``"math-verify"``.
    See the module docstring for why the course's rule keeps plain numbers.
    """
    if isinstance(reference, str) and "####" in reference:
        reference = extract_hash_answer(reference)
    if predicted is None or reference is None:
        return False, "course"
    if parse_number(predicted) is not None and parse_number(reference) is not None:
        return same_answer(predicted, reference, rel_tol=rel_tol), "course"
    if _HEDGE.search(_as_text(predicted)):
        return False, "hedge"
    return math_verify_equal(predicted, reference), "math-verify"


def make_math_verify_reward(*, answer_column: str = "answer", correct: float = 1.0, incorrect: float = 0.0,
                            extractor: Callable[[str], str | None] | None = None,
                            name: str = "math_verify_reward") -> Callable:
    """A correctness reward that reads LaTeX, fractions and expressions (:func:`equivalent`).

    The model's answer is the last ``<answer>`` tag's content, else the whole completion
    (``math-verify`` then finds the last formula or ``\\boxed{}`` in it); ``extractor``
    replaces that rule. Rows whose reference is None score None, as in TRL.
    """
    _math_verify()  # fail at construction, not in the first training step

    def read(text: str) -> str | None:
        if extractor is not None:
            return extractor(text)
        tagged = extract_answer_tag(text)
        return tagged if tagged is not None else text

    def reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
        if answer_column not in kwargs:
            raise KeyError(f"{name} reads the reference from the dataset column {answer_column!r}, which was not "
                           f"passed; columns given: {sorted(kwargs)}. Fix: add the column or pass answer_column=.")
        scores: list[float | None] = []
        for completion, reference in zip(completions, kwargs[answer_column]):
            if reference is None:
                scores.append(None)
                continue
            verdict, _ = equivalent(read(completion_text(completion)), reference)
            scores.append(float(correct) if verdict else float(incorrect))
        return scores

    reward.__name__ = reward.__qualname__ = name
    return reward
