"""Run model-written Python in a child process with limits, for code-execution rewards.

A code verifier (the "run the tests" kind of reward from RLVR) has to execute text a
policy wrote. This module runs it in a fresh ``python -I`` process and layers several
guards, from the ones the operating system enforces to ones that only Python enforces:

1. **Process and OS limits** (the real guards): a new session / process group that is
   killed as a whole on a wall-clock timeout; ``setrlimit`` caps on address space
   (``RLIMIT_AS`` -> ``MemoryError``), CPU seconds, file size, open files, core dumps and,
   where the kernel enforces it, the number of processes (``RLIMIT_NPROC``); a network
   namespace with no interfaces up where the kernel lets us create one (root, or
   unprivileged user namespaces); caps on captured output.
2. **Isolation of the interpreter**: isolated mode (no user site, no ``PYTHON*``
   variables), an environment stripped to a handful of harmless variables (no tokens,
   no proxies, ``HOME`` is the temporary directory), a temporary working directory that
   is deleted afterwards.
3. **An audit hook** (PEP 578) installed by a short prelude before the user code runs.
   It refuses process creation (``os.fork``, ``subprocess``, ``os.system``, ``exec``),
   signals to other processes, sockets, ``ctypes``, raising resource limits, writing
   or deleting anything outside the temporary directory, and reading files outside the
   Python installation and the temporary directory (so ``/proc/<parent>/environ`` and
   secrets on disk stay out of reach).

What this is not: a security boundary. Audit hooks run inside the interpreter they
guard; CPython's documentation says plainly that they cannot stop determined malicious
code (C extensions, interpreter internals). They stop the accidents and the reward
hacks a policy stumbles into (``sys.exit(0)`` before the tests, writing files, calling
out to the network). The OS limits are what keep the machine alive. One gap matters in
practice: the kernel does not apply ``RLIMIT_NPROC`` to root (uid 0 in the initial user
namespace), so when the trainer runs as root (Colab, most containers) a fork bomb is
stopped by the audit hook and the process-group kill only. For untrusted code at scale
use a container or VM per run (gVisor, Firecracker, nsjail).
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["SandboxResult", "VerificationReport", "run_python", "run_tests", "sandbox_guards"]

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_CODE_FILENAME = "main.py"

# The prelude runs in the child before the user code: it installs the audit hook and then
# executes main.py as __main__. It is passed with -c, so it lives in no file the code can edit.
_PRELUDE = r'''
import json, os, sys
_cfg = json.loads(sys.argv[1])
sys.argv = [_cfg["code_file"]]
with open(_cfg["code_file"], encoding="utf-8") as _f:
    _source = _f.read()
_code = compile(_source, _cfg["code_file"], "exec")

if _cfg["audit"]:
    def _install(cfg):
        workdir = os.path.realpath(cfg["workdir"])
        read_roots = tuple(os.path.realpath(p) for p in cfg["read_roots"]) + (workdir,)
        read_files = frozenset(("/dev/null", "/dev/urandom", "/dev/zero", "/etc/localtime"))
        allow_network = cfg["allow_network"]
        own_pid = os.getpid()
        realpath, fspath = os.path.realpath, os.fspath
        write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        blocked = frozenset((
            "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
            "subprocess.Popen", "pty.spawn", "os.startfile", "os.killpg",
            "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "ctypes.string_at",
            "ctypes.wstring_at",
            "resource.setrlimit", "resource.prlimit",
            "gc.get_objects", "gc.get_referrers", "gc.get_referents",
        ))
        network = frozenset((
            "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
            "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
            "socket.gethostbyname_ex", "socket.getnameinfo",
        ))
        path_events = frozenset((
            "os.remove", "os.rename", "os.replace", "os.rmdir", "os.mkdir", "os.symlink",
            "os.link", "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree",
            "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move",
        ))
        busy = [False]

        def inside(path, roots):
            resolved = realpath(path)
            return any(resolved == r or resolved.startswith(r + os.sep) for r in roots)

        def is_path(value):
            return isinstance(value, (str, bytes, os.PathLike))

        def as_text(value):
            value = fspath(value)
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

        def deny(what):
            raise PermissionError(f"SandboxViolation: {what} is not allowed in the sandbox")

        def hook(event, args):
            if busy[0]:
                return
            busy[0] = True
            try:
                if event in blocked:
                    deny(event)
                if event in network and not allow_network:
                    deny(f"network access ({event})")
                if event == "import" and args[0] == "_posixsubprocess":
                    deny("process creation (_posixsubprocess)")
                if event == "os.kill" and args[0] not in (0, own_pid):
                    deny("signalling another process")
                if event == "open" and is_path(args[0]):
                    path = as_text(args[0])
                    mode, flags = args[1] or "", args[2] if isinstance(args[2], int) else 0
                    writing = any(c in mode for c in "wax+") or (flags & write_flags)
                    if writing and not inside(path, (workdir,)):
                        deny(f"writing {path!r} outside the working directory")
                    if not writing and realpath(path) not in read_files and not inside(path, read_roots):
                        deny(f"reading {path!r}")
                if event in path_events:
                    for value in args:
                        if is_path(value) and not inside(as_text(value), (workdir,)):
                            deny(f"{event} on {as_text(value)!r} outside the working directory")
            finally:
                busy[0] = False

        sys.modules.pop("_posixsubprocess", None)
        sys.addaudithook(hook)

    _install(_cfg)
    del _install
del _cfg, _f, _source
exec(_code, {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__})
'''


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed run.

    ``ok`` is True only for a clean exit (return code 0, no timeout, no limit hit).
    ``killed_reason`` says why a run ended abnormally: ``"timeout"`` (wall clock),
    ``"cpu_limit"``, ``"memory"`` (``MemoryError`` or a kill under the address-space
    cap), ``"output_limit"``, ``"blocked"`` (the audit hook refused an operation and
    the error was not caught), ``"signal <NAME>"``; ``None`` otherwise, including for
    an ordinary non-zero exit such as a failed assertion.
    """

    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None
    duration_s: float = 0.0


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _read_roots() -> list[str]:
    """Directories the child may read: the interpreter's installation and its ``sys.path``."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots = set(prefixes)
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        # Only sys.path entries inside the installation: an editable checkout on sys.path
        # would otherwise expose a whole working tree (and its .env files) to reads.
        if real and any(real == p or real.startswith(p + os.sep) for p in prefixes):
            roots.add(real)
    return sorted(roots)


def _user_task_count(uid: int) -> int:
    """Tasks (threads included) the kernel charges to ``uid``: what ``RLIMIT_NPROC`` counts."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1 ").split()[0]) == uid:
            total += int(fields.get("Threads", "1").strip())
    return total


def _make_preexec(limits: list[tuple[int, int]], isolate_network: bool) -> Callable[[], None]:
    libc = _libc() if isolate_network else None

    def preexec() -> None:  # runs in the forked child, before exec: keep it to syscalls
        if libc is not None and libc.unshare(_CLONE_NEWNET) != 0:
            libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET)  # unprivileged fallback; may fail too
        for which, value in limits:
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass  # a limit above the inherited hard limit: keep the inherited one

    return preexec


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_python(
    code: str,
    *,
    stdin: str | None = None,
    timeout_s: float = 2.0,
    memory_mb: int | None = 256,
    allow_network: bool = False,
    max_output_bytes: int = 100_000,
    max_file_mb: int = 16,
    max_processes: int = 32,
    audit_hook: bool = True,
    python: str | None = None,
) -> SandboxResult:
    """Run ``code`` as ``__main__`` in a limited child interpreter and capture its output.

    Args:
        code: Python source, run as ``main.py`` in a fresh temporary working directory.
        stdin: text fed to the program's standard input (empty when None).
        timeout_s: wall-clock limit; the whole process group is killed when it passes.
            ``RLIMIT_CPU`` is set to ``ceil(timeout_s) + 1`` seconds as a second guard.
        memory_mb: ``RLIMIT_AS`` cap on the child's address space; None for no cap.
        allow_network: when False, sockets are refused by the audit hook and, where the
            kernel allows it, the child gets an empty network namespace.
        max_output_bytes: per stream; the run is killed (``"output_limit"``) past it.
        max_file_mb: ``RLIMIT_FSIZE``, the largest file the code may write.
        max_processes: extra processes allowed by ``RLIMIT_NPROC`` beyond those the user
            already has (not enforced for root; see the module docstring).
        audit_hook: install the in-interpreter guard. Turn off only to test the OS layer.
        python: interpreter to run; defaults to the current one.

    Returns:
        A ``SandboxResult``. Never raises for anything the child does.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}; pass e.g. 2.0")
    workdir = tempfile.mkdtemp(prefix="course-sandbox-")
    try:
        code_path = os.path.join(workdir, _CODE_FILENAME)
        with open(code_path, "w", encoding="utf-8") as f:
            f.write(code)
        stdin_path = os.path.join(workdir, ".stdin")
        with open(stdin_path, "w", encoding="utf-8") as f:
            f.write(stdin or "")
        config = {"code_file": _CODE_FILENAME, "workdir": workdir, "audit": audit_hook,
                  "allow_network": allow_network, "read_roots": _read_roots()}
        cpu_s = int(math.ceil(timeout_s)) + 1
        limits = [(resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_CORE, 0),
                  (resource.RLIMIT_FSIZE, max_file_mb * 2**20), (resource.RLIMIT_NOFILE, 256)]
        if memory_mb is not None:
            limits.append((resource.RLIMIT_AS, memory_mb * 2**20))
        if os.geteuid() != 0:  # the kernel ignores RLIMIT_NPROC for root anyway
            limits.append((resource.RLIMIT_NPROC, _user_task_count(os.getuid()) + max_processes))
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "HOME": workdir, "TMPDIR": workdir, "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        argv = [python or sys.executable, "-I", "-B", "-X", "utf8", "-c", _PRELUDE, json.dumps(config)]
        with open(stdin_path, "rb") as stdin_file:
            return _supervise(argv, env, workdir, stdin_file, limits, not allow_network,
                              timeout_s, max_output_bytes, memory_mb)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _supervise(argv, env, workdir, stdin_file, limits, isolate_network, timeout_s,
               max_output_bytes, memory_mb) -> SandboxResult:
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=stdin_file, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                            preexec_fn=_make_preexec(limits, isolate_network))
    chunks = {"stdout": [], "stderr": []}
    sizes = {"stdout": 0, "stderr": 0}
    reason = None
    deadline = start + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                reason = "timeout"
                break
            if proc.poll() is not None:
                # The main process is gone: kill stragglers that keep the pipes open,
                # then drain what is left (the loop ends when both pipes reach EOF).
                _kill_group(proc.pid)
            for key, _ in sel.select(timeout=min(0.05, max(deadline - now, 0))):
                data = os.read(key.fileobj.fileno(), 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                name = key.data
                room = max_output_bytes - sizes[name]
                chunks[name].append(data[:room])
                sizes[name] += len(data)
                if sizes[name] > max_output_bytes:
                    reason = "output_limit"
            if reason:
                break
    _kill_group(proc.pid)
    returncode = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    stdout = b"".join(chunks["stdout"]).decode("utf-8", "replace")
    stderr = b"".join(chunks["stderr"]).decode("utf-8", "replace")
    if reason is None:
        reason = _classify_exit(returncode, stderr, memory_mb)
    return SandboxResult(ok=returncode == 0 and reason is None, returncode=returncode,
                         stdout=stdout, stderr=stderr, timed_out=reason == "timeout",
                         killed_reason=reason, duration_s=time.monotonic() - start)


def _classify_exit(returncode: int, stderr: str, memory_mb: int | None) -> str | None:
    last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        if name == "SIGXCPU":
            return "cpu_limit"
        if memory_mb is not None and "MemoryError" in stderr:
            return "memory"
        return f"signal {name}"
    if last_line.startswith("MemoryError"):
        return "memory"
    if "SandboxViolation" in last_line:
        return "blocked"
    return None


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
    # assertion, and the pass marker is printed only after the assertion ran.
    return (
        "import sys as _sys\n"
        f"_ns = {{'__name__': '__main__'}}\n"
        "try:\n"
        f"    exec(compile({code!r}, 'solution.py', 'exec'), _ns)\n"
        "except SystemExit:\n"
        "    pass\n"
        f"exec(compile({assertion!r}, 'test.py', 'exec'), _ns)\n"
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


@functools.lru_cache(maxsize=1)
def sandbox_guards() -> dict[str, bool]:
    """Which OS-level guards work on this machine (probed once, in a child process).

    ``network_namespace``: the child gets its own network namespace.
    ``process_limit``: the kernel enforces ``RLIMIT_NPROC`` for this user (False for root).
    """
    probe = (
        "import json, os, resource\n"
        "resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))\n"
        "try:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "    limited = False\n"
        "except OSError:\n"
        "    limited = True\n"
        "print(json.dumps({'net': os.readlink('/proc/self/ns/net'), 'limited': limited}))\n"
    )
    result = run_python(probe, audit_hook=False, timeout_s=10.0)
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"network_namespace": False, "process_limit": False}
    return {"network_namespace": seen["net"] != os.readlink("/proc/self/ns/net"),
            "process_limit": bool(seen["limited"])}
