"""Reading answers out of completions: text of a completion, tags, numbers, GSM8K's ``####``.

A verifier (DeepSeek-R1's "rule-based reward", the RLVR idea) is two steps: extract the
model's answer from free text, then compare it with the reference. This module is the
first step and the numeric comparison; the reward functions that turn a comparison into
a score live beside it.

Simplifications, chosen on purpose: numbers are written in decimal with an optional
sign, thousands commas, a fractional part and an exponent (``-1,234.5``, ``2e5``);
fractions (``3/4``), words ("seven") and LaTeX (``\\frac{3}{4}``) are not recognised.
Model text is hostile input: a number of any size (``1e999999999``, ten million digits)
is read exactly, never rounded and never an exception. Math-verify style symbolic equivalence is out of scope.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from collections.abc import Sequence
from typing import Any

__all__ = [
    "completion_text",
    "completions_like",
    "extract_answer_tag",
    "extract_xml_answer",
    "extract_hash_answer",
    "extract_last_number",
    "extract_first_number",
    "extract_code_block",
    "parse_number",
    "normalize_number",
    "numbers_equal",
    "same_answer",
]

# A number in running text. The minus sign counts only where it cannot be a binary
# minus glued to a previous word or digit ("10-3" is 10 and 3, "x = -3" is -3); a digit
# run must not continue a previous number; a thousands group needs exactly 3 digits; an
# exponent ("2e5", "1.5E-3") belongs to the number when digits follow the "e".
_NUMBER = re.compile(
    r"(?:(?<![\w)\]])-)?(?<![\d.])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?"
)
#: Beyond this many digits a normalized number is written in scientific form ("1E+999999999")
#: instead of spelling out every zero (which would take a gigabyte for that example).
_MAX_PLAIN_DIGITS = 1000
_DECIMAL_STR = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:E([+-]\d+))?")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_CODE_BLOCK = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?")


def completions_like(prompts: Sequence, texts: Sequence[str]) -> list:
    """Completions in the format of their prompts, as TRL hands them to reward functions: the text
    itself after a string prompt, ``[{"role": "assistant", "content": text}]`` after a list of messages
    (the inverse of :func:`completion_text`). ``prompts`` decides for all: its first element's format."""
    conversational = bool(prompts) and isinstance(prompts[0], list)
    return [[{"role": "assistant", "content": t}] if conversational else t for t in texts]


def completion_text(completion: Any) -> str:
    """The text of one completion, in either of TRL's formats.

    - standard format: the completion is a string, returned as is;
    - conversational format: a list of messages such as
      ``[{"role": "assistant", "content": "..."}]``; the content of the last assistant
      message is returned (the last message when none says ``assistant``). Content given
      as a list of blocks (``[{"type": "text", "text": "..."}]``) is joined.
    A single message dict is accepted too.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        if not completion:
            return ""
        messages = [m for m in completion if isinstance(m, dict)]
        if len(messages) != len(completion):
            raise TypeError(
                f"a conversational completion is a list of message dicts, got items of types "
                f"{sorted({type(m).__name__ for m in completion})}"
            )
        assistant = [m for m in messages if m.get("role") == "assistant"]
        return _content_text((assistant or messages)[-1].get("content", ""))
    raise TypeError(
        f"completion must be a string or a list of chat messages, got {type(completion).__name__}: "
        f"{completion!r:.80}"
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content)


def extract_answer_tag(text: str) -> str | None:
    """Content of the last complete ``<answer>...</answer>`` pair, stripped; None if none.

    The last pair wins because a model that reasons about the format may mention the
    tags before giving its final answer.
    """
    matches = _ANSWER_TAG.findall(text)
    return matches[-1].strip() if matches else None


def extract_xml_answer(text: str) -> str:
    """Lenient extraction used by the GSM8K reward family.

    Takes what follows the last ``<answer>`` up to the next ``</answer>`` (or the end),
    stripped. Without any ``<answer>`` tag the whole text is returned stripped, so a
    bare ``"72"`` still counts as the answer 72: that leniency is part of the well-known
    GSM8K recipe and is kept so its numbers can be reproduced.
    """
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def extract_hash_answer(text: str) -> str | None:
    """The final answer of a GSM8K solution: the text after the last ``####``, stripped.

    ``"... so 72 clips.\\n#### 72"`` -> ``"72"``. Returns None when there is no ``####``.
    Commas are kept (``"1,080"``); pass the result to ``normalize_number`` to compare.
    """
    if "####" not in text:
        return None
    return text.rsplit("####", 1)[1].strip()


def extract_last_number(text: str) -> str | None:
    """The last number in ``text``, normalized (``"so 1,234.50 apples"`` -> ``"1234.5"``)."""
    matches = _NUMBER.findall(text)
    return normalize_number(matches[-1]) if matches else None


def extract_first_number(text: str) -> str | None:
    """The first number in ``text``, normalized; None when there is none."""
    match = _NUMBER.search(text)
    return normalize_number(match.group(0)) if match else None


def extract_code_block(text: str, languages: tuple[str, ...] = ("python", "py", "python3", "")) -> str | None:
    """Body of the last fenced code block whose language tag is in ``languages``.

    The empty string in ``languages`` accepts untagged fences (```` ``` ````). The last
    block is taken because models often sketch first and give the final program last.
    """
    blocks = [body for lang, body in _CODE_BLOCK.findall(text) if lang.lower() in languages]
    return blocks[-1] if blocks else None


def parse_number(value: Any) -> Decimal | None:
    """``value`` as an exact ``Decimal`` if it is one finite number (see ``normalize_number``), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return Decimal(repr(value)) if math.isfinite(value) else None
    text = str(value).strip()
    text = text.lstrip("$€£").rstrip(".%").strip()
    if not text or not _PLAIN_NUMBER.fullmatch(text) or not any(c.isdigit() for c in text):
        return None
    try:
        number = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def normalize_number(text: Any) -> str | None:
    """Canonical decimal string for a number, or None if ``text`` is not one number.

    Strips whitespace, a leading currency sign (``$ € £``), a trailing ``%`` or ``.``,
    and thousands commas; drops a ``+`` sign, trailing zeros after the point and the
    point itself when nothing follows: ``"1,234.50"`` -> ``"1234.5"``, ``"$72.00"`` ->
    ``"72"``, ``"-0"`` -> ``"0"``, ``"1e3"`` -> ``"1000"``. Ints and floats are accepted.
    Commas must group by three (``"1,2"`` is not a number here).
    """
    number = parse_number(text)
    if number is None:
        return None
    if number == 0:
        return "0"
    # Exact, from the digits: Decimal.normalize() would round to the context's 28 digits and
    # raise decimal.Overflow beyond its exponent range (model text such as "1e999999999").
    # str(Decimal) is C-fast even for millions of digits, unlike as_tuple(): read the parts from it.
    sign, whole, fraction, power = _DECIMAL_STR.fullmatch(str(number)).groups()
    digits = (whole + (fraction or "")).lstrip("0")
    exponent = int(power or 0) - len(fraction or "")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)  # trailing zeros become exponent
    digits = stripped
    adjusted = exponent + len(digits) - 1  # the power of ten of the leading digit
    if abs(adjusted) > _MAX_PLAIN_DIGITS:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}E{adjusted:+d}"
    if exponent >= 0:
        return sign + digits + "0" * exponent
    point = len(digits) + exponent  # digits before the decimal point
    if point > 0:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}0.{'0' * -point}{digits}"


def numbers_equal(a: Any, b: Any, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """True when ``a`` and ``b`` parse as numbers that agree within tolerance.

    Two whole numbers must be exactly equal (a relative tolerance would call 1000000 and
    1000001 equal). Otherwise ``math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)``, so
    ``0.30000000000000004`` equals ``0.3``. Unparsable input -> False.
    """
    x, y = parse_number(a), parse_number(b)
    if x is None or y is None:
        return False
    if x == y:
        return True
    if _is_whole(x) and _is_whole(y):
        return False
    a, b = float(x), float(y)
    if math.isinf(a) or math.isinf(b):  # beyond float64: unequal Decimals are unequal numbers
        return False
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def _is_whole(number: Decimal) -> bool:
    """True for an integer value, decided from the digits (no context: no rounding, no overflow)."""
    mantissa, _, power = normalize_number(number).partition("E")
    return len(mantissa.partition(".")[2]) <= int(power or 0)  # decimals <= the power of ten


def same_answer(predicted: Any, reference: Any, *, rel_tol: float = 1e-6) -> bool:
    """Compare a predicted answer with a reference: numerically when both are numbers,
    else as strings with surrounding whitespace removed and inner runs collapsed.
    A reference in GSM8K solution form (``"... #### 72"``) is reduced to ``"72"`` first.
    """
    if predicted is None or reference is None:
        return False
    if isinstance(reference, str) and "####" in reference:
        reference = extract_hash_answer(reference)
    if parse_number(predicted) is not None and parse_number(reference) is not None:
        return numbers_equal(predicted, reference, rel_tol=rel_tol)
    return " ".join(str(predicted).split()) == " ".join(str(reference).split())
