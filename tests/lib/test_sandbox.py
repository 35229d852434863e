"""Sandboxed execution of model-written code: normal runs, hostile snippets, test runner.

Hostile snippets are run twice where it is safe: with every guard, and with the audit
hook off to show that the OS layer (rlimits, network namespace, process-group kill)
holds on its own. The fork bomb only runs without the audit hook when the kernel
enforces RLIMIT_NPROC for this user (never for root), so it can never run unbounded.
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import uuid

import pytest

from course_lib.sandbox import run_python, run_tests, sandbox_guards

# Every test here runs code in the sandbox: where the machine has none, the fixture checks
# the refusal and its message, then skips saying how to get one.
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox uses Linux rlimits"),
              pytest.mark.usefixtures("working_sandbox")]


def _code(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


# --- ordinary programs ---------------------------------------------------------------


def test_normal_code_runs_and_stdout_is_captured():
    result = run_python("print(sum(range(10)))\nprint('done')")
    assert result.ok and result.returncode == 0
    assert result.stdout == "45\ndone\n"
    assert not result.timed_out and result.killed_reason is None


def test_stdin_is_fed_to_the_program():
    code = "import sys\nnums = [int(x) for x in sys.stdin.read().split()]\nprint(sum(nums), max(nums))"
    assert run_python(code, stdin="3 9 4\n").stdout == "16 9\n"


def test_exception_is_an_ordinary_failure_not_a_kill():
    result = run_python("raise ValueError('nope')")
    assert not result.ok and result.returncode == 1
    assert "ValueError: nope" in result.stderr
    assert result.killed_reason is None


def test_files_inside_the_working_directory_are_allowed_and_deleted_afterwards():
    result = run_python(_code("""
        import os
        with open("notes.txt", "w") as f:
            f.write("kept for this run")
        print(open("notes.txt").read())
        print(os.getcwd())
    """))
    assert result.ok, result.stderr
    text, workdir = result.stdout.splitlines()
    assert text == "kept for this run"
    assert not os.path.exists(workdir)


# --- hostile snippets ------------------------------------------------------------------


@pytest.mark.parametrize("audit_hook", [True, False])
def test_infinite_loop_times_out_and_is_reported(audit_hook):
    result = run_python("while True:\n    pass", timeout_s=0.5, audit_hook=audit_hook)
    assert result.timed_out and result.killed_reason == "timeout"
    assert not result.ok and result.returncode == -9


def test_closing_stdout_does_not_escape_the_timeout():
    code = "import os, time\nos.close(1)\nos.close(2)\nwhile True:\n    pass"
    result = run_python(code, timeout_s=0.5)
    assert result.timed_out and result.killed_reason == "timeout"


@pytest.mark.parametrize("audit_hook", [True, False])
def test_huge_allocation_fails_under_the_address_space_cap(audit_hook):
    result = run_python("x = bytearray(10**10)\nprint('allocated')", memory_mb=256, audit_hook=audit_hook)
    assert "allocated" not in result.stdout
    assert result.killed_reason == "memory"
    assert not result.ok


@pytest.mark.parametrize(
    "snippet",
    [
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nsubprocess.run(['echo', 'hi'])",
        "import os\nos.system('echo hi')",
        "import os\nos.posix_spawn('/bin/echo', ['echo', 'hi'], {})",
        "import os\nos.execv('/bin/echo', ['echo', 'hi'])",
        "import multiprocessing as mp\np = mp.Process(target=print, args=('hi',))\np.start()\np.join()",
        "import _posixsubprocess",
        "import ctypes\nctypes.CDLL(None).fork()",
    ],
    ids=["fork-bomb", "subprocess", "os.system", "posix_spawn", "exec", "multiprocessing",
         "_posixsubprocess", "ctypes-fork"],
)
def test_process_creation_is_blocked(snippet):
    result = run_python(snippet, timeout_s=10.0)  # blocked long before; a loaded machine starts Python slowly
    assert result.killed_reason == "blocked", result.stderr
    assert "SandboxViolation" in result.stderr
    assert "hi" not in result.stdout


def test_fork_bomb_is_contained_by_the_process_limit_alone():
    if not sandbox_guards()["process_limit"]:
        pytest.skip("the kernel does not enforce RLIMIT_NPROC for this user (root): the audit hook guards forks")
    code = "import os\nwhile True:\n    os.fork()"
    result = run_python(code, timeout_s=1.0, max_processes=16, audit_hook=False)
    assert not result.ok  # killed by the timeout or failed fork, never unbounded
    probe = run_python("print('machine still answers')")
    assert probe.stdout == "machine still answers\n"


@pytest.mark.parametrize(
    "tamper",
    [
        "import builtins\nbuiltins.any = lambda *a: True\nbuiltins.isinstance = lambda *a: False",
        "import __main__\n__main__.BLOCKED_EVENTS = frozenset()\n__main__.WRITE_FLAGS = 0",
    ],
    ids=["rebind-builtins", "rebind-prelude-globals"],
)
def test_rebinding_names_does_not_switch_the_hook_off(tamper):
    target = f"/tmp/evil-{uuid.uuid4().hex}"
    result = run_python(tamper + f"\nopen({target!r}, 'w').write('pwned')")
    assert result.killed_reason == "blocked", result.stderr
    assert not os.path.exists(target)
    forked = run_python(tamper + "\nimport os\nos.fork()")
    assert forked.killed_reason == "blocked", forked.stderr


def test_signalling_the_parent_is_blocked():
    result = run_python("import os, signal\nos.kill(os.getppid(), signal.SIGTERM)")
    assert result.killed_reason == "blocked"


def test_writing_outside_the_working_directory_is_blocked_and_no_file_appears():
    target = f"/tmp/evil-{uuid.uuid4().hex}"
    for snippet in (
        f"open({target!r}, 'w').write('pwned')",
        f"import os\nos.close(os.open({target!r}, os.O_WRONLY | os.O_CREAT))",
        f"import os\nos.symlink({target!r}, 'link')\nopen('link', 'w').write('pwned')",
    ):
        result = run_python(snippet)
        assert result.killed_reason == "blocked", result.stderr
    assert not os.path.exists(target)


def test_deleting_outside_the_working_directory_is_blocked(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    result = run_python(f"import os\nos.remove({str(victim)!r})")
    assert result.killed_reason == "blocked"
    assert victim.read_text() == "keep me"


def _loopback_listener() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    return listener


def _connection_arrived(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


@pytest.mark.parametrize("audit_hook", [True, False])
def test_network_is_blocked_and_the_listener_sees_no_connection(audit_hook):
    if not audit_hook and not sandbox_guards()["network_namespace"]:
        pytest.skip("no network namespace on this machine: only the audit hook blocks sockets")
    listener = _loopback_listener()
    port = listener.getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
        result = run_python(code, audit_hook=audit_hook)
        assert "connected" not in result.stdout
        assert not result.ok
        assert not _connection_arrived(listener)
    finally:
        listener.close()


def test_network_is_reachable_when_allowed():
    listener = _loopback_listener()
    port = listener.getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).close()\nprint('connected')"
        result = run_python(code, allow_network=True)
        assert result.stdout == "connected\n", result.stderr
        assert _connection_arrived(listener)
    finally:
        listener.close()


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("COURSE_TEST_SECRET_TOKEN", "s3cr3t-value")
    result = run_python("import os\nprint(sorted(os.environ))\nprint(os.environ.get('HOME'))")
    assert result.ok
    assert "COURSE_TEST_SECRET_TOKEN" not in result.stdout and "s3cr3t" not in result.stdout
    assert not any(name in result.stdout for name in ("HTTP_PROXY", "HF_TOKEN", "OPENAI_API_KEY"))
    # and not through the parent's /proc entry either
    peek = run_python("import os\nprint(open(f'/proc/{os.getppid()}/environ').read())")
    assert peek.killed_reason == "blocked"
    assert "s3cr3t" not in peek.stdout


def test_output_is_capped():
    result = run_python("while True:\n    print('x' * 1000)", max_output_bytes=20_000, timeout_s=5.0)
    assert result.killed_reason == "output_limit"
    assert 0 < len(result.stdout) <= 20_000


# --- run_tests -------------------------------------------------------------------------

_ADD = "def add(a, b):\n    return a + b\n"


def test_run_tests_with_assertions_counts_each_test():
    report = run_tests(_ADD, ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(1, 1) == 3"])
    assert report.passed == [True, True, False]
    assert report.fraction_passed == pytest.approx(2 / 3)


def test_run_tests_with_stdin_stdout_pairs():
    code = "a, b = map(int, input().split())\nprint(a * b)"
    report = run_tests(code, [("3 4\n", "12"), ("5 5", "25\n"), ("2 2", "5")])
    assert report.passed == [True, True, False]


@pytest.mark.parametrize("hack", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"])
def test_exiting_early_does_not_fake_a_pass(hack):
    report = run_tests(hack + _ADD, ["assert add(2, 3) == 5"])
    assert report.passed == [False]


def test_one_hanging_test_does_not_sink_the_others():
    code = "def f(n):\n    while n == 0:\n        pass\n    return n\n"
    report = run_tests(code, ["assert f(1) == 1", "assert f(0) == 0"], timeout_s=0.5)
    assert report.passed == [True, False]
    assert report.results[1].timed_out


def test_run_tests_rejects_malformed_tests():
    with pytest.raises(TypeError, match=r"tests\[0\]"):
        run_tests(_ADD, [42])
