# This file is generated from solutions/ex09_rewards.py by `python -m course_lib make-stubs`.
# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.
"""Lesson 09 exercises: reading an answer out of a completion, a think/answer format reward
with partial credit, a proximity score, combining reward functions as TRL does, reading a
judge's ranking of a group (RULER-style), and a probe case of your own that catches a planted flaw."""

import math
import re


def extract_answer(text: str) -> str | None:
    """The model's answer in `text`: the last `<answer>...</answer>` pair, else the last number.

    Rules, in order:
    1. if `text` holds at least one complete `<answer>...</answer>` pair, return the
       content of the LAST pair, stripped of surrounding whitespace. The content may span
       several lines;
    2. otherwise return the last number in the text, as written: an optional minus sign,
       digits, and an optional decimal part (`-3`, `42`, `2.5`). This rule reads "1,000" as
       "000" and misses fractions and LaTeX; the library's extractors handle thousands
       commas (lesson 09 §2 says what a real maths verifier adds);
    3. otherwise return None.

    Examples: `"<answer> 42 </answer>"` -> `"42"`; `"3 apples, then 5"` -> `"5"`;
    `"<answer>7</answer> and 9"` -> `"7"`; `"no idea"` -> `None`.
    """
    # HINT: without re.DOTALL, "." does not match a newline, so a multi-line answer is missed.
    raise NotImplementedError("Exercise: replace this line with your code.")


def partial_format_reward(completions: list[str]) -> list[float]:
    """Think-then-answer format reward with partial credit (DeepSeek-R1 style).

    (Named apart from `course_lib.rewards.format_reward`, the strict all-or-nothing version
    lesson 09 compares it with; the library's partial-credit twin is
    `think_answer_format_reward`.)

    Search each completion for `<think>T</think>`, optional whitespace, then
    `<answer>A</answer>` (anywhere in the text; `T` and `A` may span several lines).

    - 1.0 if the pattern is found, `T.strip()` has MORE than 20 characters and
      `A.strip()` is not empty: the model reasoned, then answered;
    - 0.5 if the pattern is found but the content is thin (20 characters or fewer of
      reasoning, or an empty answer);
    - 0.0 if the pattern is not found.

    Example: `["<think>add the tens, then the units</think><answer>42</answer>",
    "<think>hmm</think><answer>42</answer>", "42"]` -> `[1.0, 0.5, 0.0]`.
    """
    # HINT: re.search finds the pattern anywhere; re.match only at the start of the text.
    raise NotImplementedError("Exercise: replace this line with your code.")


def proximity_score(predicted: float | None, reference: float) -> float:
    """Partial credit by distance: closer numbers score higher (9 for 10 beats 3).

    With `x = predicted` and `y = reference`:

    - `1.0` if `x == y`;
    - otherwise `max(-0.5, 1 - |x - y| / max(|y|, 1))`: the relative distance for
      `|y| >= 1`, the absolute distance below (so `y = 0` does not divide by zero), and a
      floor of -0.5 so that every far-off number is equally wrong;
    - `-1.0` when there is no number (`predicted is None`): any number beats none.

    Examples for `y = 10`: 9 -> 0.9, 3 -> 0.3, 20 -> 0.0, 25 -> -0.5, 1000 -> -0.5,
    None -> -1.0. For `y = 0`: 0.5 -> 0.5.
    """
    # HINT: divide by max(abs(reference), 1), not by abs(reference): the reference can be 0.
    raise NotImplementedError("Exercise: replace this line with your code.")


def combine_rewards(per_func: list[list[float | None]], weights: list[float] | None = None) -> list[float]:
    """The total reward of each completion, with TRL's rules for None.

    `per_func[f][b]` is what reward function `f` returned for completion `b` (F lists of
    B values, as the functions return them). None means "does not apply to this
    completion" and is skipped, so the total is the weighted sum over the functions that
    did apply:

        total[b] = sum over f with per_func[f][b] not None of weights[f] * per_func[f][b]

    `weights=None` means every weight is 1.0. A completion for which EVERY function
    returned None has no score at all: its total is NaN (`float("nan")`), not 0.

    Example: `combine_rewards([[1.0, None, None], [0.5, 2.0, None]], [2.0, 1.0])`
    -> `[2.5, 2.0, nan]`.

    Returns:
        B floats.
    """
    # HINT: a completion where every function returned None must stay NaN: 0 would pull the baseline.
    raise NotImplementedError("Exercise: replace this line with your code.")


def parse_ranking(reply: str | None, n: int) -> list[int] | None:
    """The order a judge gave to `n` numbered answers, best first, as 0-BASED indices.

    A group judge (lesson 09 §12) is shown "Answer 1: ...", ..., "Answer n: ..." and replies
    with the numbers from best to worst. Small judges write it many ways: `"2 1 3"`,
    `"2 > 3 > 1"`, `"Ranking: [3], [1], [2]"`. Rules:

    1. read the whole numbers of the reply in order (`re.findall(r"\\d+", reply)`);
    2. keep the FIRST mention of each number in 1..n (a repeat adds nothing), and stop once
       all n are found (later numbers are ignored);
    3. a number outside 1..n met before the ranking is complete makes the reply unusable
       (None), unless n - 1 numbers were already found;
    4. n numbers found: that order. n - 1 found: the missing one goes last. Fewer: None.
       A `None` reply gives None.

    Returns 0-based indices: `"2 1 3"` with n = 3 -> `[1, 0, 2]`.

    Examples: `parse_ranking("2 > 3 > 1", 3)` -> `[1, 2, 0]`; `parse_ranking("2 1", 3)` ->
    `[1, 0, 2]`; `parse_ranking("2 2 1 3", 3)` -> `[1, 0, 2]`; `parse_ranking("5 1 2", 3)`
    -> `None`; `parse_ranking("2", 3)` -> `None`.
    """
    # HINT: first collect the distinct numbers in 1..n in the order they appear; decide at the end.
    # HINT: the judge numbers answers from 1, Python from 0: subtract 1 before you store an index.
    raise NotImplementedError("Exercise: replace this line with your code.")


def probe_case(question: str, answer: str) -> str:
    """A completion of your own, at most 12 characters, that a planted flaw pays like the right answer.

    A colleague's reward, `course_lib.checks.ex09.planted_reward`, pays 1.0 when "the
    completion holds the answer" and 0.0 otherwise (read its code in lesson 09 §14). Write,
    for any arithmetic `question` and its `answer` (a whole number as a string), a completion
    that:

    - is WRONG by the course's verifier (its first number is not the answer);
    - scores 1.0 under `planted_reward`, as much as the correct completion `answer`;
    - is at most 12 characters long (short and cheap: the kind of string a policy finds).

    The check tries five problems, the answer 0 among them.
    """
    # HINT: read how planted_reward decides that a completion "holds" the answer: which Python test does it use?
    # HINT: `answer in text` is a substring test: a longer number that contains the answer's digits passes it.
    raise NotImplementedError("Exercise: replace this line with your code.")
