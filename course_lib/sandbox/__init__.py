"""Run model-written Python in a child process with limits, for code-execution rewards.

``run_python`` runs one program; ``run_tests`` runs it against test cases (the verifier
behind ``course_lib.rewards.code_execution_reward``); ``sandbox_guards`` reports which
OS-level guards work on this machine.

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
   signals to other processes, sockets, foreign calls and raw memory reads through
   ``ctypes`` (loading a library stays allowed: numpy needs it), raising resource
   limits, writing or deleting anything outside the temporary directory, and reading
   files outside the Python installation and the temporary directory (so
   ``/proc/<parent>/environ`` and secrets on disk stay out of reach).

A run costs one interpreter start-up, about 50 ms on a laptop-class CPU.

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

from .isolation import Isolation, SandboxUnavailableError, detect_isolation
from .runner import SandboxResult, run_python, sandbox_guards
from .verify import VerificationReport, run_tests

__all__ = ["Isolation", "SandboxResult", "SandboxUnavailableError", "VerificationReport", "detect_isolation",
           "run_python", "run_tests", "sandbox_guards"]
