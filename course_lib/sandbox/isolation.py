"""The operating-system boundary of the sandbox: bubblewrap namespaces, chosen at run time.

``detect_isolation()`` finds out once per process which boundary this machine can give and
``bwrap_argv`` builds the command line that wraps one child interpreter in it. Two modes,
both built on bubblewrap (``bwrap``, the sandbox behind Flatpak), a small setuid-free tool
that creates Linux namespaces and mounts:

- ``"bwrap-nobody"`` (when the trainer runs as root, as in most containers and Colab):
  bubblewrap sets up the namespaces with root's privileges, then ``setpriv`` switches the
  child to the real unprivileged user ``nobody`` (uid 65534) with no capabilities and
  ``no_new_privs``. Being a real non-root user, the kernel enforces ``RLIMIT_NPROC`` on it,
  so a fork bomb is capped without any help from Python.
- ``"bwrap-userns"`` (an ordinary user): bubblewrap creates an unprivileged user
  namespace and maps the child to uid 65534 inside it; further user namespaces are
  disabled (``--disable-userns``).

In both modes the child gets new PID, network (no interfaces but a downed loopback), IPC,
UTS and cgroup namespaces, and a root file system built from nothing: read-only binds of
the shared libraries (``/usr/lib*``), the interpreter binary, the standard library and
the ``site-packages`` folders on ``sys.path``, a fresh ``/proc`` for its own PID namespace,
a minimal ``/dev``, and two size-capped tmpfs folders, ``/sandbox`` (its working
directory) and ``/tmp``. Nothing else of the host exists inside: no ``/etc``, no home
folders, no project tree, no shell. The child is the PID namespace's only tree, so
killing bubblewrap (``--die-with-parent``) kills every process it started.

If bubblewrap is missing or the kernel refuses the namespaces, ``detect_isolation``
reports why and ``run_python`` refuses to run code (``SandboxUnavailableError``) rather
than run it unprotected. There is no weaker fallback: without the seccomp filter (which
needs libseccomp) no mode is offered, and as root only ``"bwrap-nobody"`` is, because a
user namespace started by root maps the child's "uid 65534" back to host uid 0, on which
the kernel enforces no process limit.

The private ``/tmp`` is mounted before the read-only binds, so a virtual environment that
lives under ``/tmp`` stays visible inside (bound on top of the private ``/tmp``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

from .seccomp import seccomp_filter_fd, seccomp_unavailable_reason

__all__ = ["INSTALL_HINT", "SECCOMP_HINT", "Isolation", "SandboxUnavailableError", "bwrap_argv",
           "detect_isolation", "refusal_for", "SANDBOX_DIR", "SANDBOX_UID"]

SANDBOX_DIR = "/sandbox"  # the child's working directory (a tmpfs)
SANDBOX_UID = 65534  # "nobody" on Debian, Ubuntu, Fedora and Alpine

INSTALL_HINT = (
    "Install bubblewrap: `sudo apt-get install bubblewrap` (Debian, Ubuntu, Colab: `!apt-get install -y "
    "bubblewrap`), `sudo dnf install bubblewrap` (Fedora), `sudo pacman -S bubblewrap` (Arch). As a non-root "
    "user the kernel must also allow unprivileged user namespaces (Ubuntu 24.04: `sudo sysctl -w "
    "kernel.apparmor_restrict_unprivileged_userns=0`, or run as root). Check with "
    "`python -c \"from course_lib.sandbox import detect_isolation; print(detect_isolation())\"`."
)


SECCOMP_HINT = ("Install libseccomp: `sudo apt-get install libseccomp2` (Debian, Ubuntu), `sudo dnf install "
                "libseccomp` (Fedora), `sudo pacman -S libseccomp` (Arch); the `pyseccomp` package comes with "
                "the course.")


class SandboxUnavailableError(RuntimeError):
    """Raised instead of running untrusted code when no OS isolation works on this machine."""


@dataclass(frozen=True)
class Isolation:
    """What ``detect_isolation`` found: ``mode`` is None when nothing works, with ``reason``."""

    mode: str | None
    bwrap: str | None = None
    setpriv: str | None = None
    seccomp: bool = False
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.mode is not None


def _library_dirs() -> list[str]:
    """Folders the dynamic loader needs (libc, libm, libpython, numpy's libraries)."""
    found = []
    for path in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32"):
        if os.path.isdir(path) and not os.path.islink(path):
            found.append(path)
    return found


def _python_dirs() -> list[str]:
    """Real paths of everything the interpreter reads: its lib folder and sys.path entries.

    Only ``sys.path`` entries inside the interpreter's installation or virtual environment
    are kept: an editable checkout on ``sys.path`` would otherwise expose a whole working
    tree (and its ``.env`` files) to the child.
    """
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    dirs = set()
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and os.path.isdir(libdir):
        dirs.add(os.path.realpath(libdir))
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and any(real == p or real.startswith(p + os.sep) for p in prefixes):
            dirs.add(real)
    return sorted(dirs)


def child_sys_path() -> list[str]:
    """``sys.path`` for the child (it starts with ``-S``, so ``site`` adds nothing)."""
    return _python_dirs()


def _outermost(paths: list[str]) -> list[str]:
    """Drop paths nested inside another path of the list (one bind covers them)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return sorted(kept)


def _mounts(extra_files: list[str]) -> list[str]:
    """bwrap arguments for the read-only view: parents as 0755 folders, then binds."""
    args: list[str] = []
    made = {"/", "/tmp"}  # /tmp is the private tmpfs, mounted before these binds
    folders = _outermost(_library_dirs() + _python_dirs())
    inside = lambda path: any(path.startswith(folder + "/") for folder in folders)  # noqa: E731
    binds = folders + sorted({f for f in extra_files if not inside(f)})

    def parents(path: str) -> None:
        # bubblewrap creates missing parents with the host folder's mode (0700 for /root):
        # create them first, world-traversable, so the unprivileged child can reach the bind.
        parent = os.path.dirname(path)
        chain = []
        while parent not in made:
            chain.append(parent)
            parent = os.path.dirname(parent)
        for folder in reversed(chain):
            args.extend(["--perms", "0755", "--dir", folder])
            made.add(folder)

    for path in binds:
        parents(path)
        args.extend(["--ro-bind", path, path])
    for link in ("/lib", "/lib64", "/lib32", "/bin"):
        if os.path.islink(link):  # merged-/usr systems: /lib -> usr/lib
            target = os.readlink(link)
            if os.path.isdir(os.path.join("/", target)):
                args.extend(["--symlink", target, link])
    return args


def interpreter() -> str:
    """The real interpreter binary (a venv's ``bin/python`` is a symlink to it)."""
    return os.path.realpath(sys.executable)


def bwrap_argv(isolation: Isolation, command: list[str], *, env: dict[str, str], allow_network: bool,
               workdir_mb: int, code_fd: int, seccomp_fd: int | None = None) -> list[str]:
    """The full command line: bubblewrap around ``command``, which runs as uid 65534.

    ``code_fd`` is an open file whose content bubblewrap copies to ``/sandbox/main.py``;
    ``seccomp_fd`` one holding the BPF filter of ``seccomp.py`` (both passed to the child).
    """
    argv = [isolation.bwrap, "--die-with-parent", "--new-session",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox"]
    if not allow_network:
        argv.append("--unshare-net")
    if isolation.mode == "bwrap-userns":
        argv += ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    argv.append("--clearenv")
    for key, value in env.items():
        argv += ["--setenv", key, value]
    extra = [interpreter()] + ([isolation.setpriv] if isolation.mode == "bwrap-nobody" else [])
    size = str(workdir_mb * 2**20)
    # The private /tmp first: binds of folders under /tmp (a virtual environment made
    # there) then land on top of it instead of being hidden by it.
    argv += ["--size", size, "--perms", "01777", "--tmpfs", "/tmp"]
    argv += _mounts(extra)
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", size, "--perms", "0777", "--tmpfs", SANDBOX_DIR,
             "--perms", "0644", "--file", str(code_fd), f"{SANDBOX_DIR}/main.py",
             "--remount-ro", "/", "--chdir", SANDBOX_DIR]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if isolation.mode == "bwrap-nobody":
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", isolation.setpriv,
                 f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        argv += ["--cap-drop", "ALL"]
    return argv + command


def _probe(isolation: Isolation) -> str | None:
    """Run ``print(os.getuid())`` in the sandbox; None when it works, else the error."""
    read, write = os.pipe()
    filter_fd = seccomp_filter_fd() if isolation.seccomp else None
    fds = (read,) if filter_fd is None else (read, filter_fd)
    try:
        os.close(write)
        argv = bwrap_argv(isolation, [interpreter(), "-I", "-S", "-c", "import os; print(os.getuid())"],
                          env={"PATH": "/usr/bin"}, allow_network=False, workdir_mb=1, code_fd=read,
                          seccomp_fd=filter_fd)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, pass_fds=fds)
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
    finally:
        for fd in fds:
            os.close(fd)
    if done.returncode != 0 or done.stdout.strip() != str(SANDBOX_UID):
        return (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}")[-500:]
    return None


def refusal_for(isolation: Isolation) -> str | None:
    """Why ``isolation`` must not run untrusted code here, or None when it may.

    Checked on every run, not only at detection: a hand-built ``Isolation`` (or one found
    before the process gained root) gets the same refusal instead of a silent downgrade.
    """
    if not isolation.available:
        return isolation.reason or "no OS isolation"
    if not isolation.seccomp:
        return ("the seccomp filter is off, and without it the child could ask the kernel for new namespaces, "
                "other socket families or memory files. " + SECCOMP_HINT)
    if os.geteuid() == 0 and isolation.mode != "bwrap-nobody":
        return (f"running as root, the {isolation.mode!r} mode would map the child to host uid 0 (no process "
                "limit, ptrace of its own tree); as root only 'bwrap-nobody' (setpriv to uid 65534) is used. "
                "Install setpriv (util-linux) or run as an ordinary user.")
    return None


@functools.lru_cache(maxsize=1)
def detect_isolation() -> Isolation:
    """Probe (once) for the strongest isolation this machine supports; see the module docstring.

    Never returns a weaker mode than the machine's user calls for: without libseccomp, or as
    root without ``setpriv``, it returns ``mode=None`` with the reason and the fix.
    """
    if not sys.platform.startswith("linux"):
        return Isolation(None, reason=f"the sandbox needs Linux namespaces; this is {sys.platform}. Run the "
                                      "course on Linux (Colab, a Linux VM or container).")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Isolation(None, reason="bubblewrap (bwrap) is not installed. " + INSTALL_HINT)
    seccomp_error = seccomp_unavailable_reason()
    if seccomp_error is not None:
        return Isolation(None, bwrap=bwrap, reason=f"bubblewrap is installed, but {seccomp_error}. " + SECCOMP_HINT)
    if os.geteuid() == 0:
        # As root, a user namespace would map the child back to host uid 0: the only mode
        # is a real switch to the unprivileged uid 65534 (which the kernel then limits).
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            return Isolation(None, bwrap=bwrap, reason="running as root, the sandbox switches the child to uid "
                             "65534 with setpriv, which is not installed: `apt-get install util-linux` (it is "
                             "part of every Debian and Ubuntu base system), or run as an ordinary user.")
        candidate = Isolation("bwrap-nobody", bwrap=bwrap, setpriv=setpriv, seccomp=True)
    else:
        candidate = Isolation("bwrap-userns", bwrap=bwrap, seccomp=True)
    error = _probe(candidate)
    if error is None:
        return candidate
    return Isolation(None, bwrap=bwrap, reason=f"bubblewrap is installed but could not create the sandbox "
                     f"({candidate.mode}: {error}). " + INSTALL_HINT)


def require_isolation(user: str) -> None:
    """Raise :class:`SandboxUnavailableError` now when ``user`` (e.g. a reward function that will
    run untrusted code) could not run it on this machine: at the start of a run, not at the
    first completion that holds code."""
    refusal = refusal_for(detect_isolation())
    if refusal is not None:
        raise SandboxUnavailableError(f"{user} runs untrusted code in the sandbox, which cannot run here: {refusal}")
