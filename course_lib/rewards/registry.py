"""Reward functions by name, for configs and the command line.

Each entry is a ready-to-use reward function whose ``__name__`` equals its key, so the
name in a config is the name in the metrics (``rewards/<name>/mean``). Factories
(``length_reward``, ``make_correctness_reward``, ...) build variants with other settings.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .answers import correctness_reward, make_correctness_reward, number_reward, proximity_reward
from .execution import code_execution_reward
from .formats import answer_tag_format_reward, format_reward, length_reward, think_answer_format_reward
from .gsm8k import (
    gsm8k_correctness_reward,
    gsm8k_int_reward,
    gsm8k_soft_format_reward,
    gsm8k_strict_format_reward,
    gsm8k_xmlcount_reward,
)

__all__ = ["REWARD_FUNCTIONS", "get_reward_functions"]

_ENTRIES: list[Callable] = [
    length_reward(ideal_length=20),
    format_reward,
    think_answer_format_reward,
    answer_tag_format_reward,
    correctness_reward,
    make_correctness_reward("last_number", name="correctness_last_number_reward"),
    make_correctness_reward("first_number", name="correctness_first_number_reward"),
    number_reward,
    proximity_reward,
    gsm8k_correctness_reward,
    gsm8k_int_reward,
    gsm8k_soft_format_reward,
    gsm8k_strict_format_reward,
    gsm8k_xmlcount_reward,
    code_execution_reward,
]

#: Name -> reward function. ``length_reward`` here is the source notes' ideal length of 20 characters.
REWARD_FUNCTIONS: dict[str, Callable] = {f.__name__: f for f in _ENTRIES}


def get_reward_functions(names: Sequence[str | Callable]) -> list[Callable]:
    """Look reward functions up by name; callables are passed through unchanged.

    A name holding ``:`` or ``.`` is your own function, ``module:function``,
    ``module.function`` or ``file.py:function`` (``course_lib.common.user_code``), as TRL's
    ``reward_funcs`` takes dotted paths.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    from ..common.user_code import looks_like_reference, resolve_callable

    if isinstance(names, str):
        names = [names]
    functions = []
    for name in names:
        if callable(name):
            functions.append(name)
        elif name in REWARD_FUNCTIONS:
            functions.append(REWARD_FUNCTIONS[name])
        elif isinstance(name, str) and looks_like_reference(name):
            functions.append(resolve_callable(name, what=f"reward function {name!r}"))
        else:
            raise ValueError(
                f"unknown reward function {name!r}; known names: {', '.join(sorted(REWARD_FUNCTIONS))}. "
                "Pass a callable, or your own as module:function (e.g. my_rewards:my_reward)."
            )
    return functions
