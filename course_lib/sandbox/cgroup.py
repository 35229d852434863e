"""A memory cap on a whole sandboxed run: one control-group leaf per run, where one can be made.

``RLIMIT_AS`` caps one process's address space, but a run can hold memory that no address
space counts (files in its tmpfs folders) and it can start several processes, each with
its own ``RLIMIT_AS``. A control group (cgroup) counts every page charged to its
processes, tmpfs pages included, and the kernel's OOM killer stops the group at its cap.

``MemoryCgroup.create(limit_bytes)`` makes a leaf next to (under) this process's own
cgroup, trying cgroup v2 (``memory.max``, swap off with ``memory.swap.max``) and then the
v1 memory controller (``memory.limit_in_bytes``). The supervised child enters it before it
executes bubblewrap (``enter_path`` is written from the forked child, so nothing it runs
escapes the count), and ``close()`` kills what is left and removes the leaf.

Where no leaf can be made (no permission, v2 without the memory controller delegated to
this subtree, a read-only ``/sys/fs/cgroup``), ``create`` returns None: the run still has
``RLIMIT_AS`` per process, a process limit, size-capped tmpfs folders and no
``memfd_create`` (seccomp), which bound it at roughly processes x ``memory_mb``;
``sandbox_guards()["memory_cgroup"]`` says which case holds.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

__all__ = ["MemoryCgroup"]


def _own_cgroup_paths() -> dict[str, str]:
    """``{"v2": path}`` and/or ``{"memory": path}`` from ``/proc/self/cgroup``."""
    found = {}
    try:
        with open("/proc/self/cgroup") as file:
            for line in file:
                hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
                if hierarchy == "0" and controllers == "":
                    found["v2"] = path
                elif "memory" in controllers.split(","):
                    found["memory"] = path
    except OSError:
        pass
    return found


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file-system type, options) of every cgroup mount."""
    found = []
    try:
        with open("/proc/self/mounts") as file:
            for line in file:
                _, point, kind, options = line.split()[:4]
                if kind in ("cgroup", "cgroup2"):
                    found.append((point, kind, set(options.split(","))))
    except OSError:
        pass
    return found


def _write(path: str, value: str) -> None:
    with open(path, "w") as file:
        file.write(value)


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return ""


class MemoryCgroup:
    """One cgroup leaf holding one run, capped at ``limit_bytes``; see the module docstring."""

    def __init__(self, path: str, version: int):
        self.path, self.version = path, version
        self.enter_path = os.path.join(path, "cgroup.procs")

    @classmethod
    def create(cls, limit_bytes: int) -> "MemoryCgroup | None":
        own = _own_cgroup_paths()
        name = f"course-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for point, kind, options in _mounts():
            if kind == "cgroup2" and "v2" in own:
                parent = os.path.join(point, own["v2"].lstrip("/"))
                if "memory" not in _read(os.path.join(parent, "cgroup.subtree_control")).split():
                    continue  # the memory controller is not delegated to this subtree
                made = cls._make(os.path.join(parent, name), 2,
                                 {"memory.max": str(limit_bytes), "memory.swap.max": "0"})
            elif kind == "cgroup" and "memory" in options and "memory" in own:
                parent = os.path.join(point, own["memory"].lstrip("/"))
                if not os.path.isdir(parent):  # a container's mount shows its own cgroup as the root
                    parent = point
                made = cls._make(os.path.join(parent, name), 1,
                                 {"memory.limit_in_bytes": str(limit_bytes),
                                  "memory.memsw.limit_in_bytes": str(limit_bytes)})
            else:
                continue
            if made is not None:
                return made
        return None

    @classmethod
    def _make(cls, path: str, version: int, settings: dict[str, str]) -> "MemoryCgroup | None":
        try:
            os.mkdir(path, 0o755)
        except OSError:
            return None
        group = cls(path, version)
        for key, value in settings.items():
            swap = key.endswith(("swap.max", "memsw.limit_in_bytes"))
            try:
                _write(os.path.join(path, key), value)
            except OSError:
                if swap:
                    continue  # no swap accounting on this kernel: the memory limit alone
                group.close()
                return None
        return group

    def out_of_memory(self) -> bool:
        """Whether the kernel's OOM killer acted inside this group."""
        if self.version == 2:
            text = _read(os.path.join(self.path, "memory.events"))
        else:
            text = _read(os.path.join(self.path, "memory.oom_control"))
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return self.version == 1 and _read(os.path.join(self.path, "memory.failcnt")).strip() not in ("", "0")

    def peak_bytes(self) -> int | None:
        """The most memory the group held at once (None where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = _read(os.path.join(self.path, name)).strip()
        return int(text) if text.isdigit() else None

    def close(self) -> None:
        """Kill whatever is left in the group, then remove it."""
        for _ in range(50):
            pids = [int(p) for p in _read(self.enter_path).split() if p.isdigit()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)
