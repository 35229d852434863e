"""The GSM8K reward family popularised by the early open GRPO recipes (willccbb's gist,
reused in Unsloth's notebooks), rewritten with the same scores.

The model is asked to answer in this XML layout::

    <reasoning>
    ...
    </reasoning>
    <answer>
    42
    </answer>

Five rewards, summed by the trainer (maximum 2.0 + 0.5 + 0.5 + 0.5 + 0.5 = 4.0):

==============================  =====  ================================================
function                        score  when
==============================  =====  ================================================
gsm8k_correctness_reward        2.0    extracted answer equals the reference, else 0.0
gsm8k_int_reward                0.5    extracted answer is all ASCII digits, else 0.0
gsm8k_strict_format_reward      0.5    exactly ``<reasoning>\\n..\\n</reasoning>\\n<answer>\\n..\\n</answer>\\n``
gsm8k_soft_format_reward        0.5    ``<reasoning>..</reasoning>`` whitespace ``<answer>..</answer>`` at the start
gsm8k_xmlcount_reward           <=0.5  0.125 per tag placed once, minus 0.001 per character after ``</answer>``
==============================  =====  ================================================

Differences from the original, each a deliberate fix and noted where it applies:
- the format regexes use ``re.DOTALL``. The original omits it, so ``.`` never crosses a
  newline and any multi-line reasoning fails both format rewards;
- correctness also accepts numerically equal answers (GSM8K writes ``1,080`` in 79
  training references; the original's exact string match rejects ``1080`` there);
- ``gsm8k_int_reward`` accepts ASCII digits only (``str.isdigit`` also accepts "²");
- xmlcount charges its trailing-text penalty once, on the text after the closing tag.
  The original subtracts it in two branches, so trailing text costs twice the stated
  0.001 a character, and a completion that stops right after ``</answer>`` with no final
  newline is charged 0.001 per character of the whole completion.
What is kept on purpose: the lenient answer extraction (``extract_xml_answer``): with
no ``<answer>`` tag the whole completion is the answer, so a bare ``"72"`` scores 2.0.
"""

from __future__ import annotations

import re

from .extract import completion_text, extract_xml_answer, same_answer

__all__ = [
    "gsm8k_correctness_reward",
    "gsm8k_int_reward",
    "gsm8k_strict_format_reward",
    "gsm8k_soft_format_reward",
    "gsm8k_xmlcount_reward",
    "gsm8k_xmlcount",
]

_BODY = r"(?:(?!</?reasoning>|</?answer>).)*?"
_STRICT = re.compile(rf"<reasoning>\n{_BODY}\n</reasoning>\n<answer>\n{_BODY}\n</answer>\n", re.DOTALL)
_SOFT = re.compile(rf"\s*<reasoning>{_BODY}</reasoning>\s*<answer>{_BODY}</answer>", re.DOTALL)
_DIGITS = re.compile(r"[0-9]+")


def _answer_column(kwargs: dict, n: int) -> list:
    if "answer" not in kwargs:
        raise KeyError(
            "gsm8k_correctness_reward reads the reference from the dataset column 'answer', which was "
            f"not passed; columns given: {sorted(kwargs)}."
        )
    answers = list(kwargs["answer"])
    if len(answers) != n:
        raise ValueError(f"column 'answer' has {len(answers)} values for {n} completions")
    return answers


def gsm8k_correctness_reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
    """2.0 if the answer inside ``<answer>`` (lenient extraction) equals ``answer``, else 0.0.

    The reference may be the bare final answer (``"72"``) or a full GSM8K solution ending
    in ``#### 72``. Rows with a None reference score None.
    """
    references = _answer_column(kwargs, len(completions))
    scores: list[float | None] = []
    for completion, reference in zip(completions, references):
        if reference is None:
            scores.append(None)
            continue
        predicted = extract_xml_answer(completion_text(completion))
        scores.append(2.0 if same_answer(predicted, reference, rel_tol=0.0) else 0.0)
    return scores


def gsm8k_int_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """0.5 if the extracted answer is a non-negative integer written in digits, else 0.0.

    Nudges the model toward GSM8K's integer answers; ``-3``, ``3.0`` and ``1,080`` score 0.
    """
    return [0.5 if _DIGITS.fullmatch(extract_xml_answer(completion_text(c))) else 0.0 for c in completions]


def gsm8k_strict_format_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """0.5 if the completion is exactly the XML layout with its newlines, else 0.0.

    Pattern ``<reasoning>\\n B \\n</reasoning>\\n<answer>\\n B \\n</answer>\\n`` matched
    against the whole text; the final newline is required.
    """
    return [0.5 if _STRICT.fullmatch(completion_text(c)) else 0.0 for c in completions]


def gsm8k_soft_format_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """0.5 if the completion starts with a reasoning block then an answer block, else 0.0.

    Any whitespace (or none) around and between the blocks; text after ``</answer>`` is
    allowed (the match is anchored at the start only, as in the original).
    """
    return [0.5 if _SOFT.match(completion_text(c)) else 0.0 for c in completions]


def gsm8k_xmlcount(text: str) -> float:
    """Score one text: +0.125 for each of ``"<reasoning>\\n"``, ``"\\n</reasoning>\\n"``,
    ``"\\n<answer>\\n"``, ``"\\n</answer>"`` that occurs exactly once; when the closing
    answer tag is counted, minus 0.001 per character after it (one trailing newline free).
    """
    score = 0.0
    for tag in ("<reasoning>\n", "\n</reasoning>\n", "\n<answer>\n"):
        if text.count(tag) == 1:
            score += 0.125
    if text.count("\n</answer>") == 1:
        score += 0.125
        trailing = text.split("\n</answer>", 1)[1]
        if trailing.startswith("\n"):
            trailing = trailing[1:]
        score -= 0.001 * len(trailing)
    return score


def gsm8k_xmlcount_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """``gsm8k_xmlcount`` of every completion: dense credit for each tag in place (0 to 0.5)."""
    return [gsm8k_xmlcount(completion_text(c)) for c in completions]
