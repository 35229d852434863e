"""Checks for lesson 09 (rewards and verifiers): answer extraction, the think/answer format
reward, a proximity score, and combining reward functions with TRL's None rules.

Expected values are hand-written cases (each built to catch one typical mistake: a
missing `re.DOTALL`, `re.match` instead of `re.search`, an off-by-one threshold, no
floor, a division by a zero reference, a 0 where NaN belongs) and, where the course
library implements the same rule, its independent implementation
(`course_lib.rewards.think_answer_format_reward`, `proximity_score`,
`course_lib.rewards.combine_rewards`).
"""

from __future__ import annotations

import math

import torch

from ..rewards import combine_rewards as library_combine_rewards
from ..rewards import proximity_score as library_proximity_score
from ..rewards import think_answer_format_reward
from ..feedback import Hint, assert_close

# (text, expected, {wrong answer a typical mistake gives: diagnosis})
_EXTRACT_CASES = [
    ("<answer> 42 </answer>", "42", {" 42 ": "strip the whitespace around the tag's content."}),
    ("3 apples, then 5", "5", {"3": "took the first number; the answer is usually the LAST number a model writes.",
                               None: "no tag: fall back to the last number in the text."}),
    ("<answer>7</answer> and then 9", "7", {"9": "the tag wins over loose numbers: look for <answer> first."}),
    ("no idea", None, {"": "return None (not an empty string) when there is neither a tag nor a number."}),
    ("<answer>\nseven\n</answer> after 3 tries", "seven",
     {"3": "a multi-line tag was missed: without re.DOTALL, '.' does not match a newline.",
      "\nseven\n": "strip the whitespace (newlines too) around the tag's content."}),
    ("<think>1 + 1</think><answer>2</answer> no wait <answer>3</answer>", "3",
     {"2": "took the first <answer> pair; the model's final answer is the LAST pair.",
      "2</answer> no wait <answer>3": "the match is greedy: use (.*?) so a tag ends at the first </answer>."}),
    ("so x = -3", "-3", {"3": "keep the minus sign: the number pattern is -?\\d+(\\.\\d+)?."}),
    ("about 2.5 apples", "2.5", {"5": "keep the decimal part: the number pattern is -?\\d+(\\.\\d+)?.",
                                 "2": "keep the decimal part: the number pattern is -?\\d+(\\.\\d+)?."}),
    ("<answer>5 and no closing tag", "5", {None: "an unclosed tag is not a tag: fall back to the last number."}),
    ("<answer>seven</answer> or 7", "seven", {"7": "the tag wins even when it holds a word."}),
]


def check_extract_answer(fn) -> None:
    for text, expected, mistakes in _EXTRACT_CASES:
        got = fn(text)
        if got == expected:
            continue
        if got in mistakes:
            raise Hint(f"extract_answer({text!r}) returned {got!r}: {mistakes[got]}")
        raise Hint(f"extract_answer({text!r}): expected {expected!r}, got {got!r}.")


_REASONING = "add the tens, then the units"  # 28 characters: enough reasoning
_FORMAT_CASES = [
    (f"<think>{_REASONING}</think><answer>42</answer>", 1.0, {}),
    ("<think>hmm</think><answer>42</answer>", 0.5, {1.0: "20 characters or fewer of reasoning is thin: 0.5."}),
    ("42", 0.0, {}),
    ("<think>First, 40 + 2 = 42.\nThen check: 42 - 2 = 40.</think><answer>42</answer>", 1.0,
     {0.0: "multi-line reasoning scored 0: without re.DOTALL, '.' stops at a newline."}),
    (f"Sure! <think>{_REASONING}</think><answer>42</answer>", 1.0,
     {0.0: "text before <think> scored 0: re.match only matches at the start; use re.search."}),
    ("<think>" + "a" * 20 + "</think><answer>1</answer>", 0.5,
     {1.0: "exactly 20 characters of reasoning scored 1.0; the rule is MORE than 20 (> 20, not >= 20)."}),
    ("<think>" + " " * 30 + "ok</think><answer>1</answer>", 0.5,
     {1.0: "whitespace counted as reasoning: measure len(T.strip()), not len(T)."}),
    (f"<think>{_REASONING}</think><answer>   </answer>", 0.5,
     {1.0: "an answer of only spaces is empty: test A.strip()."}),
    (f"<think>{_REASONING}</think><answer>42", 0.0, {}),
    (f"<think>{_REASONING}</think>  \n <answer>42</answer>", 1.0,
     {0.0: "whitespace between </think> and <answer> is allowed: put \\s* between them."}),
    (f"<think>{_REASONING}</think><answer>\n42\n</answer>", 1.0,
     {0.0: "a multi-line answer scored 0: use re.DOTALL."}),
]


def check_partial_format_reward(fn) -> None:
    completions = [text for text, _, _ in _FORMAT_CASES]
    got = fn(list(completions))
    if not isinstance(got, (list, tuple)) or len(got) != len(completions):
        raise Hint(f"return one float per completion ({len(completions)}), got {got!r}.")
    for (text, expected, mistakes), value in zip(_FORMAT_CASES, got):
        if value == expected:
            continue
        if value in mistakes:
            raise Hint(f"partial_format_reward on {text!r} gave {value}: {mistakes[value]}")
        raise Hint(f"partial_format_reward on {text!r}: expected {expected}, got {value}.")
    # The same rule as the course library's reward function, on the same texts.
    library = think_answer_format_reward(completions=completions)
    assert_close(got, library, name="partial_format_reward vs course_lib.rewards.think_answer_format_reward")
    if fn([]) != []:
        raise Hint("no completions: return an empty list.")


def check_proximity_score(fn) -> None:
    hand = [(9, 10, 0.9), (3, 10, 0.3), (20, 10, 0.0), (10, 10, 1.0), (0.5, 0, 0.5), (-9, -10, 0.9), (1000, 10, -0.5),
            (990, 1000, 0.99)]
    for predicted, reference, expected in hand:
        try:
            got = fn(predicted, reference)
        except ZeroDivisionError as error:
            raise Hint(f"proximity_score({predicted}, {reference}) divided by zero: divide by max(|reference|, 1), "
                       "so a reference of 0 uses the absolute distance.") from error
        if math.isclose(got, expected, abs_tol=1e-9):
            continue
        if predicted == 1000 and got < -0.5:
            raise Hint(f"proximity_score(1000, 10) = {got}: apply the floor, max(-0.5, ...), so every far-off "
                       "number is equally wrong.")
        if math.isclose(got, max(-0.5, 1 - abs(predicted - reference)), abs_tol=1e-9):
            raise Hint(f"proximity_score({predicted}, {reference}) = {got}: that is the absolute distance; use the "
                       "relative one, |x - y| / max(|y|, 1), so that off by 10 on 1000 is a near miss (0.99).")
        if predicted == 0.5 and math.isclose(got, 1.0):
            raise Hint("proximity_score(0.5, 0) = 1.0: compare the numbers themselves, not rounded ones.")
        raise Hint(f"proximity_score({predicted}, {reference}): expected {expected}, got {got}.")
    if fn(9, 10) <= fn(3, 10):
        raise Hint("9 for 10 must score higher than 3 for 10.")
    missing = fn(None, 10)
    if missing != -1.0:
        raise Hint(f"proximity_score(None, 10) = {missing}: no number at all scores -1.0, below the floor, so any "
                   "number beats no number.")
    # The library's own implementation of the same shape, on a grid of values.
    for reference in (0, 1, -3, 7.5, 120):
        for predicted in (-200, -3, -0.5, 0, 0.25, 1, 6, 7.5, 8, 119, 125, 300):
            assert_close(fn(predicted, reference), library_proximity_score(predicted, reference),
                         name=f"proximity_score({predicted}, {reference})")


def _as_matrix(per_func: list[list[float | None]]) -> torch.Tensor:
    return torch.tensor([[math.nan if v is None else v for v in values] for values in per_func],
                        dtype=torch.float64).T  # (B, F)


def check_combine_rewards(fn) -> None:
    per_func = [[1.0, None, None], [0.5, 2.0, None]]
    got = fn(per_func, [2.0, 1.0])
    if not isinstance(got, (list, tuple, torch.Tensor)) or len(got) != 3:
        raise Hint(f"return one total per completion (3 here; per_func[f][b] is function f, completion b), got "
                   f"{got!r}.")
    values = [float(v) for v in got]
    if values[2] == 0.0:
        raise Hint("a completion where every function returned None got 0; it has no score at all: return NaN "
                   "(TRL warns about it, and a 0 would drag its group's baseline).")
    if math.isnan(values[1]):
        raise Hint("a completion where only SOME functions returned None got NaN: skip the None entries (a "
                   "nansum), they mean 'not applicable'.")
    if values[0] == 1.5:
        raise Hint("the weights were ignored: total = sum of weight_f * reward_f.")
    assert_close(values, [2.5, 2.0, math.nan], name="combine_rewards([[1, None, None], [0.5, 2, None]], [2, 1])")

    generator = torch.Generator().manual_seed(9)
    for num_funcs, batch, weights in ((3, 8, [1.0, -0.5, 2.0]), (2, 6, None), (1, 4, [3.0])):
        matrix = torch.randn(num_funcs, batch, generator=generator, dtype=torch.float64)
        holes = torch.rand(num_funcs, batch, generator=generator) < 0.35
        per_func = [[None if holes[f, b] else float(matrix[f, b]) for b in range(batch)] for f in range(num_funcs)]
        expected = library_combine_rewards(_as_matrix(per_func), weights)
        got = fn([list(v) for v in per_func], None if weights is None else list(weights))
        assert_close([float(v) for v in got], expected,
                     name=f"combine_rewards on {num_funcs} functions x {batch} completions, weights={weights}")
