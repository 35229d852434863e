"""Escape attempts against ``course_lib.sandbox``: every one must fail.

Each attempt runs twice: with the audit hook (the second layer) and without it, because
the operating-system boundary (bubblewrap namespaces, an unprivileged uid, rlimits) has
to hold on its own: several attempts below switch the hook off from inside first
(a subinterpreter has no hook; ``os.path.realpath.__code__`` can be swapped). Every test
checks the effect on the host (a file that must not appear, a process that must stay
alive, a secret that must not be printed), not only the child's exit status.

On a machine without working bubblewrap the sandbox refuses to run anything; these tests
then check the refusal and skip, so a missing boundary is visible in the test report.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from course_lib.sandbox import SandboxUnavailableError, detect_isolation, run_python, run_tests

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

# Ways to get a hook-free interpreter inside the child before the attempt proper.
SUBINTERPRETER = "import _xxsubinterpreters as _si\n_si.run_string(_si.create(), {code!r})\n"
REALPATH_SWAP = (
    "import os.path, posixpath\n"
    "def _anything(path, *, strict=False):\n"
    "    return '/sandbox/' + os.path.basename(str(path))\n"
    "posixpath.realpath.__code__ = _anything.__code__\n"
)


def attempt(code: str, *, audit_hook: bool, **kwargs):
    """Run hostile ``code``; on a machine without isolation, check the refusal and skip."""
    found = detect_isolation()
    if not found.available:
        with pytest.raises(SandboxUnavailableError, match="refusing to run untrusted code"):
            run_python(code, audit_hook=audit_hook)
        pytest.skip(f"the sandbox refused to run the attempt, as designed where it cannot isolate: {found.reason}")
    return run_python(textwrap.dedent(code), audit_hook=audit_hook, timeout_s=kwargs.pop("timeout_s", 5.0),
                      **kwargs)


both_layers = pytest.mark.parametrize("audit_hook", [True, False], ids=["hook", "os-only"])


@pytest.fixture
def host_dir(tmp_path):
    """A host folder with a secret file, world-readable, so only the sandbox can hide it."""
    (tmp_path / "secret-notes.txt").write_text("host-secret-8d1f")
    os.chmod(tmp_path, 0o755)
    return tmp_path


def _site_packages() -> Path:
    import numpy

    return Path(numpy.__file__).resolve().parents[1]


# --- the attempts reported against the audit-hook sandbox --------------------------------


@both_layers
def test_os_system_from_a_subinterpreter_runs_nothing_on_the_host(audit_hook, host_dir):
    canary = host_dir / f"owned-{uuid.uuid4().hex}"
    inner = f"import os\nprint('status', os.system('touch {canary}; echo shell-ran'))"
    result = attempt(SUBINTERPRETER.format(code=inner), audit_hook=audit_hook)
    assert not canary.exists()
    assert "shell-ran" not in result.stdout  # there is no shell in the sandbox at all


@both_layers
def test_swapped_realpath_cannot_read_passwd_or_the_parent_environment(audit_hook, monkeypatch):
    monkeypatch.setenv("COURSE_ESCAPE_SECRET", "env-secret-51c0")
    code = REALPATH_SWAP + textwrap.dedent("""
        import os
        for path in ['/etc/passwd', '/etc/shadow', f'/proc/{os.getppid()}/environ', '/proc/1/environ',
                     '/proc/self/environ']:
            try:
                print(path, open(path, 'rb').read()[:2000])
            except OSError as error:
                print(path, type(error).__name__)
        print(dict(os.environ))
    """)
    result = attempt(code, audit_hook=audit_hook)
    assert "root:x:0:0" not in result.stdout
    assert "env-secret-51c0" not in result.stdout
    assert "COURSE_ESCAPE_SECRET" not in result.stdout


@both_layers
def test_dir_fd_cannot_write_or_delete_in_the_parent_environment(audit_hook):
    site = _site_packages()
    victim = site / f"course-escape-victim-{uuid.uuid4().hex}.txt"
    planted = site / f"course-escape-{uuid.uuid4().hex}.pth"
    victim.write_text("keep me")
    try:
        code = f"""
            import os
            fd = os.open({str(site)!r}, os.O_RDONLY | os.O_DIRECTORY)
            for action in (lambda: os.close(os.open({planted.name!r}, os.O_WRONLY | os.O_CREAT, dir_fd=fd)),
                           lambda: os.unlink({victim.name!r}, dir_fd=fd),
                           lambda: os.rename({victim.name!r}, 'moved.txt', src_dir_fd=fd)):
                try:
                    action()
                    print('did it')
                except OSError as error:
                    print(type(error).__name__, error.errno)
        """
        for prefix in ("", REALPATH_SWAP):
            result = attempt(prefix + textwrap.dedent(code), audit_hook=audit_hook)
            assert "did it" not in result.stdout, result.stdout
        assert not planted.exists()
        assert victim.read_text() == "keep me"
    finally:
        planted.unlink(missing_ok=True)
        victim.unlink(missing_ok=True)


@both_layers
@pytest.mark.parametrize("how", ["mkfifo", "mknod", "sqlite3", "setxattr", "symlink", "link", "open"])
def test_no_file_appears_outside_the_working_directory(audit_hook, how, host_dir):
    target = host_dir / f"made-by-{how}-{uuid.uuid4().hex}"
    site_target = _site_packages() / f"course-escape-{how}-{uuid.uuid4().hex}"
    actions = {
        "mkfifo": "os.mkfifo(path)",
        "mknod": "os.mknod(path, 0o600 | stat.S_IFREG)",
        "sqlite3": "import sqlite3; sqlite3.connect(path).execute('create table t(x)')",
        "setxattr": "open('here', 'w').close(); os.setxattr(path, b'user.x', b'1')",
        "symlink": "os.symlink('/sandbox', path)",
        "link": "open('here', 'w').close(); os.link('here', path)",
        "open": "open(path, 'w').write('x')",
    }
    code = REALPATH_SWAP + "import os, stat\n" + "".join(
        f"path = {str(p)!r}\ntry:\n    {actions[how]}\n    print('made')\nexcept Exception as e:\n    print(repr(e))\n"
        for p in (target, site_target, "/usr/lib/course-escape", "/owned"))
    try:
        result = attempt(code, audit_hook=audit_hook)
        assert "made" not in result.stdout, result.stdout
        assert not target.exists() and not site_target.exists()
        assert not os.path.lexists("/usr/lib/course-escape") and not os.path.lexists("/owned")
    finally:
        site_target.unlink(missing_ok=True)


@both_layers
def test_host_directories_cannot_be_listed_or_stat_ed(audit_hook, host_dir):
    code = REALPATH_SWAP + textwrap.dedent(f"""
        import os
        for path in [{str(host_dir)!r}, '/root', '/home', '/etc', '/work', {str(Path.cwd())!r}]:
            try:
                print(path, os.listdir(path), os.stat(path).st_ino)
            except OSError as error:
                print(path, type(error).__name__)
        try:
            print(os.stat({str(host_dir / 'secret-notes.txt')!r}))
        except OSError as error:
            print(type(error).__name__)
    """)
    result = attempt(code, audit_hook=audit_hook)
    assert "secret-notes" not in result.stdout
    assert "st_size" not in result.stdout
    assert ".git" not in result.stdout and "pyproject.toml" not in result.stdout


@pytest.fixture
def victim_process():
    """A host process the sandbox must not be able to signal."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


@both_layers
@pytest.mark.parametrize("how", ["pidfd_send_signal", "kill", "kill-all"])
def test_another_process_cannot_be_signalled(audit_hook, how, victim_process):
    pid = victim_process.pid
    actions = {
        "pidfd_send_signal": f"import signal\nsignal.pidfd_send_signal(os.pidfd_open({pid}), signal.SIGKILL)",
        "kill": f"os.kill({pid}, 9)\nos.kill(os.getppid(), 9)",
        "kill-all": "os.kill(-1, 9)",  # every process this user may signal
    }
    inner = "import os\ntry:\n" + textwrap.indent(actions[how], "    ") + "\nexcept Exception as e:\n    print(repr(e))\n"
    attempt(SUBINTERPRETER.format(code=inner), audit_hook=audit_hook)
    time.sleep(0.1)
    assert victim_process.poll() is None, "the host process was killed from inside the sandbox"


def test_an_object_equal_to_everything_does_not_pass_a_graded_test(working_sandbox):
    code = textwrap.dedent("""
        class Anything(int):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __bool__(self): return True
            __hash__ = int.__hash__
        class Text(str):
            def __eq__(self, other): return True
        def add(a, b): return Anything(0)
        def name(): return Text('x')
    """)
    tests = ["assert add(2, 3) == 5", "assert add(2, 3) == add(1, 1) + 99", "assert add(1, 1)",
             "assert name() == 'alice'", "assert not add(1, 1) != 7", "assert [add(1, 2)] == [3]",
             "assert add(1, 2) in {3}"]
    report = run_tests(code, tests)
    assert report.passed == [False] * len(tests), report.reasons
    assert all("not a plain value" in reason for reason in report.reasons), report.reasons


# --- more attempts -----------------------------------------------------------------------


def _tasks_running(marker: str) -> list[str]:
    """Processes whose command line holds ``marker`` (the code of one attempt carries it, so the
    sandboxes that other tests run at the same time are not counted)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(entry)
            except OSError:
                pass
    return found


def test_fork_bomb_without_the_hook_is_capped_and_leaves_nothing_behind():
    marker = f"fork-bomb-{uuid.uuid4().hex}"
    inner = f"# {marker}\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = attempt(SUBINTERPRETER.format(code=inner), audit_hook=True, timeout_s=1.0, max_processes=16)
    assert not result.ok
    time.sleep(0.2)
    assert not _tasks_running(marker)  # the PID namespace died with the sandbox
    assert run_python("print('still answers')", timeout_s=10.0).stdout == "still answers\n"


@both_layers
def test_a_daemon_does_not_outlive_the_run(audit_hook, host_dir):
    marker = f"daemon-{uuid.uuid4().hex}"
    code = f"# {marker}\n" + REALPATH_SWAP + textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
            os._exit(0)
        print('parent done')
    """)
    if not audit_hook:
        attempt(code, audit_hook=audit_hook)
        time.sleep(0.2)
        assert not _tasks_running(marker)  # nothing of this run outlived it
    else:
        assert attempt(code, audit_hook=audit_hook).killed_reason == "blocked"


@both_layers
def test_network_is_unreachable_even_without_the_hook(audit_hook):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        inner = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
                 "    print('connected')\nexcept OSError as e:\n    print(repr(e))\n")
        result = attempt(SUBINTERPRETER.format(code=inner), audit_hook=audit_hook)
        assert "connected" not in result.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


@both_layers
def test_privileges_cannot_be_regained(audit_hook):
    code = REALPATH_SWAP + textwrap.dedent("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print('uid', os.getuid(), os.geteuid())
        for name, call in [('setuid', lambda: os.setuid(0)), ('setgid', lambda: os.setgid(0)),
                           ('chroot', lambda: os.chroot('/tmp')), ('sethostname', lambda: __import__('socket').sethostname('x')),
                           ('mount', lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),
                           ('unshare-user', lambda: libc.unshare(0x10000000)),
                           ('ptrace-attach', lambda: libc.ptrace(16, 1, None, None))]:
            try:
                value = call()
                print(name, 'ok' if value in (None, 0) else 'refused', ctypes.get_errno())
            except Exception as error:
                print(name, 'refused', type(error).__name__)
        print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])
    """)
    result = attempt(code, audit_hook=audit_hook)
    lines = result.stdout.splitlines()
    assert lines[0] == "uid 65534 65534", result.stdout + result.stderr
    assert not any(line.split()[1] == "ok" for line in lines[1:-1]), result.stdout
    assert lines[-1] == "0000000000000000"  # no capabilities at all


@both_layers
def test_the_interpreter_and_standard_library_are_read_only(audit_hook):
    import json as stdlib_module

    path = stdlib_module.__file__
    before = Path(path).read_bytes()
    code = REALPATH_SWAP + f"open({path!r}, 'a').write('raise SystemExit')\nprint('wrote')"
    result = attempt(code, audit_hook=audit_hook)
    assert "wrote" not in result.stdout
    assert Path(path).read_bytes() == before


@both_layers
def test_filling_the_disk_stops_at_the_private_tmpfs(audit_hook):
    code = textwrap.dedent("""
        import os
        written = 0
        try:
            for i in range(10_000):
                with open(f'fill{i}', 'wb') as f:
                    f.write(b'x' * 2**20)
                written += 1
        except OSError as error:
            print('stopped', type(error).__name__, written)
    """)
    result = attempt(code, audit_hook=audit_hook, workdir_mb=8, max_file_mb=4)
    assert result.stdout.startswith("stopped OSError"), result.stdout + result.stderr
    assert int(result.stdout.split()[-1]) <= 8


@both_layers
def test_tracebacks_and_output_never_carry_host_paths_of_the_project(audit_hook):
    result = attempt("import os, sys\nprint(os.getcwd(), sys.argv, __file__)\nraise ValueError('x')",
                     audit_hook=audit_hook)
    assert str(Path.cwd()) not in result.stdout + result.stderr
    assert "/sandbox" in result.stdout


def test_a_missing_boundary_refuses_clearly(monkeypatch):
    from course_lib.rewards import code_execution_reward
    from course_lib.sandbox import isolation, runner

    missing = isolation.Isolation(None, reason="bubblewrap (bwrap) is not installed. " + isolation.INSTALL_HINT)
    monkeypatch.setattr(runner, "detect_isolation", lambda: missing)
    with pytest.raises(SandboxUnavailableError, match=r"refusing to run untrusted code.*apt-get install bubblewrap"):
        run_python("print('should not run')")
    with pytest.raises(SandboxUnavailableError):
        code_execution_reward(completions=["```python\nprint(1)\n```"], tests=[["assert True"]])


def test_the_user_namespace_mode_holds_too(monkeypatch, host_dir):
    """The mode an ordinary (non-root) user gets: same attempts, same outcome."""
    from course_lib.sandbox import isolation, runner

    if os.geteuid() == 0:
        pytest.skip("runs as root here, where the user-namespace mode is refused (it would map the child to host "
                    "uid 0; test_sandbox_trust.py checks that refusal): run the tests as an ordinary user")
    found = detect_isolation()
    if not found.available:
        pytest.skip(f"needs a working sandbox, which this machine lacks: {found.reason}")
    userns = isolation.Isolation("bwrap-userns", bwrap=found.bwrap, seccomp=found.seccomp)
    if isolation._probe(userns) is not None:
        pytest.skip("unprivileged user namespaces are not available here")
    monkeypatch.setattr(runner, "detect_isolation", lambda: userns)
    target = host_dir / f"owned-{uuid.uuid4().hex}"
    code = REALPATH_SWAP + textwrap.dedent(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print(os.getuid(), libc.unshare(0x10000000), libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))
        try:
            open({str(target)!r}, 'w').write('x')
        except OSError as error:
            print(type(error).__name__)
        print(sorted(os.listdir('/')))
    """)
    result = run_python(code, audit_hook=False, timeout_s=10.0)  # a loaded machine starts Python slowly
    assert result.stdout.splitlines()[0] == "65534 -1 -1", result.stdout + result.stderr
    assert not target.exists()
    assert "etc" not in result.stdout and "home" not in result.stdout
