"""The sandbox where bubblewrap is missing: a clear refusal, and the process-level mode for trusted code.

These run on every Linux machine, with or without bubblewrap. ``isolation="process"`` is no
security boundary (the child runs as this user, sees this file system); lesson 09 uses it to
show the verifier on the course's own examples where the real sandbox cannot run.
"""

from __future__ import annotations

import sys

import pytest

from course_lib.sandbox import INSTALL_HINT, SandboxUnavailableError, isolation, run_python, run_tests, runner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox uses Linux rlimits")


@pytest.fixture
def no_bubblewrap(monkeypatch, tmp_path):
    """This process sees a PATH without bwrap (an empty folder), as on a fresh machine."""
    monkeypatch.setenv("PATH", str(tmp_path))
    isolation.detect_isolation.cache_clear()
    yield
    isolation.detect_isolation.cache_clear()


def test_without_bubblewrap_untrusted_code_is_refused_with_the_install_command(no_bubblewrap):
    found = isolation.detect_isolation()
    assert found.mode is None and "bubblewrap (bwrap) is not installed" in found.reason
    with pytest.raises(SandboxUnavailableError) as refused:
        run_python("print('must not run')")
    message = str(refused.value)
    assert "refusing to run untrusted code" in message and INSTALL_HINT in message
    assert "apt-get install bubblewrap" in message
    with pytest.raises(SandboxUnavailableError):
        run_tests("def f(): return 1", ["assert f() == 1"])
    assert runner.detect_isolation is isolation.detect_isolation  # the runner asks the same probe


def test_process_mode_runs_trusted_code_without_bubblewrap(no_bubblewrap):
    result = run_python("print(sum(range(10)))", isolation="process")
    assert result.ok and result.stdout == "45\n"
    report = run_tests("def add(a, b):\n    return a + b\n", ["assert add(2, 3) == 5", "assert add(2, 2) == 5"],
                       isolation="process")
    assert report.passed == [True, False]


def test_process_mode_keeps_its_limits(no_bubblewrap):
    looped = run_python("while True:\n    pass", isolation="process", timeout_s=0.5)
    assert looped.killed_reason == "timeout"
    hungry = run_python("x = bytearray(10**10)\nprint('allocated')", isolation="process", memory_mb=256)
    assert hungry.killed_reason == "memory" and "allocated" not in hungry.stdout
    shell = run_python("import os\nos.system('echo hi')", isolation="process")
    assert shell.killed_reason == "blocked" and "hi" not in shell.stdout
