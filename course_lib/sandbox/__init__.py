"""Run model-written Python behind an operating-system boundary, for code-execution rewards.

``run_python`` runs one program; ``run_tests`` runs it against test cases (the verifier
behind ``course_lib.rewards.code_execution_reward``); ``detect_isolation`` and
``sandbox_guards`` report which guards hold on this machine.

A code verifier (the "run the tests" reward of RLVR) executes text a policy wrote,
thousands of times, including its worst ideas. The guards, strongest first:

1. **Namespaces and an unprivileged user** (``isolation.py``): each program runs under
   bubblewrap in new mount, PID, network, IPC, UTS and cgroup namespaces, as uid 65534
   with no capabilities. Its file system holds only read-only binds of the shared
   libraries, the interpreter, the standard library and ``site-packages``, plus two
   private, size-capped tmpfs folders (``/sandbox``, its working directory, and
   ``/tmp``). The host's files, processes, network and environment do not exist for it.
2. **A seccomp filter** (``seccomp.py``, libseccomp): system calls only an escape needs
   (new namespaces, mounts, ``ptrace``, ``bpf``, ``io_uring``, key rings...) fail.
3. **Resource limits**: a wall-clock kill of the whole sandbox (the PID namespace dies
   with it), ``setrlimit`` caps on address space, CPU seconds, file size, open files,
   core dumps and processes (``RLIMIT_NPROC``, enforced because the child's real uid is
   not root), and caps on captured output.
4. **An audit hook** (PEP 578, ``_prelude.py``): the second layer. It refuses process
   creation, sockets, ``ctypes`` calls and file access outside the working directory
   with a readable ``SandboxViolation`` message, which is what a policy that stumbles into
   ``os.system`` or ``sys.exit`` tricks usually meets first. Audit hooks are not a
   security boundary (a subinterpreter has none; Python code can rewrite the functions
   the hook calls); the layers above do not rely on it.

``detect_isolation`` probes once per process. Where bubblewrap is missing or the kernel
refuses the namespaces, ``run_python`` raises ``SandboxUnavailableError`` with the fix
(install ``bubblewrap``) instead of running code unprotected; ``isolation="process"``
opts out explicitly, for code you wrote yourself. Verdicts of ``run_tests`` are computed
in the parent from plain values (``verify.py``), never from the child's objects.

A run costs about 60-100 ms (interpreter start-up inside a fresh set of namespaces).
Remaining gaps, stated plainly: the kernel is shared (a kernel exploit is out of scope;
use gVisor or a VM per run for that), and the child reports its values over its own
standard output, so code that deliberately reads the verifier harness could forge a
report (see ``verify.py``).
"""

from .isolation import INSTALL_HINT, Isolation, SandboxUnavailableError, detect_isolation
from .runner import SandboxResult, run_python, sandbox_guards
from .verify import VerificationReport, run_tests

__all__ = ["INSTALL_HINT", "Isolation", "SandboxResult", "SandboxUnavailableError", "VerificationReport", "detect_isolation",
           "run_python", "run_tests", "sandbox_guards"]
