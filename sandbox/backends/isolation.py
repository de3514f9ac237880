"""Host-side isolation of the bwrap slots: a memory cgroup per slot, and reaping a slot uid's
processes. Each slot runs as its own leased uid (uids.py), so a uid's processes are exactly what
its sandboxes left running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

from ..verdict import SandboxError

log = logging.getLogger(__name__)
CGROUP_ROOT = "/sys/fs/cgroup"
_warned = False


class MemoryCgroup:
    """A memory cgroup per slot (v2, or v1's memory hierarchy), for the peak memory of a run.

    wait4()'s ru_maxrss is no use here: a forked child inherits the parent's high-water mark,
    so every run would report at least the judging process's own size. Without a usable memory
    cgroup (none writable, or v2 without the memory controller delegated to us) runs report 0
    and one warning is logged.
    """

    def __init__(self, uid: int) -> None:
        own = own_memory_cgroup()
        self.version = 0 if own is None else own[1]
        self.path = None if own is None else os.path.join(own[0], "xrpo-sandbox", f"slot-{uid}")
        self._join_fd = self._peak_fd = -1
        if self.path is not None:
            try:
                _makedirs_racing_rmdir(self.path)
                if self.version == 2:
                    _enable_memory_controller(os.path.dirname(self.path))
                    self._peak_fd = os.open(os.path.join(self.path, "memory.peak"), os.O_RDWR | os.O_CLOEXEC)
                # Opened once by root; the child writes "0" (itself) to it before exec. v1's `tasks`
                # moves one thread and so skips the global threadgroup lock a cgroup.procs write takes.
                procs = "tasks" if self.version == 1 else "cgroup.procs"
                self._join_fd = os.open(os.path.join(self.path, procs), os.O_WRONLY | os.O_CLOEXEC)
            except OSError as e:
                self.remove()
                _warn_once(f"no per-test memory figures: cgroup {self.path} is unusable ({e})")
        else:
            _warn_once("no per-test memory figures: no writable cgroup-v2 or cgroup-v1 memory group")

    def reset_peak(self) -> bool:
        """Zero the high-water mark before a run; False when the group is unusable."""
        if self.path is None:
            return False
        try:
            if self.version == 2:
                os.write(self._peak_fd, b"reset\n")  # resets what reads of this fd report
            else:
                _write_text(os.path.join(self.path, "memory.max_usage_in_bytes"), "0")
        except OSError:
            return False
        return True

    @property
    def procs_file(self) -> str | None:
        """The file that moves a process into the group when it writes "0" to it (None: unusable)."""
        if self.path is None or self._join_fd < 0:
            return None
        return os.path.join(self.path, "tasks" if self.version == 1 else "cgroup.procs")

    def join_in_child(self) -> None:
        """Move the calling process into the group: run in the child before bwrap forks anything
        (a move from outside would race with its first clone). Only a syscall: it runs after fork."""
        os.write(self._join_fd, b"0")

    def peak_mb(self) -> float | None:
        """The high-water mark since the last reset_peak."""
        if self.version == 2 and self._peak_fd >= 0:
            try:
                return int(os.pread(self._peak_fd, 64, 0)) / 2**20
            except (OSError, ValueError):
                return None
        return self._read_mb("memory.max_usage_in_bytes")

    def usage_mb(self) -> float | None:
        return self._read_mb("memory.current" if self.version == 2 else "memory.usage_in_bytes")

    def _read_mb(self, name: str) -> float | None:
        if self.path is None:
            return None
        try:
            with open(os.path.join(self.path, name)) as f:
                return int(f.read()) / 2**20
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        """Delete the slot's group (its processes are reaped), and the shared parent once empty."""
        for fd in (self._join_fd, self._peak_fd):
            if fd >= 0:
                os.close(fd)
        self._join_fd = self._peak_fd = -1
        if self.path is None:
            return
        for _ in range(100):  # a reaped process may linger in the group for a moment
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)
        with contextlib.suppress(OSError):  # other processes' slots may still live there
            os.rmdir(os.path.dirname(self.path))
        self.path = None


def own_memory_cgroup(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT) -> tuple[str, int] | None:
    """(path, version) of the memory cgroup this process may create groups under, or None:
    cgroup v1's memory hierarchy when mounted, else v2's unified one when it has the memory
    controller."""
    try:
        with open(proc_cgroup) as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            base = os.path.join(root, "memory") + path
            return (base, 1) if os.access(base, os.W_OK) else None
    for hierarchy, _, path in lines:
        if hierarchy == "0":
            base = root + path
            try:
                with open(os.path.join(base, "cgroup.controllers")) as f:
                    usable = "memory" in f.read().split()
            except OSError:
                return None
            return (base, 2) if usable and os.access(base, os.W_OK) else None
    return None


def _enable_memory_controller(parent: str) -> None:
    """v2: children of `parent` get the memory controller (fails when parent holds processes)."""
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        if "memory" in f.read().split():
            return
    _write_text(os.path.join(parent, "cgroup.subtree_control"), "+memory")


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(message)


def _makedirs_racing_rmdir(path: str) -> None:
    """makedirs, retried when another process removes the shared parent group in between."""
    for attempt in range(5):
        try:
            os.makedirs(path, exist_ok=True)
            return
        except FileNotFoundError:
            if attempt == 4:
                raise


def reap(uid: int, timeout_s: float = 5.0) -> None:
    """SIGKILL every process of a slot and wait until they are gone: a killed namespace dies
    asynchronously, and survivors would count against the next run's RLIMIT_NPROC."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise SandboxError(f"processes {pids[:5]} of sandbox uid {uid} survived SIGKILL for {timeout_s} s")
        time.sleep(0.005)


def pids_of_uid(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{name}").st_uid == uid:
                    pids.append(int(name))
    return pids


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
