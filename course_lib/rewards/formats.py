"""Rewards for the shape of a completion: length and ``<think>`` / ``<answer>`` formats.

These are the format rewards of DeepSeek-R1 (Guo et al., 2025, "rule-based rewards":
an accuracy reward plus a format reward for ``<think>...</think>`` reasoning) and the
length reward of the Hugging Face course's GRPO chapter. Every function has TRL's
reward signature ``f(prompts, completions, **columns) -> list[float]`` and accepts
completions as strings or as lists of chat messages.

Differences from the snippets they come from, on purpose:
- the regexes use ``re.DOTALL``: without it ``.`` stops at a newline and any
  multi-line reasoning fails the format check, which is what reasoning looks like;
- tag contents may not contain another think/answer tag, so two answers in a row do
  not pass as one well-formed completion.
"""

from __future__ import annotations

import re
from typing import Callable

from .extract import completion_text, extract_answer_tag, normalize_number

__all__ = [
    "length_reward",
    "format_reward",
    "think_answer_format_reward",
    "make_think_answer_format_reward",
    "answer_tag_format_reward",
]

# Tag contents: anything but another think/answer tag (a "tempered" dot).
_BODY = r"(?:(?!</?think>|</?answer>).)*"
_STRICT_THINK_ANSWER = re.compile(rf"<think>{_BODY}</think><answer>{_BODY}</answer>", re.DOTALL)
_LOOSE_THINK_ANSWER = re.compile(rf"<think>({_BODY})</think>\s*<answer>({_BODY})</answer>", re.DOTALL)


def _named(function: Callable, name: str, doc: str | None = None) -> Callable:
    function.__name__ = name
    function.__qualname__ = name
    if doc:
        function.__doc__ = doc
    return function


def length_reward(ideal_length: int = 20, unit: str = "chars", name: str = "length_reward") -> Callable:
    """Build a reward ``-|ideal_length - length(completion)|``: 0 at the ideal, less either side.

    The course's first GRPO example (ideal 20). It punishes being too short and too long
    equally, one point per unit of distance.

    Args:
        ideal_length: the length that scores 0.
        unit: ``"chars"`` (what ``len`` of a string counts, as in the original snippet,
            whose prose says tokens), ``"words"`` (whitespace-separated), or ``"tokens"``
            (length of the ``completion_ids`` TRL passes to every reward function).
        name: the ``__name__`` shown in metrics (``rewards/<name>/mean``).

    Returns:
        A reward function ``f(prompts, completions, completion_ids=None, **kw) -> list[float]``.
    """
    if unit not in ("chars", "words", "tokens"):
        raise ValueError(f"unit must be 'chars', 'words' or 'tokens', got {unit!r}")
    if ideal_length < 0:
        raise ValueError(f"ideal_length must be >= 0, got {ideal_length}")

    def reward(prompts=None, completions=(), completion_ids=None, **kwargs) -> list[float]:
        if unit == "tokens":
            if completion_ids is None:
                raise ValueError(
                    f"{name} with unit='tokens' needs the completion_ids argument (TRL passes it); "
                    "use unit='chars' or 'words' when calling it on text only."
                )
            lengths = [len(ids) for ids in completion_ids]
        elif unit == "words":
            lengths = [len(completion_text(c).split()) for c in completions]
        else:
            lengths = [len(completion_text(c)) for c in completions]
        return [-float(abs(ideal_length - n)) for n in lengths]

    return _named(reward, name, f"-|{ideal_length} - length in {unit}| for every completion.")


def format_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """1.0 if the whole completion is exactly ``<think>...</think><answer>...</answer>``, else 0.0.

    Strict, as in the course snippet ``^<think>.*?</think><answer>.*?</answer>$``: nothing
    before, between or after the two blocks, not even a newline. Contents may span lines.
    """
    return [1.0 if _STRICT_THINK_ANSWER.fullmatch(completion_text(c)) else 0.0 for c in completions]


def make_think_answer_format_reward(
    min_think_chars: int = 20, partial: float = 0.5, name: str = "think_answer_format_reward"
) -> Callable:
    """Build a think-then-answer format reward with partial credit.

    Looks for ``<think>T</think>`` followed (after optional whitespace) by
    ``<answer>A</answer>`` anywhere in the completion, then scores:

    - 1.0 when ``T`` has more than ``min_think_chars`` characters (stripped) and ``A`` is
      not empty: the model reasoned and answered;
    - ``partial`` (0.5) when the tags are right but the reasoning is thin or the answer empty;
    - 0.0 when the pattern is absent.
    """

    def reward(prompts=None, completions=(), **kwargs) -> list[float]:
        scores = []
        for completion in completions:
            match = _LOOSE_THINK_ANSWER.search(completion_text(completion))
            if match is None:
                scores.append(0.0)
            elif len(match.group(1).strip()) > min_think_chars and match.group(2).strip():
                scores.append(1.0)
            else:
                scores.append(float(partial))
        return scores

    return _named(reward, name)


think_answer_format_reward = make_think_answer_format_reward()
think_answer_format_reward.__doc__ = (
    "1.0 for <think> with > 20 characters then a non-empty <answer>; 0.5 for the right "
    "tags with thin content; 0.0 without the pattern (see make_think_answer_format_reward)."
)


def answer_tag_format_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """1.0 if the completion holds ``<answer>N</answer>`` with ``N`` a single number, else 0.0.

    Only the format is checked, not whether ``N`` is right: pair it with
    ``correctness_reward``. Whitespace, thousands commas and a currency sign inside the
    tags are tolerated (``<answer> $1,200 </answer>``); words are not
    (``<answer>about 12</answer>`` scores 0).
    """
    scores = []
    for completion in completions:
        tagged = extract_answer_tag(completion_text(completion))
        scores.append(1.0 if tagged is not None and normalize_number(tagged) is not None else 0.0)
    return scores
