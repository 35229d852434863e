"""Run a program against test cases in the sandbox: the verifier behind code rewards."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from .runner import SandboxResult, run_python

__all__ = ["VerificationReport", "run_tests"]


@dataclass(frozen=True)
class VerificationReport:
    """Per-test verdicts of ``run_tests``: ``passed[i]`` and the run behind it."""

    passed: list[bool]
    results: list[SandboxResult]

    @property
    def fraction_passed(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


def _normalize_output(text: str) -> str:
    """Compare program output line by line, ignoring trailing spaces and blank tail lines."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip()


def _assertion_program(code: str, assertion: str, marker: str) -> str:
    # The candidate runs in its own namespace; a sys.exit() there must not skip the
    # assertion, and the pass marker is printed only after the assertion ran. Sources go
    # into linecache so that tracebacks show the failing lines.
    return (
        "import linecache as _linecache\n"
        f"_sources = {{'solution.py': {code!r}, 'test.py': {assertion!r}}}\n"
        "for _name, _text in _sources.items():\n"
        "    _linecache.cache[_name] = (len(_text), None, _text.splitlines(True), _name)\n"
        "_namespace = {'__name__': '__main__'}\n"
        "try:\n"
        "    exec(compile(_sources['solution.py'], 'solution.py', 'exec'), _namespace)\n"
        "except SystemExit:\n"
        "    pass\n"
        "exec(compile(_sources['test.py'], 'test.py', 'exec'), _namespace)\n"
        f"print({marker!r})\n"
    )


def run_tests(
    code: str,
    tests: Sequence[tuple[str, str] | str],
    **run_kwargs,
) -> VerificationReport:
    """Run ``code`` against each test in a separate sandboxed process.

    Two kinds of tests, mixed freely:
    - ``(stdin_text, expected_stdout)``: the program reads stdin and must print the
      expected output (compared line by line, trailing whitespace ignored);
    - ``"assert f(2) == 4"``: the code is executed, then the assertion in the same
      namespace; the test passes only if a random marker printed after the assertion
      reaches stdout, so ``sys.exit(0)`` or ``os._exit(0)`` in the code cannot fake a pass.

    ``run_kwargs`` go to ``run_python`` (``timeout_s``, ``memory_mb``, ...), per test.
    """
    passed, results = [], []
    for index, test in enumerate(tests):
        if isinstance(test, str):
            marker = "__tests_passed_" + os.urandom(8).hex()
            result = run_python(_assertion_program(code, test, marker), **run_kwargs)
            ok = result.returncode == 0 and result.killed_reason is None and \
                result.stdout.rstrip().endswith(marker)
        elif isinstance(test, (tuple, list)) and len(test) == 2:
            stdin_text, expected = test
            result = run_python(code, stdin=str(stdin_text), **run_kwargs)
            ok = result.ok and _normalize_output(result.stdout) == _normalize_output(str(expected))
        else:
            raise TypeError(
                f"tests[{index}] must be an assertion string or a (stdin, expected_stdout) pair, "
                f"got {test!r}"
            )
        passed.append(bool(ok))
        results.append(result)
    return VerificationReport(passed=passed, results=results)
