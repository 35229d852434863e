"""Child-side start-up of a sandboxed run (runs inside the sandboxed interpreter).

``runner.run_python`` passes this file's text with ``python -I -B -c`` and a JSON
configuration as ``sys.argv[1]``. It compiles ``main.py`` from the working directory,
installs the audit hook (PEP 578) unless told not to, and executes the code as
``__main__``. Importing this module does nothing; only ``main()`` acts.

The hook is the second layer, a guard against accidents and reward hacks that explains
itself; it is not a boundary (a subinterpreter has no hook, and Python code can rewrite
the functions it calls). The boundary is bubblewrap's; see the package docstring.
"""

import json
import linecache
import os
import sys
import traceback

# Events refused outright: creating processes, foreign calls and raw memory through
# ctypes, raising resource limits, and walking the heap (which would reach the hook).
# ``ctypes.dlopen`` itself is allowed because numpy loads libraries with it.
BLOCKED_EVENTS = frozenset((
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
    "subprocess.Popen", "pty.spawn", "os.startfile", "os.killpg",
    "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "ctypes.string_at", "ctypes.wstring_at",
    "resource.setrlimit", "resource.prlimit",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
))
NETWORK_EVENTS = frozenset((
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex", "socket.getnameinfo",
))
# Events whose path arguments must all stay inside the working directory.
PATH_EVENTS = frozenset((
    "os.remove", "os.rename", "os.replace", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
    "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree", "shutil.copyfile",
    "shutil.copymode", "shutil.copystat", "shutil.move",
))
READABLE_FILES = frozenset(("/dev/null", "/dev/urandom", "/dev/zero", "/etc/localtime"))
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def make_hook(workdir, read_roots, allow_network):
    """The audit hook: raises ``PermissionError("SandboxViolation: ...")`` on refused events."""
    workdir = os.path.realpath(workdir)
    read_roots = tuple(os.path.realpath(p) for p in read_roots) + (workdir,)
    own_pid = os.getpid()
    # Everything the hook uses is bound here, in its closure, so that user code cannot
    # switch it off by rebinding module globals (``__main__.BLOCKED_EVENTS``) or builtins.
    realpath, fspath, sep, path_like = os.path.realpath, os.fspath, os.sep, os.PathLike
    blocked, network, path_events = BLOCKED_EVENTS, NETWORK_EVENTS, PATH_EVENTS
    readable, write_flags = READABLE_FILES, WRITE_FLAGS
    _any, _bool, _isinstance, _str, _bytes, _int = any, bool, isinstance, str, bytes, int
    _error = PermissionError

    def inside(path, roots):
        resolved = realpath(path)
        return _any(resolved == root or resolved.startswith(root + sep) for root in roots)

    def is_path(value):
        return _isinstance(value, (_str, _bytes, path_like))

    def as_text(value):
        value = fspath(value)
        return value.decode("utf-8", "replace") if _isinstance(value, _bytes) else value

    def deny(what):
        raise _error(f"SandboxViolation: {what} is not allowed in the sandbox")

    # No re-entrancy flag on purpose: nothing below raises audit events itself, and a
    # shared flag would let a second thread slip events through while the first is here.
    def hook(event, args):
        if event in blocked:
            deny(event)
        if event in network and not allow_network:
            deny(f"network access ({event})")
        if event == "import" and args[0] == "_posixsubprocess":  # its fork_exec is not audited
            deny("process creation (_posixsubprocess)")
        if event == "os.kill" and args[0] not in (0, own_pid):
            deny("signalling another process")
        if event == "open" and is_path(args[0]):
            path = as_text(args[0])
            mode = args[1] or ""
            flags = args[2] if _isinstance(args[2], _int) else 0
            writing = _any(c in mode for c in "wax+") or _bool(flags & write_flags)
            if writing and not inside(path, (workdir,)):
                deny(f"writing {path!r} outside the working directory")
            if not writing and realpath(path) not in readable and not inside(path, read_roots):
                deny(f"reading {path!r}")
        if event in path_events:
            for value in args:
                if is_path(value) and not inside(as_text(value), (workdir,)):
                    deny(f"{event} on {as_text(value)!r} outside the working directory")

    return hook


def excepthook(exc_type, exc, tb):
    """Print tracebacks through ``linecache`` (3.11's default hook reads the deleted file)
    and without this prelude's own frames, which only confuse a reader."""
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    traceback.print_exception(exc_type, exc, tb)


def main():
    config = json.loads(sys.argv[1])
    # Under bubblewrap the real interpreter runs (not the virtual environment's link to
    # it), so the environment's read-only site-packages are added here.
    for entry in config.get("sys_path") or ():
        if entry not in sys.path:
            sys.path.append(entry)
    sys.argv = [config["code_file"]]
    with open(config["code_file"], encoding="utf-8") as file:
        source = file.read()
    code = compile(source, config["code_file"], "exec")
    # Keep the source for tracebacks but take the file away: a test harness embeds its
    # pass marker in this source, and the code under test should not read it from disk.
    linecache.cache[config["code_file"]] = (len(source), None, source.splitlines(True), config["code_file"])
    os.remove(config["code_file"])
    sys.excepthook = excepthook
    if config["audit"]:
        sys.modules.pop("_posixsubprocess", None)  # force a fresh, audited import
        sys.addaudithook(make_hook(config["workdir"], config["read_roots"], config["allow_network"]))
    exec(code, {"__name__": "__main__", "__file__": config["code_file"], "__builtins__": __builtins__})


if __name__ == "__main__":
    main()
