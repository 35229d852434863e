"""The `exercise` fixture: load a lesson's module from exercises/ or solutions/."""
import functools

import pytest

from course_lib.grading import load_exercise, selected_impl


@pytest.fixture
def impl(request) -> str:
    return selected_impl(request.config.getoption("--impl"))


@pytest.fixture
def exercise(impl):
    """`exercise("ex05_grpo")` returns the learner's (or the reference) module."""
    return functools.partial(load_exercise, impl=impl)
