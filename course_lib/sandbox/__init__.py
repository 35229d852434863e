"""Run model-written Python behind an operating-system boundary, for code-execution rewards.

``run_python`` runs one program; ``run_tests`` runs it against test cases (the verifier
behind ``course_lib.rewards.code_execution_reward``); ``detect_isolation`` and
``sandbox_guards`` report which guards hold on this machine. ``runner.py`` starts and
supervises the one child interpreter (limits, timeout, output capture).

A code verifier (the "run the tests" reward of RLVR) executes text a policy wrote,
thousands of times, including its worst ideas. The guards, strongest first:

1. **Namespaces and an unprivileged user** (``isolation.py``): each program runs under
   bubblewrap in new mount, PID, network, IPC, UTS and cgroup namespaces, as uid 65534
   with no capabilities. Its file system holds only read-only binds of the shared
   libraries, the interpreter, the standard library and ``site-packages``, plus two
   private, size-capped tmpfs folders (``/sandbox``, its working directory, and
   ``/tmp``). The host's files, processes, network and environment do not exist for it.
2. **A seccomp filter** (``seccomp.py``, libseccomp): system calls only an escape needs
   (new namespaces, mounts, ``ptrace``, ``bpf``, ``io_uring``, key rings...) fail, and so
   do ``memfd_create`` and sockets of any family but ``AF_UNIX`` (plus ``AF_INET`` and
   ``AF_INET6`` with ``allow_network``).
3. **Resource limits**: a wall-clock kill of the whole sandbox (the PID namespace dies
   with it), a memory cgroup per run where one can be made (``cgroup.py``: every process
   and tmpfs page of the run under ``memory_mb``), ``setrlimit`` caps on address space,
   CPU seconds, file size, open files (64), core dumps and processes (``RLIMIT_NPROC``,
   enforced because the child's real uid is not root), and caps on captured output.
4. **An audit hook** (PEP 578, ``_prelude.py``): the second layer. It refuses process
   creation, sockets, ``ctypes`` calls and file access outside the working directory
   with a readable ``SandboxViolation`` message, which is what a policy that stumbles into
   ``os.system`` or ``sys.exit`` tricks usually meets first. Audit hooks are not a
   security boundary (a subinterpreter has none; Python code can rewrite the functions
   the hook calls); the layers above do not rely on it.

``detect_isolation`` probes once per process. Where bubblewrap or libseccomp is missing,
or the kernel refuses the namespaces, ``run_python`` raises ``SandboxUnavailableError``
with the fix instead of running code unprotected; there is no weaker fallback (as root,
the child always becomes uid 65534). ``isolation="process"`` opts out explicitly, for
code you wrote yourself: a plain child process with rlimits and the audit hook, as your
user, seeing your files (no security boundary). Limits that make no sense (``memory_mb=-1``,
``timeout_s=nan``) are refused with the argument's name. Verdicts of ``run_tests`` are
computed in the parent from plain values, and every assertion must report
(``verify.py``), never from the child's objects.

A run costs about 60-100 ms (interpreter start-up inside a fresh set of namespaces).
Remaining gaps, stated plainly: the kernel is shared (a kernel exploit is out of scope;
use gVisor or a VM per run for that); the values of an assertion's operands are computed
by the code under test, so a solution can claim any value it could also have returned
(hard-coding answers; see ``verify.py``); and without a cgroup (no permission to make
one) a run's memory is bounded per process, about ``max_processes`` x ``memory_mb``.
"""

from .isolation import INSTALL_HINT, Isolation, SandboxUnavailableError, detect_isolation
from .runner import SandboxResult, run_python, sandbox_guards
from .verify import VerificationReport, run_tests

__all__ = ["INSTALL_HINT", "Isolation", "SandboxResult", "SandboxUnavailableError", "VerificationReport", "detect_isolation",
           "run_python", "run_tests", "sandbox_guards"]
