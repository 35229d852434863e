"""Start and supervise one sandboxed child interpreter: limits, timeout, output capture.

See the package docstring for the layers of protection and their limits. The child runs
``_prelude.py`` (passed with ``-c``), which installs the audit hook and runs the code;
with ``isolation="os"`` (the default) it runs inside bubblewrap (``isolation.py``).
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
from pathlib import Path
from typing import Callable

from .cgroup import MemoryCgroup
from .isolation import (SANDBOX_DIR, SANDBOX_UID, SandboxUnavailableError, bwrap_argv, child_sys_path,
                        detect_isolation, interpreter, refusal_for)
from .seccomp import seccomp_filter_fd

__all__ = ["SandboxResult", "SandboxUnavailableError", "run_python", "sandbox_guards"]

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_CODE_FILENAME = "main.py"
# Open files per process: enough for Python, NumPy and a few files of its own. Each open
# file can hold up to RLIMIT_FSIZE, so this also bounds what one process can write.
_MAX_OPEN_FILES = 64
# The smallest memory cap a Python interpreter starts under (it maps ~20 MB at start-up).
_MIN_MEMORY_MB = 32
# Passed to the child with -c: the code under test cannot edit it on disk.
_PRELUDE = (Path(__file__).with_name("_prelude.py")).read_text(encoding="utf-8")


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


def _make_preexec(limits: list[tuple[int, int]], isolate_network: bool,
                  cgroup_procs: str | None = None) -> Callable[[], None]:
    libc = _libc() if isolate_network else None

    def preexec() -> None:  # runs in the forked child, before exec: keep it to syscalls
        if cgroup_procs is not None:  # enter the run's memory cgroup: all it starts is counted
            try:
                fd = os.open(cgroup_procs, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            except OSError:
                pass  # the kernel would not move us (v2 placement rules): the per-process caps still hold
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
    isolation: str = "os",
    workdir_mb: int = 64,
) -> SandboxResult:
    """Run ``code`` as ``__main__`` in a limited child interpreter and capture its output.

    Args:
        code: Python source, run as ``main.py`` in a fresh, empty working directory.
        stdin: text fed to the program's standard input (empty when None).
        timeout_s: wall-clock limit; the whole sandbox is killed when it passes.
            ``RLIMIT_CPU`` is set to ``ceil(timeout_s) + 1`` seconds as a second guard.
        memory_mb: ``RLIMIT_AS`` cap on each process's address space and, with
            ``isolation="os"`` where a control group can be made (``cgroup.py``), on the
            whole run's memory (all its processes and tmpfs files); None for no cap.
            At least 32.
        allow_network: when False the child has its own, empty network namespace (and the
            audit hook refuses sockets).
        max_output_bytes: per stream; the run is killed (``"output_limit"``) past it.
        max_file_mb: ``RLIMIT_FSIZE``, the largest file the code may write.
        max_processes: extra processes allowed by ``RLIMIT_NPROC`` beyond those the
            sandbox user already has (not enforced when the child's real uid is root).
        audit_hook: install the in-interpreter second layer. Turn off only to test the OS layer.
        isolation: ``"os"`` (default) runs the child inside bubblewrap namespaces as an
            unprivileged user (see ``isolation.py``) and raises ``SandboxUnavailableError``
            when this machine cannot; ``"process"`` runs it as a plain child process with
            rlimits and the audit hook only: for code you wrote yourself, never for
            model output.
        workdir_mb: size of the child's tmpfs working directory and ``/tmp`` (``"os"`` only).

    Returns:
        A ``SandboxResult``. Never raises for anything the child does.

    Raises:
        SandboxUnavailableError: ``isolation="os"`` on a machine without working bubblewrap
            and libseccomp (or, as root, without ``setpriv``).
        ValueError, TypeError: a limit that is not a finite positive number (the message
            names the argument): ``memory_mb=-1`` would otherwise mean no cap at all.
    """
    _check_arguments(code=code, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb,
                     max_output_bytes=max_output_bytes, max_file_mb=max_file_mb, max_processes=max_processes,
                     workdir_mb=workdir_mb, isolation=isolation)
    cpu_s = int(math.ceil(timeout_s)) + 1
    limits = [(resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_CORE, 0),
              (resource.RLIMIT_FSIZE, max_file_mb * 2**20), (resource.RLIMIT_NOFILE, _MAX_OPEN_FILES)]
    if memory_mb is not None:
        limits.append((resource.RLIMIT_AS, memory_mb * 2**20))
    if isolation == "os":
        found = detect_isolation()
        refusal = refusal_for(found)
        if refusal is not None:
            raise SandboxUnavailableError(f"refusing to run untrusted code without OS isolation: {refusal}")
        return _run_isolated(found, code, stdin, limits, timeout_s, memory_mb, allow_network, max_output_bytes,
                             max_processes, audit_hook, workdir_mb)
    return _run_process(code, stdin, limits, timeout_s, memory_mb, allow_network, max_output_bytes,
                        max_processes, audit_hook)


def _is_whole(value, *, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_arguments(*, code, stdin, timeout_s, memory_mb, max_output_bytes, max_file_mb, max_processes,
                     workdir_mb, isolation) -> None:
    """Refuse limits that would silently mean "no limit" or make every run fail, naming the argument."""
    if not isinstance(code, str):
        raise TypeError(f"code must be the program's source as a str, got {type(code).__name__}")
    if stdin is not None and not isinstance(stdin, str):
        raise TypeError(f"stdin must be a str or None, got {type(stdin).__name__}")
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s)
            or timeout_s <= 0):
        raise ValueError(f"timeout_s must be a finite number of seconds above 0, got {timeout_s!r}; pass e.g. 2.0")
    if memory_mb is not None and not _is_whole(memory_mb, minimum=_MIN_MEMORY_MB):
        raise ValueError(f"memory_mb must be a whole number of MiB, at least {_MIN_MEMORY_MB} (a Python "
                         f"interpreter needs that much to start), or None for no cap; got {memory_mb!r}")
    checks = (("max_output_bytes", max_output_bytes, 1, "100_000"), ("max_file_mb", max_file_mb, 1, "16"),
              ("max_processes", max_processes, 1, "32"), ("workdir_mb", workdir_mb, 1, "64"))
    for name, value, minimum, example in checks:
        if not _is_whole(value, minimum=minimum):
            raise ValueError(f"{name} must be a whole number of at least {minimum}, got {value!r}; "
                             f"the default is {example}")
    if isolation not in ("os", "process"):
        raise ValueError(f"isolation must be 'os' (bubblewrap) or 'process' (trusted code only), got {isolation!r}")


def _env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "HOME": home, "TMPDIR": home, "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _memfd(name: str, text: str) -> int:
    """An anonymous in-memory file holding ``text``, positioned at its start."""
    fd = os.memfd_create(name, 0)
    os.write(fd, text.encode("utf-8"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run_isolated(found, code, stdin, limits, timeout_s, memory_mb, allow_network, max_output_bytes,
                  max_processes, audit_hook, workdir_mb) -> SandboxResult:
    config = {"code_file": _CODE_FILENAME, "workdir": SANDBOX_DIR, "audit": audit_hook,
              "allow_network": allow_network, "read_roots": child_sys_path(), "sys_path": child_sys_path()}
    if found.mode == "bwrap-nobody":  # a real non-root uid: the kernel enforces RLIMIT_NPROC on it
        limits = limits + [(resource.RLIMIT_NPROC, _user_task_count(SANDBOX_UID) + max_processes)]
    elif os.geteuid() != 0:
        limits = limits + [(resource.RLIMIT_NPROC, _user_task_count(os.getuid()) + max_processes)]
    code_fd = _memfd("main.py", code)
    stdin_fd = _memfd("stdin", stdin or "")
    filter_fd = seccomp_filter_fd(allow_network)
    passed = (code_fd, filter_fd)
    # The whole run (every process and every tmpfs page) under one cap, where a cgroup can be made.
    group = MemoryCgroup.create(memory_mb * 2**20) if memory_mb is not None else None
    try:
        command = [interpreter(), "-I", "-B", "-X", "utf8", "-c", _PRELUDE, json.dumps(config)]
        argv = bwrap_argv(found, command, env=_env(SANDBOX_DIR), allow_network=allow_network,
                          workdir_mb=workdir_mb, code_fd=code_fd, seccomp_fd=filter_fd)
        return _supervise(argv, None, "/", stdin_fd, limits, False, timeout_s, max_output_bytes, memory_mb,
                          pass_fds=passed, wrapped=True, cgroup=group)
    finally:
        if group is not None:
            group.close()
        for fd in (*passed, stdin_fd):
            os.close(fd)


def _run_process(code, stdin, limits, timeout_s, memory_mb, allow_network, max_output_bytes, max_processes,
                 audit_hook) -> SandboxResult:
    workdir = tempfile.mkdtemp(prefix="course-sandbox-")
    try:
        code_path = os.path.join(workdir, _CODE_FILENAME)
        with open(code_path, "w", encoding="utf-8") as f:
            f.write(code)
        config = {"code_file": _CODE_FILENAME, "workdir": workdir, "audit": audit_hook,
                  "allow_network": allow_network, "read_roots": _read_roots(), "sys_path": None}
        if os.geteuid() != 0:  # the kernel ignores RLIMIT_NPROC for root anyway
            limits = limits + [(resource.RLIMIT_NPROC, _user_task_count(os.getuid()) + max_processes)]
        argv = [sys.executable, "-I", "-B", "-X", "utf8", "-c", _PRELUDE, json.dumps(config)]
        stdin_fd = _memfd("stdin", stdin or "")
        try:
            return _supervise(argv, _env(workdir), workdir, stdin_fd, limits, not allow_network,
                              timeout_s, max_output_bytes, memory_mb)
        finally:
            os.close(stdin_fd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _supervise(argv, env, cwd, stdin_fd, limits, isolate_network, timeout_s,
               max_output_bytes, memory_mb, pass_fds=(), wrapped=False, cgroup=None) -> SandboxResult:
    start = time.monotonic()
    preexec = _make_preexec(limits, isolate_network, cgroup.enter_path if cgroup is not None else None)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin_fd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True, pass_fds=pass_fds,
                            preexec_fn=preexec)
    chunks = {"stdout": [], "stderr": []}
    sizes = {"stdout": 0, "stderr": 0}
    reason = None
    deadline = start + timeout_s
    exited_at = None
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
                # then drain what is left (the loop ends when both pipes reach EOF). A
                # straggler that left the group (setsid) cannot hold us past a grace period.
                _kill_group(proc.pid)
                exited_at = exited_at or now
                if now - exited_at > 0.5:
                    break
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
    if reason is None:
        # Both pipes closed, but the program may still run (it can close its stdout).
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            reason = "timeout"
    _kill_group(proc.pid)
    returncode = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    stdout = b"".join(chunks["stdout"]).decode("utf-8", "replace")
    stderr = b"".join(chunks["stderr"]).decode("utf-8", "replace")
    if wrapped and returncode > 128:
        # bubblewrap reports a child killed by signal N as exit status 128 + N.
        returncode = -(returncode - 128)
    if reason is None and cgroup is not None and returncode != 0 and cgroup.out_of_memory():
        reason = "memory"  # the run as a whole reached its cgroup cap
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


@functools.lru_cache(maxsize=1)
def sandbox_guards() -> dict:
    """Which guards hold on this machine (probed once, in a sandboxed child).

    ``isolation``: the OS boundary ``run_python`` uses (``"bwrap-nobody"``,
    ``"bwrap-userns"``), or None when there is none (``reason`` says why and how to fix it).
    ``network_namespace``: the child gets its own network namespace.
    ``process_limit``: the kernel enforces ``RLIMIT_NPROC`` on the child's user.
    ``memory_cgroup``: each run gets a control group capping its total memory
    (``"v2"``, ``"v1"``), or None (then ``RLIMIT_AS`` per process bounds it).
    """
    found = detect_isolation()
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
    result = run_python(probe, audit_hook=False, timeout_s=10.0, isolation="os" if found.available else "process")
    group = MemoryCgroup.create(64 * 2**20)
    if group is not None:
        group.close()
    guards = {"isolation": found.mode, "reason": found.reason, "network_namespace": False, "process_limit": False,
              "memory_cgroup": f"v{group.version}" if group is not None else None}
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return guards
    guards["network_namespace"] = seen["net"] != os.readlink("/proc/self/ns/net")
    guards["process_limit"] = bool(seen["limited"])
    return guards
