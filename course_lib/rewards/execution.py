"""A code verifier as a reward: run the completion's Python against test cases.

The completion is expected to hold a fenced Python block (```` ```python ... ``` ````);
its last such block is executed in ``course_lib.sandbox`` once per test, and the reward
is the fraction of tests passed (0.0 to 1.0), the usual "unit tests as verifier" of
code RLVR. Tests come from a dataset column, one list per row, each test either
``(stdin, expected_stdout)`` or an assertion string such as ``"assert add(2, 3) == 5"``.

Simplifications: one sandboxed process per test (robust to crashes and timeouts, about
60-100 ms of start-up each), no partial credit inside a test, Python only. The sandbox
runs the code behind bubblewrap namespaces and refuses (``SandboxUnavailableError``) on
a machine where it cannot; read its package docstring for what each guard stops.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..sandbox import run_tests
from .extract import completion_text, extract_code_block

__all__ = ["make_code_execution_reward", "code_execution_reward", "parse_tests"]


def parse_tests(value: Any) -> list:
    """One row of a tests column as a list of tests.

    Accepts a list of assertion strings and/or ``[stdin, expected]`` pairs, or the same
    encoded as a JSON string (datasets often store nested lists as text); a plain string
    that is not JSON is one assertion. None or an empty list -> ``[]``.
    """
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
        if isinstance(value, str):
            return [value]
    if not isinstance(value, (list, tuple)):  # a dict would iterate over its keys
        raise ValueError(f"a tests cell must be a list of tests (assertion strings or [stdin, expected_stdout] "
                         f"pairs), got a {type(value).__name__}: {str(value)[:80]}")
    tests = []
    for test in value:
        if isinstance(test, str):
            tests.append(test)
        elif isinstance(test, (list, tuple)) and len(test) == 2:
            tests.append((str(test[0]), str(test[1])))
        else:
            raise ValueError(
                f"a test must be an assertion string or a [stdin, expected_stdout] pair, got {test!r}"
            )
    return tests


def make_code_execution_reward(
    tests_column: str = "tests",
    *,
    timeout_s: float = 2.0,
    memory_mb: int = 256,
    max_workers: int | None = None,
    name: str = "code_execution_reward",
    isolation: str = "os",
) -> Callable:
    """Build a reward: fraction of the row's tests that the completion's code passes.

    Args:
        tests_column: dataset column with the tests of each row (see ``parse_tests``).
        timeout_s, memory_mb: limits of each sandboxed run.
        max_workers: completions verified in parallel (threads waiting on child
            processes); default ``min(4, os.cpu_count())``.
        name: the ``__name__`` shown in metrics.
        isolation: ``"os"`` (default) runs each program in the bubblewrap sandbox and
            refuses where there is none; ``"process"`` runs it as a plain child process
            with rlimits and the audit hook, which is no security boundary: only for
            programs you wrote or read yourself (lesson 09 uses it for its own examples on
            machines without bubblewrap), never for model output.

    Returns:
        A reward function: 0.0 when the completion has no Python block, None when the
        row has no tests (not applicable), else passed / total in [0, 1]. Calling it
        raises ``SandboxUnavailableError`` where no OS isolation is available.
    """
    if isolation not in ("os", "process"):
        raise ValueError(f"isolation must be 'os' (the sandbox) or 'process' (your own code only), got {isolation!r}")
    workers = max_workers or min(4, os.cpu_count() or 1)

    def score(completion: Any, tests_value: Any) -> float | None:
        tests = parse_tests(tests_value)
        if not tests:
            return None
        code = extract_code_block(completion_text(completion))
        if code is None:
            return 0.0
        return run_tests(code, tests, timeout_s=timeout_s, memory_mb=memory_mb,
                         isolation=isolation).fraction_passed

    def reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
        if tests_column not in kwargs:
            raise KeyError(
                f"{name} reads its tests from the dataset column {tests_column!r}, which was not passed; "
                f"columns given: {sorted(kwargs)}. Build it with make_code_execution_reward(tests_column=...)."
            )
        rows = list(kwargs[tests_column])
        if len(rows) != len(completions):
            raise ValueError(f"column {tests_column!r} has {len(rows)} values for {len(completions)} completions")
        if workers == 1 or len(completions) <= 1:
            return [score(c, t) for c, t in zip(completions, rows)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(score, completions, rows))

    reward.__name__ = reward.__qualname__ = name
    reward.required_columns = (tests_column,)  # read by checks that a dataset can feed this reward
    # Read by the trainer, which refuses to start without the sandbox: otherwise a run whose completions
    # hold no code block yet would score 0 silently until the first one reached the sandbox.
    reward.needs_sandbox = isolation == "os"
    return reward


code_execution_reward = make_code_execution_reward()
