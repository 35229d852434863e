"""Start and stop a private JupyterLab server for the browser tests.

The server binds 127.0.0.1 on a free port, requires a random token, and keeps every
file it writes (settings, workspaces, runtime files, the notebooks it serves) in one
temporary folder that is removed when it stops. The notebooks are served from a copy,
so running them never touches the checkout.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LabServer:
    url: str          # http://127.0.0.1:PORT
    token: str
    root: Path        # the folder it serves (a copy of notebooks/)
    temp: Path        # the kernels' temporary folder (TMPDIR)
    log: Path         # the server's stdout + stderr

    def lab_url(self, path: str = "") -> str:
        # `reset`: start from an empty workspace, not with the tabs of the last page
        return f"{self.url}/lab/tree/{path}?reset&token={self.token}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _settings(folder: Path) -> None:
    """JupyterLab user settings for an unattended run: no autosave (the copy stays as
    served), no news or update pop-ups, no kernel dialog on open."""
    settings = {
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"autoStartDefaultKernel": True},
    }
    for name, values in settings.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _wait_ready(url: str, token: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with status {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"JupyterLab did not answer on {url} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _die_with_parent() -> None:
    """In the server's process, before exec: on Linux, get SIGTERM when the test process
    dies, even by SIGKILL, so that no server outlives an interrupted run."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group (server and kernels), SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


@contextmanager
def running_lab(notebooks: list[Path], env: Mapping[str, str] | None = None,
                startup_timeout: float = 90.0) -> Iterator[LabServer]:
    """Serve copies of `notebooks` from a fresh JupyterLab on 127.0.0.1; stop and clean up on exit.

    `env` is added to the server's environment, which its kernels inherit (e.g.
    COURSE_FAST). The kernels import `course_lib` from this checkout (PYTHONPATH).
    """
    home = Path(tempfile.mkdtemp(prefix="course-lab-"))
    process = None
    try:
        root = home / "notebooks"
        root.mkdir()
        for notebook in notebooks:
            shutil.copy(notebook, root / notebook.name)
        settings = home / "settings"
        _settings(settings)
        temp = home / "tmp"
        temp.mkdir()
        port, token = free_port(), secrets.token_hex(24)
        server_env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
            "IPYTHONDIR": str(home / "ipython"),
            "MPLCONFIGDIR": str(home / "matplotlib"),
            "TMPDIR": str(temp),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        server_env.pop("MPLBACKEND", None)  # the kernel's inline backend, as for a learner
        log = home / "server.log"
        command = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--ServerApp.terminals_enabled=False",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
            command.append("--allow-root")
        with open(log, "wb") as log_file:
            process = subprocess.Popen(command, cwd=root, env=server_env, stdout=log_file,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                       preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, token, process, log, startup_timeout)
        yield LabServer(url=url, token=token, root=root, temp=temp, log=log)
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(home, ignore_errors=True)
