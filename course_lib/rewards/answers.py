"""Rewards that check the answer itself: correctness, "is there a number", proximity.

A verifier says right or wrong; a reward function turns that (or anything else) into
a number (Unsloth's RL guide draws the line this way). The classic pair for "2 + 2":
``number_reward`` (+1 if a number is found, -1 otherwise) and a correctness reward
(+3 right, -3 wrong, ``make_correctness_reward(..., correct=3.0, incorrect=-3.0)``),
summed. ``proximity_reward`` gives partial credit by distance, so "9" for 10 beats "3".

All functions take the reference from the dataset column ``answer`` (TRL passes every
column to reward functions by name) and accept string or conversational completions.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from .extract import (
    completion_text,
    extract_answer_tag,
    extract_first_number,
    extract_hash_answer,
    extract_last_number,
    normalize_number,
    parse_number,
    same_answer,
)

__all__ = [
    "ANSWER_EXTRACTORS",
    "is_correct",
    "make_correctness_reward",
    "correctness_reward",
    "number_reward",
    "make_proximity_reward",
    "proximity_reward",
    "proximity_score",
]


def _tag_answer(text: str) -> str | None:
    tagged = extract_answer_tag(text)
    if tagged is None:
        return None
    return normalize_number(tagged) or tagged


def _tag_or_first_number(text: str) -> str | None:
    tagged = extract_answer_tag(text)
    return _tag_answer(text) if tagged is not None else extract_first_number(text)


#: How the model's answer is read from its text. ``"tag"``: the content of the last
#: ``<answer>...</answer>`` (normalized when it is a number); ``"last_number"`` and
#: ``"first_number"``: a number anywhere in the text; ``"tag_or_first_number"``: the tag
#: when there is one, else the first number (the rule of ``course_lib.evaluation``).
ANSWER_EXTRACTORS: dict[str, Callable[[str], str | None]] = {
    "tag": _tag_answer,
    "last_number": extract_last_number,
    "first_number": extract_first_number,
    "tag_or_first_number": _tag_or_first_number,
}


def _resolve_extractor(extractor: str | Callable[[str], str | None]) -> Callable[[str], str | None]:
    if callable(extractor):
        return extractor
    if extractor not in ANSWER_EXTRACTORS:
        raise ValueError(
            f"extractor must be one of {sorted(ANSWER_EXTRACTORS)} or a callable text -> str | None, "
            f"got {extractor!r}"
        )
    return ANSWER_EXTRACTORS[extractor]


def is_correct(completion: Any, reference: Any, extractor: str | Callable[[str], str | None] = "tag_or_first_number",
               *, rel_tol: float = 1e-6) -> bool:
    """The course's one rule for "correct", shared by the correctness rewards and evaluation.

    The model's answer is read with ``extractor`` (default: the ``<answer>`` tag's content
    when there is a tag, else the first number) and compared with the reference by
    :func:`~course_lib.rewards.extract.same_answer`: numerically when both are numbers
    (thousands commas group by three, so ``"1,234"`` is 1234 but ``"12,5"`` reads as 12),
    else as whitespace-normalized strings (``<answer>x=4</answer>`` is not the number 4).
    """
    return same_answer(_resolve_extractor(extractor)(completion_text(completion)), reference, rel_tol=rel_tol)


def _column(kwargs: dict, column: str, function_name: str, size: int) -> Sequence[Any]:
    if column not in kwargs:
        available = sorted(k for k in kwargs if k not in ("prompts", "completion_ids"))
        raise KeyError(
            f"{function_name} reads the reference from the dataset column {column!r}, which was not "
            f"passed; columns given: {available}. Add the column or build the reward with "
            f"answer_column=<your column>."
        )
    values = kwargs[column]
    if len(values) != size:
        raise ValueError(f"column {column!r} has {len(values)} values for {size} completions")
    for row, value in enumerate(values):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"column {column!r} holds {value} at row {row}: no answer can equal it, so every "
                             "completion would score as wrong. Fix: give the reference answer, or None for a row "
                             "the reward does not apply to.")
    return values


def _score_each(completions, references, extract, score) -> list[float | None]:
    """``score(extracted answer, reference)`` per completion; None where the reference is None."""
    return [None if reference is None else score(extract(completion_text(completion)), reference)
            for completion, reference in zip(completions, references)]


def make_correctness_reward(
    extractor: str | Callable[[str], str | None] = "tag",
    *,
    answer_column: str = "answer",
    correct: float = 1.0,
    incorrect: float = 0.0,
    rel_tol: float = 1e-6,
    name: str = "correctness_reward",
) -> Callable:
    """Build a verifier-backed reward: ``correct`` if the extracted answer equals the reference.

    Numbers compare numerically (``"1,080"`` equals ``"1080.0"``, within ``rel_tol``),
    other answers as whitespace-normalized strings. A reference in GSM8K solution form
    (``"... #### 72"``) is reduced to its final answer. A completion with no extractable
    answer scores ``incorrect``; a row whose reference is None scores None ("not
    applicable", ignored by ``compute_rewards`` like TRL does).

    Args:
        extractor: a key of ``ANSWER_EXTRACTORS`` or a callable ``text -> str | None``.
        answer_column: the dataset column holding the reference.
        correct, incorrect: the two scores (the reward lesson's example uses +3 / -3).
        rel_tol: relative tolerance for numeric answers.
        name: the ``__name__`` shown in metrics.
    """
    extract = _resolve_extractor(extractor)

    def reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
        references = _column(kwargs, answer_column, name, len(completions))
        return [None if reference is None else
                float(correct) if is_correct(completion, reference, extract, rel_tol=rel_tol) else float(incorrect)
                for completion, reference in zip(completions, references)]

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = f"{correct} if the {extractor!r} answer equals column {answer_column!r}, else {incorrect}."
    return reward


correctness_reward = make_correctness_reward("tag")


def number_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """+1.0 if the completion contains a number anywhere, -1.0 if it contains none.

    The first reward of the "2 + 2" example: a number, even a wrong one, is better than
    "C" or "cat". It cannot tell right from wrong; add a correctness reward for that.
    """
    return [1.0 if extract_first_number(completion_text(c)) is not None else -1.0 for c in completions]


def proximity_score(predicted: Any, reference: Any, *, floor: float = -0.5, missing: float = -1.0) -> float:
    """The shape of ``proximity_reward`` for one answer (see there)."""
    x, y = parse_number(predicted), parse_number(reference)
    if y is None:
        raise ValueError(f"proximity needs a numeric reference, got {reference!r}")
    if x is None:
        return float(missing)
    if x == y:
        return 1.0
    distance = abs(float(x) - float(y)) / max(abs(float(y)), 1.0)
    return max(float(floor), 1.0 - distance)


def make_proximity_reward(
    extractor: str | Callable[[str], str | None] = "last_number",
    *,
    answer_column: str = "answer",
    floor: float = -0.5,
    missing: float = -1.0,
    name: str = "proximity_reward",
) -> Callable:
    """Build a distance-based reward: closer numbers score higher.

    With ``x`` the extracted number and ``y`` the reference:

    ``score = 1.0`` if ``x == y``; otherwise ``max(floor, 1 - |x - y| / max(|y|, 1))``;
    ``score = missing`` when no number can be read.

    So the distance is relative for ``|y| >= 1`` and absolute below (no division by zero
    at ``y = 0``). For ``y = 10``: 9 -> 0.9, 3 -> 0.3, 0 or 20 -> 0.0, 25 -> -0.5, 1000 ->
    -0.5 (the floor: every far-off number is equally wrong), no number -> -1.0. Any
    number beats no number because ``missing < floor``. This is our own shape for the
    idea in Unsloth's proximity reward (a near miss like 9 for 10 is better than 3);
    their notebook uses stepped ratio bands instead.

    Rows whose reference is None score None. A reference that is not a number raises.
    """
    if not missing < floor < 1.0:
        raise ValueError(f"need missing < floor < 1.0, got missing={missing}, floor={floor}")
    extract = _resolve_extractor(extractor)

    def score(predicted, reference) -> float:
        if isinstance(reference, str) and "####" in reference:
            reference = extract_hash_answer(reference)
        return proximity_score(predicted, reference, floor=floor, missing=missing)

    def reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
        references = _column(kwargs, answer_column, name, len(completions))
        return _score_each(completions, references, extract, score)

    reward.__name__ = reward.__qualname__ = name
    return reward


proximity_reward = make_proximity_reward()
