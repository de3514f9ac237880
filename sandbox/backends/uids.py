"""Host-wide unique sandbox uids, each claimed by a non-blocking flock on its own lock file.

RLIMIT_NPROC counts processes per uid across the whole host (Docker does not remap uids either),
and the bwrap slot cgroups are named by uid, so two processes judging on one host (verl's reward
workers, two pytest runs) must never run submissions as the same uid. The kernel drops a flock
when the last fd of its open file dies, so a crashed process frees its uids by itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from ..verdict import SandboxError

RUN_LOCK_DIR = "/run/xrpo-sandbox"


def default_lock_dir(cache_dir: str) -> str:
    """/run/xrpo-sandbox as root (cleared at boot), else a dir under the user's cache."""
    return RUN_LOCK_DIR if os.geteuid() == 0 else os.path.join(cache_dir, "uid-locks")


def lock_path(lock_dir: str, uid: int) -> str:
    return os.path.join(lock_dir, f"uid-{uid}.lock")


class UidLease:
    """`count` uids from [base, base + span) that no other lease on this host holds.

    Held until `release()` or the death of the process (the lock fds are close-on-exec, so
    sandboxed children never inherit them).
    """

    def __init__(self, count: int, base: int, span: int, lock_dir: str) -> None:
        if count < 1 or span < count:
            raise ValueError(f"cannot lease {count} uids from a span of {span}; need 1 <= count <= span")
        os.makedirs(lock_dir, mode=0o755, exist_ok=True)
        self._fds: dict[int, int] = {}
        for uid in range(base, base + span):
            if len(self._fds) == count:
                break
            fd = _try_lock(lock_path(lock_dir, uid))
            if fd is not None:
                self._fds[uid] = fd
        if len(self._fds) < count:
            free = len(self._fds)
            self.release()
            raise SandboxError(
                f"only {free} of {count} sandbox uids are free in [{base}, {base + span}) (locks in {lock_dir}); "
                "other sandbox processes hold the rest: raise uid_span or lower workers"
            )

    @property
    def uids(self) -> list[int]:
        return sorted(self._fds)

    def release(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the only fd of the open file drops the flock
        self._fds.clear()


def _try_lock(path: str) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
