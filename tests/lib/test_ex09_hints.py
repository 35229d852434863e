"""Lesson 09's new graders name the typical mistakes of the ranking parser and the probe case."""

import re

import pytest

from course_lib.checks import ex09
from course_lib.feedback import Hint


def _hint(check, fn) -> str:
    with pytest.raises(Hint) as caught:
        check(fn)
    return str(caught.value)


def one_based(reply, n):
    if reply is None:
        return None
    seen = []
    for k in map(int, re.findall(r"\d+", reply)):
        if 1 <= k <= n and k not in seen:
            seen.append(k)
    return seen if len(seen) == n else None


def keeps_repeats(reply, n):
    if not reply:
        return None
    found = [int(k) - 1 for k in re.findall(r"\d+", reply)][:n]
    return found if len(found) == n and all(0 <= k < n for k in found) else None


def test_ranking_hints_name_the_mistake():
    assert "0-based" in _hint(ex09.check_parse_ranking, one_based)
    assert "first mention" in _hint(ex09.check_parse_ranking, keeps_repeats)


def test_probe_case_hints_name_the_mistake():
    assert "right answer by the verifier" in _hint(ex09.check_probe_case, lambda q, a: a)
    assert "does not catch the flaw" in _hint(ex09.check_probe_case, lambda q, a: "I don't know")
    assert "12 or fewer" in _hint(ex09.check_probe_case, lambda q, a: "Let me count: 0, 1, 2, " + a)
    # the answer 0 is the trap: "00" is still 0 by the verifier
    assert "right answer by the verifier" in _hint(ex09.check_probe_case, lambda q, a: a + "0")
