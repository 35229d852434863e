"""Checks of lesson 13's exercises (a doctor rule; naming failures from dashboards)."""

from __future__ import annotations

from ..feedback import Hint


def _rows(values, key="completions/clipped_ratio"):
    return [{"step": i + 1, key: v} for i, v in enumerate(values)]


def _call(fn, rows, config):
    """The learner's rule on ``rows``; a KeyError or TypeError from reading a row becomes a hint."""
    try:
        return fn(rows, config)
    except KeyError as error:
        raise Hint(f"KeyError {error}: some rows lack the key (a doctor row, an eval row). Read it with "
                   "row.get('completions/clipped_ratio') and skip rows where it is missing or None.")
    except TypeError as error:
        raise Hint(f"TypeError ({error}): some rows hold None for the value (it was not finite). Keep only numbers, "
                   "e.g. isinstance(value, (int, float)), before summing.")


def check_truncation_rule(fn) -> None:
    config = {"max_completion_length": 16}
    if _call(fn, _rows([0.5, 0.5]), config) is not None:
        raise Hint("two rows are not enough: return None when fewer than 3 rows carry the value.")
    if _call(fn, _rows([0.5, 0.0, 0.0, 0.0, 0.5]), config) is not None:  # mean exactly 0.2
        raise Hint("a mean of exactly 0.2 must not fire: the rule fires only above 0.2.")
    message = _call(fn, _rows([0.4, 0.4, 0.4]), config)
    if message is None:
        raise Hint("three rows at 0.4 (mean 0.4 > 0.2) must fire.")
    if not isinstance(message, str):
        raise Hint(f"return the message as a string (or None); got {type(message).__name__} {message!r}.")
    if "40%" not in message or "max_completion_length=32" not in message:
        raise Hint(f"the message must hold '40%' and 'max_completion_length=32' (twice 16); got {message!r}.")
    # Ten recent rows at 0.1 after ten at 1.0: only the last 10 count -> mean 0.1, silent.
    if _call(fn, _rows([1.0] * 10 + [0.1] * 10), config) is not None:
        raise Hint("only the LAST 10 rows that carry the value count: take [-10:] of the values.")
    # The last 10 VALUES, not the last 10 rows: seven values at 0.0, then three at 0.5 among seven rows
    # without the key. The last 10 values average 0.15 (silent); the last 10 rows hold only the three 0.5s.
    tail = []
    for i, v in enumerate([0.5, 0.5, 0.5]):
        tail += [{"step": 8 + 3 * i, "loss": 0.1}, {"step": 9 + 3 * i, "loss": 0.1},
                 {"step": 10 + 3 * i, "completions/clipped_ratio": v}]
    sparse = _rows([0.0] * 7) + tail + [{"step": 17, "type": "doctor"}]
    if _call(fn, sparse, config) is not None:
        raise Hint("the window is the last 10 rows that CARRY the value, not the last 10 rows: here rows without the "
                   "key sit among the recent ones, so rows[-10:] holds only 3 values (mean 0.5) while the last 10 "
                   "values average 0.15. Filter the values first, then take [-10:].")
    # Rows without the key and rows with None are skipped, not read as 0.
    mixed = _rows([0.6, None, 0.6]) + [{"step": 4, "loss": 0.1}, {"step": 5, "completions/clipped_ratio": 0.6}]
    message = _call(fn, mixed, {})
    if message is None:
        raise Hint("skip rows without the key or with None: here three rows at 0.6 remain, so the rule fires.")
    if "45%" in message or "36%" in message:
        raise Hint(f"a missing value or None was read as 0 (three values at 0.6 and one 0 make 45%; two 0s make "
                   f"36%): skip such rows, so the mean of the three values is 60%. Got {message!r}.")
    if "60%" not in message:
        raise Hint(f"three rows at 0.6 remain after skipping the others, so the message must hold '60%'; "
                   f"got {message!r}.")
    if "a larger max_completion_length" not in message:
        raise Hint(f"with no max_completion_length in the config, say 'a larger max_completion_length'; got {message!r}.")


_ANSWER = {"A": "policy_moves_too_fast", "B": "completions_truncated", "C": "sampler_mismatch",
           "D": "zero_spread_groups"}
_LOOK_AT = {"A": "the clip fraction (clip_ratio/region_mean) and grad_norm",
            "B": "completions/clipped_ratio and completions/mean_length",
            "C": "sampling/sampling_logp_difference/mean",
            "D": "frac_reward_zero_std (most groups alike) and entropy (near 0)"}


def check_name_the_failures(fn, failures) -> None:
    answer = fn()
    if not isinstance(answer, dict) or set(answer) != set(_ANSWER):
        raise Hint(f"return a dict with the keys {sorted(_ANSWER)}; got {answer!r}.")
    unknown = {k: v for k, v in answer.items() if v not in failures}
    if unknown:
        raise Hint(f"{unknown}: each value must be one of {list(failures)}.")
    wrong = sorted(k for k in _ANSWER if answer[k] != _ANSWER[k])
    if wrong:
        raise Hint("; ".join(f"dashboard {k}: not {answer[k]}. Look again at {_LOOK_AT[k]}" for k in wrong) + ".")
