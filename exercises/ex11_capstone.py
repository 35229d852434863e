# This file is generated from solutions/ex11_capstone.py by `python -m course_lib make-stubs`.
# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.
"""Lesson 11 exercises: a verifier and a reward for a new task, and a sanity check of a run's config.

The new task is sorting: the prompt lists integers, the model must answer them in
ascending order. `verify_sorted` is the verifier (right or wrong); `sorting_reward`
turns it into a reward with partial credit; `config_warnings` encodes the practical
advice of the course about GRPO runs.
"""

import re

from course_lib.rewards import completion_text

_INTEGER = re.compile(r"-?\d+")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def read_numbers(text: str) -> list[int]:
    """The integers of the model's final answer, in order (given: not an exercise).

    The final answer is the content of the LAST `<answer>...</answer>` pair when the text
    has one, else the whole text. Example: `"I think <answer>3, 5, 9</answer>"` gives
    `[3, 5, 9]`; `"-2 then 7"` gives `[-2, 7]`; `"none"` gives `[]`.
    """
    tagged = _ANSWER_TAG.findall(text)
    return [int(n) for n in _INTEGER.findall(tagged[-1] if tagged else text)]


def verify_sorted(text: str, reference: str) -> bool:
    """The verifier of the sorting task: is the final answer exactly the reference list?

    Args:
        text: the completion's text.
        reference: the expected list, written like `"3, 5, 9"` (any separators).

    True when `read_numbers(text)` equals the integers of `reference`, in the same
    order, with nothing missing and nothing extra. A verifier gives no score, only right
    or wrong. Examples with reference `"3, 5, 9"`: `"<answer>3, 5, 9</answer>"` -> True;
    `"3 5 9"` -> True; `"<answer>5, 3, 9</answer>"` -> False; `"3, 5"` -> False.
    """
    # HINT: read_numbers(...) on both sides, then compare the two lists.
    raise NotImplementedError("Exercise: replace this line with your code.")


def sorting_reward(prompts=None, completions=(), answer=(), **kwargs) -> list[float]:
    """A reward function (TRL's signature) for the sorting task, with partial credit.

    For each completion (a string, or a list of chat messages: use `completion_text`)
    and its reference in the `answer` column, with `predicted = read_numbers(text)` and
    `expected` the reference's integers:

    - 1.0 when `verify_sorted(text, reference)` holds;
    - 0.0 when `predicted` is empty (no number at all);
    - otherwise the partial credit
      `0.3 * same_numbers + 0.3 * matches / max(len(predicted), len(expected))`, where
      `same_numbers` is 1 when `predicted` holds exactly the reference's numbers in some
      order (`sorted(predicted) == sorted(expected)`), else 0, and `matches` counts the
      positions `i` where `predicted[i] == expected[i]`.

    A wrong answer thus scores below 0.6, and the right numbers in the wrong order beat
    arbitrary numbers. Example, reference `"3, 5, 9"`: `"3, 5, 9"` -> 1.0;
    `"5, 3, 9"` -> 0.3 + 0.3 * 1/3 = 0.4; `"3, 5"` -> 0.3 * 2/3 = 0.2; `"no idea"` -> 0.0.

    Returns:
        One float per completion.
    """
    # HINT: the denominator is the LONGER of the two lists, so extra numbers cost credit too.
    raise NotImplementedError("Exercise: replace this line with your code.")


def config_warnings(config, num_train_rows: int, model_billions: float) -> set[str]:
    """The course's practical advice about a GRPO run, as a set of warning codes.

    Args:
        config: a `course_lib.config.GRPOConfig`.
        num_train_rows: prompts in the training set.
        model_billions: the policy's size in billions of parameters.

    Return the set of the codes whose condition holds (an empty set for a run that
    follows every piece of advice):

    - `"few_generations"`: `config.num_generations < 4` (2 or 3 completions per prompt
      give too little diversity to compare; 4 to 16 is the recommended range);
    - `"low_temperature"`: `config.temperature < 0.7` (the completions of a group must
      differ for GRPO to learn anything);
    - `"few_steps"`: `config.max_steps < 300` (rewards on a real task need at least about
      300 steps to move);
    - `"few_rows"`: `num_train_rows < 500` (at least 500 rows give the best results);
    - `"small_model"`: `model_billions < 1.5` (smaller models may not learn to produce
      proper thinking tokens).

    Example: TRL's defaults (`num_generations=8`, `temperature=1.0`) with
    `max_steps=100`, 200 rows and a 0.5B model give
    `{"few_steps", "few_rows", "small_model"}`.
    """
    # HINT: one `if` per code; each condition is a plain comparison on the arguments.
    raise NotImplementedError("Exercise: replace this line with your code.")
