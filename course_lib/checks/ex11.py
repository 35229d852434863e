"""Checks for lesson 11 (capstone): the sorting verifier and reward, and the config advice.

Expected values are hand-worked on hand-written completions (every scoring rule of the
docstrings has a case of its own) and on configs built with `course_lib.config`.
"""

from __future__ import annotations

import warnings

from ..config import ConfigWarning
from ..algos import GRPOConfig
from ..feedback import Hint, assert_close

REFERENCE = "3, 5, 9"

# (completion text, verify_sorted, sorting_reward, what the case tests)
SORTING_CASES = [
    ("<answer>3, 5, 9</answer>", True, 1.0, "the right list in tags"),
    ("3 5 9", True, 1.0, "the right list without tags, other separators"),
    ("First 9, 3, 5 then sorted: <answer>3,5,9</answer>", True, 1.0,
     "working before the tags: only the tag's content is the answer"),
    ("<answer>1, 2</answer> no wait <answer>3, 5, 9</answer>", True, 1.0, "two tag pairs: the last one counts"),
    ("<answer>5, 3, 9</answer>", False, 0.3 + 0.3 * 1 / 3, "right numbers, wrong order"),
    ("<answer>9, 5, 3</answer>", False, 0.3 + 0.3 * 1 / 3, "descending instead of ascending"),
    ("3, 5", False, 0.3 * 2 / 3, "a number missing"),
    ("3, 5, 9, 9", False, 0.3 * 3 / 4, "an extra number (the denominator is the longer list)"),
    ("<answer>3, 5, 8</answer>", False, 0.3 * 2 / 3, "one wrong number"),
    ("no idea", False, 0.0, "no number at all"),
    ("<answer></answer>", False, 0.0, "empty tags"),
    ("<answer>-3, 5, 9</answer>", False, 0.3 * 2 / 3, "a sign matters"),
]


def check_verify_sorted(fn) -> None:
    for text, expected, _, label in SORTING_CASES:
        got = fn(text, REFERENCE)
        if not isinstance(got, bool):
            raise Hint(f"verify_sorted must return True or False (a verifier gives no score); got {got!r} "
                       f"for {text!r}.")
        if got != expected:
            hint = ""
            if label.startswith("right numbers") or label.startswith("descending"):
                hint = " The order matters: compare the lists, not sorted copies or sets."
            elif "last one" in label or "only the tag" in label:
                hint = " Read the answer with read_numbers(text): it takes the last <answer> pair."
            elif "missing" in label or "extra" in label:
                hint = " Every number must match: nothing missing, nothing extra."
            raise Hint(f"verify_sorted({text!r}, {REFERENCE!r}) should be {expected} ({label}).{hint}")
    if not fn("<answer>-4, 0, 12</answer>", "-4 0 12"):
        raise Hint("verify_sorted('<answer>-4, 0, 12</answer>', '-4 0 12') should be True: parse the reference's "
                   "integers too (any separators, negative numbers included).")


def check_sorting_reward(fn) -> None:
    texts = [text for text, _, _, _ in SORTING_CASES]
    got = fn(prompts=[[{"role": "user", "content": "Sort: 9, 3, 5"}]] * len(texts), completions=texts,
             answer=[REFERENCE] * len(texts))
    got = list(got)
    if len(got) != len(texts):
        raise Hint(f"return one reward per completion: {len(texts)} completions, got {len(got)} rewards.")
    for (text, _, expected, label), value in zip(SORTING_CASES, got):
        mistakes = {}
        if label.startswith("an extra"):
            mistakes["divided the matches by the reference's length; use the longer of the two lists, so "
                     "extra numbers cost credit."] = 0.3
            mistakes["compared sets for the 0.3 of the right numbers: set([3, 5, 9, 9]) == set([3, 5, 9]), but the "
                     "answer has an extra 9. Compare sorted lists, sorted(predicted) == sorted(expected), so that "
                     "repeated numbers count."] = 0.3 + 0.3 * 3 / 4
        if label.startswith("a number missing"):
            mistakes["divided the matches by the answer's length (2); use the longer of the two lists (3), so "
                     "missing numbers cost credit."] = 0.3
        if label.startswith("right numbers") or label.startswith("descending"):
            mistakes["forgot the 0.3 for the right numbers in another order (sorted(predicted) == "
                     "sorted(expected))."] = 0.3 * 1 / 3
        assert_close(value, expected, name=f"sorting_reward for {text!r} ({label})", atol=1e-9, hints=mistakes)

    # Conversational completions and several references in one batch, as the trainer sends them.
    completions = [[{"role": "assistant", "content": "<answer>1, 2, 3</answer>"}],
                   [{"role": "assistant", "content": "<answer>2, 10</answer>"}]]
    got = list(fn(prompts=[None, None], completions=completions, answer=["1, 2, 3", "10, 2"]))
    if len(got) != 2:
        raise Hint("return one reward per completion.")
    assert_close(got, [1.0, 0.3], name="conversational completions with references '1, 2, 3' and '10, 2'",
                 atol=1e-9, hints={"the completions are lists of chat messages here: read their text with "
                                   "course_lib.rewards.completion_text(completion).": [0.0, 0.0]})
    # A multi-turn completion (an agent's trajectory): only the last assistant message is the answer.
    trajectory = [{"role": "assistant", "content": "First try: <answer>9, 5, 3</answer>"},
                  {"role": "tool", "content": "descending; the task asks for ascending"},
                  {"role": "assistant", "content": "3, 5, 9"}]
    got = list(fn(prompts=[None], completions=[trajectory], answer=[REFERENCE]))
    assert_close(got, [1.0], name="a conversational completion of three messages whose last assistant turn says "
                 "'3, 5, 9'", atol=1e-9,
                 hints={"the reward read the whole message list (str(completion) or every message's text): an "
                        "earlier turn's <answer> tags were taken for the answer. Read the completion's text with "
                        "course_lib.rewards.completion_text(completion), the last assistant message.":
                        [0.3 + 0.3 * 1 / 3]})
    # Extra dataset columns arrive as keyword arguments and must be accepted.
    try:
        fn(prompts=[None], completions=["3, 5, 9"], answer=[REFERENCE], question=["Sort: 9, 3, 5"],
           completion_ids=[[1, 2, 3]])
    except TypeError as error:
        if "argument" not in str(error):
            raise
        raise Hint(f"the trainer passes every dataset column as a keyword (here question=..., completion_ids=...): "
                   f"end the signature with **kwargs. ({error})")


def _config(**overrides) -> GRPOConfig:
    settings = dict(num_generations=8, per_device_train_batch_size=8, temperature=1.0, max_steps=500)
    settings.update(overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return GRPOConfig(**settings)


RULES = {
    "few_generations": "num_generations < 4",
    "low_temperature": "temperature < 0.7",
    "few_steps": "max_steps < 300",
    "few_rows": "num_train_rows < 500",
    "small_model": "model_billions < 1.5",
}


def check_config_warnings(fn) -> None:
    cases = [
        ("a run that follows every piece of advice", _config(), 1000, 3.0, set()),
        ("the docstring's example", _config(max_steps=100), 200, 0.5, {"few_steps", "few_rows", "small_model"}),
        ("3 generations, temperature 0.5", _config(num_generations=3, per_device_train_batch_size=6,
                                                   temperature=0.5), 800, 7.0,
         {"few_generations", "low_temperature"}),
        ("boundaries: 4 generations, temperature 0.7, 300 steps, 500 rows, 1.5B", _config(
            num_generations=4, temperature=0.7, max_steps=300), 500, 1.5, set()),
        # A KL term beside the truncation mask stays finite (TRL 1.16 and course_lib clamp every
        # masked count at 1), so it is not a warning.
        ("DAPO's truncation mask with a KL term", _config(mask_truncated_completions=True, beta=0.04), 600, 8.0,
         set()),
        ("the course's fast run", _config(num_generations=8, per_device_train_batch_size=16, max_steps=12),
         256, 0.0009, {"few_steps", "few_rows", "small_model"}),
        ("2 generations at temperature 0.3", _config(num_generations=2, per_device_train_batch_size=4,
                                                     temperature=0.3), 5000, 2.0,
         {"few_generations", "low_temperature"}),
    ]
    for label, config, rows, billions, expected in cases:
        got = fn(config, rows, billions)
        if not isinstance(got, (set, frozenset)):
            raise Hint(f"return a set of warning codes; got {type(got).__name__} {got!r}.")
        if set(got) != expected:
            missing, extra = sorted(expected - set(got)), sorted(set(got) - expected)
            unknown = [code for code in extra if code not in RULES]
            parts = [f"config_warnings for {label} (num_train_rows={rows}, model_billions={billions}) "
                     f"should be {sorted(expected)}, got {sorted(got)}."]
            if unknown:
                parts.append(f"Unknown codes {unknown}: use exactly {sorted(RULES)}.")
            parts += [f"Missing {code!r}: its rule is {RULES[code]}." for code in missing]
            parts += [f"Extra {code!r}: its rule is {RULES[code]} (strictly), which does not hold here."
                      for code in extra if code in RULES]
            raise Hint(" ".join(parts))
