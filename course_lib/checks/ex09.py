"""Checks for lesson 09 (rewards and verifiers): answer extraction, the think/answer format
reward, a proximity score, combining reward functions with TRL's None rules, a judge's group
ranking, and a probe case that catches a planted flaw.

Expected values are hand-written cases (each built to catch one typical mistake: a
missing `re.DOTALL`, `re.match` instead of `re.search`, an off-by-one threshold, no
floor, a division by a zero reference, a 0 where NaN belongs) and, where the course
library implements the same rule, its independent implementation
(`course_lib.rewards.think_answer_format_reward`, `proximity_score`,
`course_lib.rewards.combine_rewards`, `course_lib.judge.parse_group_ranking`).
"""

from __future__ import annotations

import math

import torch

from ..rewards import combine_rewards as library_combine_rewards
from ..rewards import proximity_score as library_proximity_score
from ..rewards import think_answer_format_reward
from ..rewards.answers import is_correct
from ..judge import parse_group_ranking
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


# (reply, n, {wrong result a typical mistake gives: diagnosis})
_RANKING_CASES = [
    ("2 1 3", 3, {(2, 1, 3): "return 0-based indices: the judge's answer 1 is index 0 (subtract 1).",
                  (1, 0, 2, 0): "stop at n numbers."}),
    ("2 > 3 > 1", 3, {(2, 3, 1): "return 0-based indices: the judge's answer 1 is index 0 (subtract 1)."}),
    ("Ranking: [3], [1], [2]", 3, {}),
    ("2 2 1 3", 3, {(1, 1, 0): "a repeated number adds nothing: keep the first mention of each answer.",
                    (1, 1, 0, 2): "a repeated number adds nothing: keep the first mention of each answer."}),
    ("2 1", 3, {None: "n - 1 answers ranked: the missing one is last, the ranking is still usable.",
                (1, 0): "n - 1 answers ranked: append the missing one at the end so every answer gets a rank."}),
    ("2", 3, {(1, 0, 2): "one answer of three is not a ranking: return None (unscorable).",
              (1,): "one answer of three is not a ranking: return None (unscorable)."}),
    ("5 1 2", 3, {(0, 1, 2): "a number outside 1..n before the ranking is complete makes the reply unusable: None.",
                  (4, 0, 1): "a number outside 1..n before the ranking is complete makes the reply unusable: None."}),
    ("1 2 3 9", 3, {None: "once all n answers are ranked, later numbers are ignored."}),
    ("", 2, {(0, 1): "an empty reply ranks nothing: None."}),
    (None, 2, {}),
    ("Answer 1 is best", 2, {None: "n - 1 answers ranked: the missing one is last."}),
    ("1", 1, {}),
]


def check_parse_ranking(fn) -> None:
    for reply, n, mistakes in _RANKING_CASES:
        expected = parse_group_ranking(reply, n)
        got = fn(reply, n)
        got_key = None if got is None else tuple(int(k) for k in got)
        if got_key == (None if expected is None else tuple(expected)):
            continue
        if got_key in mistakes:
            raise Hint(f"parse_ranking({reply!r}, {n}) returned {got!r}: {mistakes[got_key]}")
        raise Hint(f"parse_ranking({reply!r}, {n}): expected {expected!r}, got {got!r}.")


def planted_reward(prompts=None, completions=(), answer=(), **kwargs) -> list[float]:
    """The planted flaw of lesson 09 §14: 1.0 when "the completion holds the answer" (a substring test)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if str(a) in text else 0.0 for text, a in zip(texts, answer)]


_PROBLEMS = [("What is 47 + 46?", "93"), ("What is 12 + 30?", "42"), ("What is 91 + 9?", "100"),
             ("What is 5 + 2?", "7"), ("What is 60 - 60?", "0")]


def check_probe_case(fn) -> None:
    for question, answer in _PROBLEMS:
        text = fn(question, answer)
        if not isinstance(text, str):
            raise Hint(f"probe_case({question!r}, {answer!r}) returned {text!r}: return the completion as a string.")
        if len(text) > 12:
            raise Hint(f"probe_case({question!r}, {answer!r}) is {len(text)} characters: keep it to 12 or fewer "
                       "(the kind of short string a policy finds).")
        if is_correct(text, answer):
            raise Hint(f"probe_case({question!r}, {answer!r}) = {text!r} is a right answer by the verifier (its "
                       "first number is the answer): a probe case must be wrong and still paid.")
        paid = planted_reward(completions=[text, answer], answer=[answer, answer])
        if paid[0] < paid[1]:
            raise Hint(f"probe_case({question!r}, {answer!r}) = {text!r} scores {paid[0]} under planted_reward, "
                       f"less than the right answer's {paid[1]}: it does not catch the flaw. Read how planted_reward "
                       "decides that a completion holds the answer.")
