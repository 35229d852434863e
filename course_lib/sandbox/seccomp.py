"""A seccomp filter for the sandbox: system calls that only an escape attempt needs fail with EPERM.

Namespaces decide what the child can *see*; this filter narrows what it can *ask the
kernel* for. It is built with libseccomp (through the ``pyseccomp`` binding), exported
as a BPF program into an in-memory file, and handed to bubblewrap (``--seccomp FD``),
which installs it just before starting the child; every process the child creates
inherits it. Everything not listed is allowed, as in Flatpak's default policy.

Refused with ``EPERM``:

- new namespaces: ``unshare``, ``setns``, and ``clone`` with any ``CLONE_NEW*`` flag
  (a new user namespace would hand the child a full set of capabilities inside it);
  ``clone3`` gets ``ENOSYS`` instead, because its flags sit in memory the filter cannot
  read, and the C library then falls back to ``clone``;
- mounts and root changes: ``mount``, ``umount2``, ``pivot_root``, ``chroot``,
  ``open_by_handle_at`` / ``name_to_handle_at`` (a known container escape);
- reaching into other processes or the kernel: ``ptrace``, ``process_vm_readv/writev``,
  ``kcmp``, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``, the key
  ring (``keyctl``, ``add_key``, ``request_key``), ``fanotify_init``, ``syslog``;
- machine administration: module loading, ``kexec_*``, ``reboot``, ``swapon/off``,
  ``acct``, ``quotactl``, ``settimeofday``/``clock_settime``, ``vhangup``;
- memory outside the caps: ``memfd_create`` (its pages are not counted by
  ``RLIMIT_AS``, and a file limit per descriptor would multiply by the open-file limit);
- sockets of any family but ``AF_UNIX`` (``socket`` and ``socketpair``); with
  ``allow_network`` also ``AF_INET`` and ``AF_INET6``. The network namespace already
  hides the host's interfaces, but not every family is namespaced (``AF_VSOCK`` reaches
  the hypervisor of a virtual machine), so the family itself is checked.

System calls of another architecture (the 32-bit ABI on x86-64) kill the process, the
libseccomp default, so the filter cannot be sidestepped through ``int 0x80``.
"""

from __future__ import annotations

import errno
import functools
import os

__all__ = ["REFUSED_SYSCALLS", "allowed_socket_families", "seccomp_filter_fd", "seccomp_unavailable_reason"]

REFUSED_SYSCALLS = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_by_handle_at", "name_to_handle_at",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
    "fanotify_init", "syslog", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "vhangup", "lookup_dcookie", "fsopen", "fsmount", "move_mount", "open_tree",
    "memfd_create", "memfd_secret",
)
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
_LARGEST_FAMILY = 64  # AF_MAX is 46 in Linux 6.x; every family above this is refused too
_CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080,
}


def allowed_socket_families(allow_network: bool) -> tuple[int, ...]:
    """Address families ``socket()`` may open in the sandbox."""
    return (AF_UNIX, AF_INET, AF_INET6) if allow_network else (AF_UNIX,)


@functools.lru_cache(maxsize=2)
def _compiled(allow_network: bool = False) -> bytes | str:
    """The filter as BPF bytes, or the reason it cannot be built."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError, AttributeError) as error:  # no binding, or no libseccomp.so.2
        return (f"the seccomp layer needs the pyseccomp package and the libseccomp library ({error}); "
                "`pip install pyseccomp` and `apt-get install libseccomp2`")
    try:
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        refuse = seccomp.ERRNO(errno.EPERM)
        for name in REFUSED_SYSCALLS:
            try:
                rules.add_rule(refuse, name)
            except (OSError, ValueError):
                pass  # a call this kernel/architecture does not have
        for flag in _CLONE_NAMESPACE_FLAGS.values():
            rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        try:
            rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        except (OSError, ValueError):
            pass
        # A family outside the allowed set: libseccomp takes one comparison per argument
        # and rule, so every refused family below the top gets its own rule, and one rule
        # refuses everything above (the comparison covers all 64 bits of the argument).
        allowed = allowed_socket_families(allow_network)
        refuse_family = seccomp.ERRNO(errno.EAFNOSUPPORT)
        for call in ("socket", "socketpair"):
            for family in range(_LARGEST_FAMILY + 1):
                if family not in allowed:
                    rules.add_rule(refuse_family, call, seccomp.Arg(0, seccomp.EQ, family))
            rules.add_rule(refuse_family, call, seccomp.Arg(0, seccomp.GT, _LARGEST_FAMILY))
        fd = os.memfd_create("seccomp-export", 0)
        try:
            with os.fdopen(os.dup(fd), "wb") as file:
                rules.export_bpf(file)
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    except OSError as error:
        return f"libseccomp could not build the filter: {error}"


def seccomp_unavailable_reason() -> str | None:
    """None when the filter can be built here, else why not and how to fix it."""
    compiled = _compiled()
    return compiled if isinstance(compiled, str) else None


def seccomp_filter_fd(allow_network: bool = False) -> int:
    """A fresh in-memory file holding the BPF filter, positioned at its start; the caller closes it."""
    compiled = _compiled(bool(allow_network))
    if isinstance(compiled, str):
        raise RuntimeError(compiled)
    fd = os.memfd_create("seccomp", 0)
    os.write(fd, compiled)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
