"""The code verifier and the sandbox, second round: forged verdicts, memory past the cap,
socket families, root without its guards, nonsense limits, a virtual environment in /tmp.

Every test here checks an effect the host can see (a verdict, memory the host lost, a
socket the child opened, an error naming the argument), not only an exit status. Tests
that need a working sandbox skip where there is none, saying how to get one; the refusal
itself is tested in ``test_sandbox_escapes.py`` and ``tests/lib/test_sandbox.py``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from course_lib.sandbox import (SandboxUnavailableError, detect_isolation, isolation, run_python, run_tests,
                                runner, sandbox_guards)
from course_lib.rewards import code_execution_reward

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")
REPO = Path(__file__).resolve().parents[2]


def needs_sandbox() -> None:
    found = detect_isolation()
    if not found.available:
        pytest.skip(f"needs a working sandbox, which this machine lacks: {found.reason}")


# --- 1. the verdict cannot be forged from inside ----------------------------------------------

WRONG_ADD = "def add(a, b):\n    return 0\n"
TESTS = ["assert add(2, 3) == 5", "assert False"]

FORGERIES = {
    # the check function of the rewritten assertions, replaced by the solution
    "replaced-check": "_check = lambda *a, **k: None\n" + WRONG_ADD,
    # a wrong solution that happens to have a helper with that name
    "helper-named-check": "def _check(n, *rest):\n    return n\n" + WRONG_ADD,
    # finish the harness early from the solution's module code, then leave
    "finish-early": WRONG_ADD + textwrap.dedent("""
        import os, sys
        frame = sys._getframe(1)
        for scope in (frame.f_globals, frame.f_locals):
            for name, value in list(scope.items()):
                if 'finish' in name and callable(value):
                    value()
                    os._exit(0)
        raise SystemExit('no harness function found')
    """),
    # print a report of its own with the marker found in the sources or on standard input
    "stolen-marker": WRONG_ADD + textwrap.dedent("""
        import linecache, os, re, sys
        texts = [''.join(entry[2]) for entry in list(linecache.cache.values())]
        texts.append(sys.stdin.read())
        for text in texts:
            found = re.search(r'__verdict_[0-9a-f]+:', text)
            if found:
                os.write(1, (found.group() + '[]' + chr(10)).encode())
                os._exit(0)
        raise SystemExit('no marker found')
    """),
}


@pytest.mark.parametrize("attack", list(FORGERIES), ids=list(FORGERIES))
def test_a_wrong_solution_cannot_forge_a_pass(attack):
    needs_sandbox()
    report = run_tests(FORGERIES[attack], TESTS, timeout_s=10.0)  # a loaded machine starts Python slowly
    assert report.passed == [False, False], report.reasons
    completion = f"```python\n{FORGERIES[attack]}```"
    assert code_execution_reward(completions=[completion], tests=[TESTS]) == [0.0]


# A report nested deeper than any parser goes: the marker is read from the harness's frame and
# followed by 30,000 open brackets. Before, the parent's ``json.loads`` raised RecursionError,
# which escaped the verifier as an exception and stopped the training run that called it.
DEEP_REPORT = WRONG_ADD + textwrap.dedent("""
    import os, sys
    frame = sys._getframe(1)
    for scope in (frame.f_locals, frame.f_globals):
        for value in list(scope.values()):
            if isinstance(value, str) and value.startswith('__verdict_'):
                os.write(1, (value + '[' * 30000 + ']' * 30000 + chr(10)).encode())
                os._exit(0)
    os.write(1, (sys.stdin.readline().strip() + '[' * 30000 + ']' * 30000 + chr(10)).encode())
    os._exit(0)
""")


def test_a_report_nested_past_the_parser_fails_the_test_without_raising():
    # Plain process isolation here: the verdict is the parent's, whatever ran the child.
    report = run_tests(DEEP_REPORT, TESTS, timeout_s=10.0, isolation="process")
    assert report.passed == [False, False], report.reasons


def test_a_deeply_nested_report_cannot_stop_the_code_reward():
    needs_sandbox()
    report = run_tests(DEEP_REPORT, TESTS, timeout_s=10.0)
    assert report.passed == [False, False], report.reasons
    assert code_execution_reward(completions=[f"```python\n{DEEP_REPORT}```"], tests=[TESTS]) == [0.0]


def test_the_verdict_survives_any_report_a_child_can_print():
    # The parent's judge on hand-made child output: deep nesting, bad tags, wrong shapes.
    from course_lib.sandbox.runner import SandboxResult
    from course_lib.sandbox.verify import _AssertionRewriter, _judge_assertions
    import ast
    rewriter = _AssertionRewriter()
    rewriter.visit(ast.parse("assert add(2, 3) == 5"))
    marker = "__verdict_abc:"
    for report in ("[" * 30000 + "]" * 30000, '[[0, [[true, {"nope": 1}]]]]', '[[0, [[true, {"complex": [1, "x"]}]]]]',
                   '[[0, 5]]', '{"a": 1}', '[[0, [[true, {"dict": [[{"dict": [[1, 2]]}, 3]]}]]]]'):
        result = SandboxResult(ok=True, returncode=0, stdout=f"{marker}{report}\n", stderr="", timed_out=False,
                               killed_reason=None)
        ok, reason = _judge_assertions(result, rewriter.specs, marker)
        assert ok is False and reason, report[:40]


def test_a_correct_solution_with_a_helper_named_check_still_passes():
    needs_sandbox()
    code = "def _check(n, *rest):\n    raise RuntimeError('my own helper')\ndef add(a, b):\n    return a + b\n"
    report = run_tests(code, ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"], timeout_s=10.0)
    assert report.passed == [True, True], report.reasons


def test_an_honest_solution_printing_without_a_newline_passes():
    needs_sandbox()
    code = "def add(a, b):\n    print('adding', end='', flush=True)\n    return a + b\n"
    report = run_tests(code, ["assert add(2, 3) == 5", "print('x', end='')\nassert add(1, 1) == 2"], timeout_s=10.0)
    assert report.passed == [True, True], report.reasons


def test_every_assertion_must_report():
    needs_sandbox()
    code = "def add(a, b):\n    return a + b\n"
    report = run_tests(code, ["if add(1, 1) == 3:\n    assert False\nassert add(1, 2) == 3"], timeout_s=10.0)
    assert report.passed == [False] and "never reported" in report.reasons[0]


# --- 2. memory past the cap --------------------------------------------------------------------

MB = 2**20


def test_memory_files_are_refused():
    needs_sandbox()
    result = run_python("import os\ntry:\n    os.memfd_create('x')\n    print('made')\nexcept OSError as e:\n"
                        "    print('refused', e.errno)", audit_hook=False, timeout_s=10.0)
    assert result.stdout.strip() == "refused 1", result.stdout + result.stderr


def test_open_files_and_file_size_are_capped_low():
    needs_sandbox()
    result = run_python("import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE)[0], "
                        "resource.getrlimit(resource.RLIMIT_FSIZE)[0])", audit_hook=False, timeout_s=10.0)
    open_files, file_size = map(int, result.stdout.split())
    assert open_files <= 64 and file_size == 16 * MB


def _run_memory(marker: str) -> int:
    """Bytes the run holds, seen from the host: resident memory of every process of the run
    (those whose root has ``/sandbox/<marker>``), plus every regular file they hold open
    (memory files) or keep in their tmpfs folders, each counted once."""
    total, seen = 0, set()
    for pid in os.listdir("/proc"):
        root = f"/proc/{pid}/root"
        try:
            if not pid.isdigit() or not os.path.exists(f"{root}/sandbox/{marker}"):
                continue
            with open(f"/proc/{pid}/status") as file:
                total += next((int(line.split()[1]) * 1024 for line in file if line.startswith("VmRSS:")), 0)
            paths = [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
            for folder in ("tmp", "sandbox", "dev/shm"):
                if os.path.isdir(f"{root}/{folder}"):
                    paths += [f"{root}/{folder}/{name}" for name in os.listdir(f"{root}/{folder}")]
        except OSError:
            continue  # the process ended while we looked
        for path in paths:
            try:
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


# Every way to hold memory the address-space cap does not count, then many processes at once.
HOARDER = textwrap.dedent("""
    import os, time
    MB = 2**20
    open('/sandbox/MARKER', 'w').close()          # lets the host find this run's processes
    kept = []
    try:
        for i in range(250):                      # memory files: 250 x 16 MB
            fd = os.memfd_create(f'm{i}')
            for _ in range(4):
                os.write(fd, b'x' * (4 * MB))
            kept.append(fd)
    except OSError:
        pass
    for folder in ('/tmp', '/sandbox', '/dev/shm'):   # tmpfs files
        try:
            with open(f'{folder}/fill', 'wb') as f:
                for _ in range(64):
                    f.write(b'x' * MB)
        except OSError:
            pass
    children = []
    for _ in range(4):                            # processes, each up to its own RLIMIT_AS
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                block = bytearray(100 * MB)
                for i in range(0, len(block), 4096):
                    block[i] = 1
            except MemoryError:
                pass
            time.sleep(3)
            os._exit(0)
        children.append(pid)
    print('holding', flush=True)
    time.sleep(3)
""")


def test_host_memory_growth_stays_under_the_cap():
    needs_sandbox()
    memory_mb, workdir_mb, processes = 128, 64, 4
    cgroup = sandbox_guards().get("memory_cgroup")
    # With a cgroup the whole run is capped at memory_mb; without one, each process is
    # capped by RLIMIT_AS and the tmpfs folders by their size.
    bound = memory_mb * MB if cgroup else ((processes + 1) * memory_mb + 2 * workdir_mb) * MB
    slack = 100 * MB  # the interpreter's shared pages count once per process in resident memory
    marker = f"hoarder-{uuid.uuid4().hex}"
    peak = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _run_memory(marker))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run_python(HOARDER.replace("MARKER", marker), audit_hook=False, timeout_s=20.0,
                            memory_mb=memory_mb, workdir_mb=workdir_mb, max_processes=processes)
    finally:
        done.set()
        watcher.join()
    assert peak[0] > 0, "the watcher never saw the run: " + result.stdout + result.stderr[-300:]
    assert peak[0] < bound + slack, (f"the run held {peak[0] / MB:.0f} MiB, cap {bound / MB:.0f} MiB "
                                     f"(cgroup: {cgroup}); {result.stdout!r} {result.stderr[-300:]!r}")


# --- 3. socket families -------------------------------------------------------------------------

SOCKETS = textwrap.dedent("""
    import socket
    for name, family in (('unix', 1), ('inet', 2), ('inet6', 10), ('netlink', 16), ('packet', 17),
                         ('alg', 38), ('vsock', 40)):
        try:
            socket.socket(family, socket.SOCK_DGRAM if family == 16 else socket.SOCK_STREAM).close()
            print(name, 'open')
        except OSError as error:
            print(name, 'refused', error.errno)
""")


@pytest.mark.parametrize("allow_network", [False, True], ids=["no-network", "network"])
def test_only_the_allowed_socket_families_open(allow_network):
    needs_sandbox()
    result = run_python(SOCKETS, audit_hook=False, allow_network=allow_network, timeout_s=10.0)
    seen = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert seen["unix"] == "open", result.stdout + result.stderr
    allowed = {"unix", "inet", "inet6"} if allow_network else {"unix"}
    for name, outcome in seen.items():
        if name not in allowed:
            assert outcome == "refused 97", f"{name}: {outcome}"  # EAFNOSUPPORT, from the seccomp filter
    if allow_network:
        assert seen["inet"] == "open"


# --- 4. no silent downgrade as root ----------------------------------------------------------

def test_without_libseccomp_no_mode_is_offered(monkeypatch):
    if isolation.shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: the refusal names it first (test_sandbox_escapes.py)")
    monkeypatch.setattr(isolation, "seccomp_unavailable_reason", lambda: "libseccomp.so.2 was not found")
    isolation.detect_isolation.cache_clear()
    try:
        found = isolation.detect_isolation()
        assert found.mode is None and "libseccomp" in found.reason and "apt-get install libseccomp2" in found.reason
        monkeypatch.setattr(runner, "detect_isolation", isolation.detect_isolation)
        with pytest.raises(SandboxUnavailableError, match="libseccomp"):
            run_python("print('should not run')")
    finally:
        isolation.detect_isolation.cache_clear()


def test_a_mode_without_seccomp_is_refused_even_when_handed_in(monkeypatch):
    needs_sandbox()
    found = detect_isolation()
    weak = isolation.Isolation(found.mode, bwrap=found.bwrap, setpriv=found.setpriv, seccomp=False)
    monkeypatch.setattr(runner, "detect_isolation", lambda: weak)
    with pytest.raises(SandboxUnavailableError, match="seccomp"):
        run_python("print('should not run')")


@pytest.mark.skipif(os.geteuid() != 0, reason="checks what happens when the trainer runs as root")
def test_as_root_the_child_never_runs_as_host_root(monkeypatch):
    needs_sandbox()
    found = detect_isolation()
    assert found.mode == "bwrap-nobody"
    userns = isolation.Isolation("bwrap-userns", bwrap=found.bwrap, seccomp=True)
    monkeypatch.setattr(runner, "detect_isolation", lambda: userns)
    with pytest.raises(SandboxUnavailableError, match="root"):
        run_python("print('should not run')")
    monkeypatch.undo()
    code = textwrap.dedent("""
        import ctypes, os
        started = 0
        for _ in range(60):
            try:
                if os.fork() == 0:
                    import time; time.sleep(2); os._exit(0)
                started += 1
            except OSError:
                break
        libc = ctypes.CDLL(None, use_errno=True)
        print(started, libc.ptrace(0, 0, 0, 0))
    """)
    result = run_python(code, audit_hook=False, max_processes=8, timeout_s=10.0)
    started, traced = map(int, result.stdout.split())
    assert started <= 8 and traced == -1, result.stdout + result.stderr


# --- 5. nonsense limits are refused, naming the argument ------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    ({"memory_mb": -1}, "memory_mb"), ({"memory_mb": 0}, "memory_mb"), ({"memory_mb": 1}, "memory_mb"),
    ({"max_processes": -100}, "max_processes"), ({"workdir_mb": 0}, "workdir_mb"), ({"workdir_mb": -1}, "workdir_mb"),
    ({"max_file_mb": -1}, "max_file_mb"), ({"max_output_bytes": 0}, "max_output_bytes"),
    ({"max_output_bytes": -5}, "max_output_bytes"), ({"timeout_s": float("nan")}, "timeout_s"),
    ({"timeout_s": float("inf")}, "timeout_s"), ({"timeout_s": "2"}, "timeout_s"), ({"timeout_s": 0}, "timeout_s"),
    ({"memory_mb": 256.5}, "memory_mb"), ({"max_processes": True}, "max_processes"),
], ids=lambda value: str(value))
def test_nonsense_limits_are_refused_naming_the_argument(kwargs, name):
    for mode in ("os", "process"):  # refused before any isolation is looked for
        with pytest.raises((ValueError, TypeError), match=name):
            run_python("print(1)", isolation=mode, **kwargs)


def test_code_that_is_not_text_is_refused():
    with pytest.raises(TypeError, match="code"):
        run_python(None)
    with pytest.raises(TypeError, match="stdin"):
        run_python("print(1)", stdin=b"bytes")


def test_a_single_test_string_is_refused_not_split_into_characters():
    with pytest.raises(TypeError, match=r"tests must be a list.*\[test\]"):
        run_tests("x = 1", "assert 1")


# --- 6. a virtual environment under /tmp --------------------------------------------------------

def test_a_virtual_environment_under_tmp_is_visible_in_the_sandbox(tmp_path_factory):
    needs_sandbox()
    venv = Path(f"/tmp/course-venv-{os.getpid()}-{time.monotonic_ns()}")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = next(venv.glob("lib/python3*/site-packages"))
        (site / "only_in_this_venv.py").write_text("VALUE = 'from the venv in /tmp'\n")
        os.chmod(venv, 0o755)
        parent = textwrap.dedent(f"""
            import sys
            sys.path[:0] = [{str(REPO)!r}] + {[p for p in sys.path if p.endswith('site-packages')]!r}
            from course_lib.sandbox import run_python
            result = run_python('import only_in_this_venv; print(only_in_this_venv.VALUE)', timeout_s=20.0)
            print(result.stdout.strip() or result.stderr.strip().splitlines()[-1])
        """)
        done = subprocess.run([str(venv / "bin" / "python"), "-c", parent], capture_output=True, text=True,
                              timeout=120, cwd="/")
        assert done.stdout.strip() == "from the venv in /tmp", done.stdout + done.stderr[-2000:]
    finally:
        subprocess.run(["rm", "-rf", str(venv)], check=False)
