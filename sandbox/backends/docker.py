"""Docker backend: a warm pool of locked-down containers; one `docker exec` of the in-image
runner per batch, so a submission's tests run back to back inside one container.

Container flags (docs/sandbox.md): no network, memory+swap capped, pids limit, read-only
root, an exec-able tmpfs /work, cap-drop ALL, no-new-privileges, non-root users, --init.
The container's keep-alive runs as uid `idle_uid`; submissions run as a per-container uid, so
they can neither kill it nor see another container's processes in the host's NPROC count.
Docker does not remap uids, so RLIMIT_NPROC counts a uid across all containers on the host: the
submission uids are leased host-wide (uids.py), never shared with another process's pool.
Containers are killed through the API, remove themselves when their keep-alive exits (it exits
when the host stops touching /job/alive), and stale ones are collected at start-up. A pool whose
process ends without `close()` (Ray ends its workers without atexit; a SIGKILL) is cleaned up by
its reaper, a detached process that waits for the end of the pool's pipe and then removes the
pool's containers and temp root.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from .. import runner
from ..image import IMAGE, RUNNER_DIR, build_image
from ..options import option
from ..runner import encode_batch
from ..verdict import RunResult, RunStatus
from .base import WORK, Accept, Backend, RunnerReport, RunSpec, Session, rejected, write_file_nofollow
from .uids import UidLease, default_lock_dir

log = logging.getLogger(__name__)
LABEL = "xrpo.sandbox"
_HOST = socket.gethostname()
# Exits (and so removes the container) once /job/alive is 120 s stale: the host died.
_KEEPALIVE = "while sleep 5; do [ $(( $(date +%s) - $(stat -c %Y /job/alive) )) -lt 120 ] || exit 0; done"
# The reaper (argv: label, pool id, temp root). It forks so that it is no child of the pool's
# process (Ray ends a worker's children with it), then blocks on stdin, the read end of a pipe
# whose only write end the pool holds: the read returns when the pool closes it or its process
# ends, however it ends. Self-contained, so it needs nothing of this package on sys.path.
_REAPER = """
import os, shutil, sys
label, pool, root = sys.argv[1:4]
if os.fork():
    os._exit(0)
sys.stdin.buffer.read()
try:
    import docker
    client = docker.from_env(timeout=60)
    for c in client.containers.list(all=True, sparse=True, filters={"label": [label + ".pool=" + pool]}):
        try:
            c.remove(force=True)
        except Exception:
            pass
finally:
    shutil.rmtree(root, ignore_errors=True)
"""


@dataclass
class DockerConfig:
    """The Docker backend: its pool of containers, their limits and uids."""

    workers: int = option(
        help="Warm containers kept in the pool (concurrent sessions). Default: the host's CPU count.",
        factory=lambda: max(1, os.cpu_count() or 1),
    )
    memory_mb: int = option(4096, "Container memory cap (memory and swap), covering the compiler and any one test.")
    pids_limit: int = option(128, "Processes and threads per container (pids cgroup).")
    cpus: float = option(1.0, "CPU quota per container, in cores.")
    work_mb: int = option(512, "Size of the tmpfs /work.")
    uid_base: int = option(61000, "Containers run submissions as uids leased from [uid_base, uid_base + uid_span).")
    uid_span: int = option(
        1000, "How many uids to scan for free ones; all processes on a host share the range (one lock file per uid)."
    )
    lock_dir: str | None = option(
        None, "Dir of the per-uid lock files (None: /run/xrpo-sandbox as root, else under ~/.cache/xrpo-sandbox)."
    )
    fork_python: bool = option(
        True, "Run Python tests in children forked from the batch runner (runner.run_python), not in new interpreters."
    )
    idle_uid: int = option(65534, "uid of the keep-alive process (nobody).")
    image: str = option(IMAGE, "Image; built with `python -m sandbox build-image` when it is the default and missing.")
    reuse: bool = option(
        True,
        "Reuse a container for later submissions after a reset (runner._reset). False: a new container per "
        "submission, which also hides the counters a reset cannot rewind (pid numbers, SysV IPC ids, inode "
        "numbers), at the cost of starting a container each time.",
    )
    work_root: str | None = option(
        None,
        "Where the pool's temp root (the containers' /job dirs) is created on the host (None: the system temp dir).",
    )

    def __post_init__(self) -> None:
        if self.workers < 1 or self.memory_mb < 256 or self.pids_limit < 8 or self.uid_span < self.workers:
            raise ValueError(
                f"bad DockerConfig: workers={self.workers} (>=1), memory_mb={self.memory_mb} (>=256), "
                f"pids_limit={self.pids_limit} (>=8), uid_span={self.uid_span} (>=workers)"
            )


def docker_available() -> str | None:
    """None when a Docker daemon answers, else why not."""
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception as e:  # any failure to reach the daemon means "not available"
        return f"no Docker daemon answers: {e}"
    return None


class _Worker:
    """One pooled container, its host-side /job dir, and its submission uid."""

    def __init__(self, container, job: str, uid: int) -> None:
        self.container, self.job, self.uid = container, job, uid
        self.fresh = True  # needs a reset before the next session
        self.broken = False


class DockerBackend(Backend):
    name = "docker"

    def __init__(self, config: DockerConfig | None = None) -> None:
        import docker

        self.config = config or DockerConfig()
        self.client = docker.from_env(timeout=120, max_pool_size=max(10, 2 * self.config.workers))
        if self.config.image == IMAGE:
            build_image(self.client)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        cfg = self.config
        self._lease = UidLease(
            cfg.workers,
            cfg.uid_base,
            cfg.uid_span,
            cfg.lock_dir or default_lock_dir(os.path.expanduser("~/.cache/xrpo-sandbox")),
        )
        self._free_uids = queue.Queue()
        for uid in self._lease.uids:
            self._free_uids.put(uid)
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._root = tempfile.mkdtemp(prefix="xrpo-docker-", dir=cfg.work_root)
        os.chmod(self._root, 0o711)
        self._pool_id = os.path.basename(self._root)  # unique on this host while the root exists
        self._reaper_fd = _start_reaper(self._pool_id, self._root)
        collect_stale(self.client)
        threading.Thread(target=self._heartbeat, daemon=True, name="xrpo-docker-heartbeat").start()
        atexit.register(self.close)

    # ---- pool ----
    def _spawn(self, uid: int) -> _Worker:
        cfg = self.config
        job = tempfile.mkdtemp(prefix=f"w{uid}-", dir=self._root)
        os.chown(job, uid, uid)
        os.chmod(job, 0o711)  # the keep-alive (another uid) may only stat alive
        _touch(os.path.join(job, "alive"))
        container = self.client.containers.run(
            cfg.image,
            ["sh", "-c", _KEEPALIVE],
            detach=True,
            auto_remove=True,
            init=True,
            network_mode="none",
            mem_limit=f"{cfg.memory_mb}m",
            memswap_limit=f"{cfg.memory_mb}m",
            pids_limit=cfg.pids_limit,
            nano_cpus=int(cfg.cpus * 1e9),
            read_only=True,
            tmpfs={
                WORK: f"rw,exec,nosuid,nodev,size={cfg.work_mb}m,uid={uid},gid={uid},mode=0700",
                "/tmp": "rw,nosuid,nodev,size=64m,mode=1777",
            },
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            user=f"{cfg.idle_uid}:{cfg.idle_uid}",
            volumes={job: {"bind": "/job", "mode": "ro"}},
            working_dir=WORK,
            environment={},
            labels={
                LABEL: "1",
                f"{LABEL}.host": _HOST,
                f"{LABEL}.pid": str(os.getpid()),
                f"{LABEL}.pool": self._pool_id,
                f"{LABEL}.uid": str(uid),  # leased host-wide: names the container's owner by its uid range
            },
        )
        return _Worker(container, job, uid)

    def _acquire(self) -> _Worker:
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            try:
                uid = self._free_uids.get(timeout=0.05)
            except queue.Empty:
                with contextlib.suppress(queue.Empty):
                    return self._idle.get(timeout=0.5)
                continue
            try:
                w = self._spawn(uid)
            except BaseException:
                self._free_uids.put(uid)
                raise
            with self._lock:
                self._all.add(w)
            return w

    def _discard(self, w: _Worker) -> None:
        with contextlib.suppress(Exception):
            w.container.kill()
        with contextlib.suppress(Exception):
            w.container.remove(force=True)
        # the kill starts auto_remove in the daemon, so the remove above may return (409) while
        # the container still exists: wait until it is gone, so that close() leaves nothing behind
        with contextlib.suppress(Exception):
            w.container.wait(condition="removed", timeout=30)
        shutil.rmtree(w.job, ignore_errors=True)
        with self._lock:
            self._all.discard(w)
        self._free_uids.put(w.uid)

    @contextlib.contextmanager
    def session(self):
        s = DockerSession(self, self._acquire())
        ok = False
        try:
            yield s
            ok = not s.w.broken
        finally:  # an exception or interrupt mid-run leaves the container in an unknown state
            w = s.w  # the session may have replaced a dead container
            if ok and self.config.reuse and not self._closed.is_set():
                w.fresh = True
                self._idle.put(w)
            else:
                self._discard(w)

    def _heartbeat(self) -> None:
        while not self._closed.wait(20):
            with self._lock:
                workers = list(self._all)
            for w in workers:
                with contextlib.suppress(OSError):
                    _touch(os.path.join(w.job, "alive"))

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            workers = list(self._all)
        for w in workers:
            self._discard(w)
        shutil.rmtree(self._root, ignore_errors=True)
        self._lease.release()
        with contextlib.suppress(OSError):
            os.close(self._reaper_fd)  # the reaper wakes, finds nothing left, and exits

    @property
    def uids(self) -> list[int]:
        """The submission uids of this pool (leased host-wide until close)."""
        return self._lease.uids


class DockerSession(Session):
    def __init__(self, backend: DockerBackend, worker: _Worker) -> None:
        self.backend, self.w = backend, worker
        self._batches = 0

    def run(self, spec: RunSpec) -> RunResult:
        return self.run_many([spec], stop_on_failure=True)[0]

    def run_many(self, specs: list[RunSpec], stop_on_failure: bool, accept: Accept | None = None) -> list[RunResult]:
        """Self-healing: when the container fails under the session's first batch (killed, OOM,
        a daemon hiccup), nothing of the session lived anywhere else, so the batch runs again
        once on a fresh container; an SE comes back only when that one fails too. The runner's exec
        streams its results without waiting for the host, so a batch runs on past a run that
        `accept` rejects; the results end there all the same."""
        results = self._run_batch(specs, stop_on_failure)
        if self._batches == 1 and self.w.broken and results and results[-1].status is RunStatus.ERROR:
            log.warning("sandbox container failed (%s); retrying on a fresh one", results[-1].message[:200])
            self.backend._discard(self.w)
            self.w = self.backend._acquire()
            self._batches = 0
            results = self._run_batch(specs, stop_on_failure)
        for i, result in enumerate(results):
            if rejected(accept, i, result, stop_on_failure):
                return results[: i + 1]
        return results

    def _run_batch(self, specs: list[RunSpec], stop_on_failure: bool) -> list[RunResult]:
        if self.w.broken:
            return [RunResult(RunStatus.ERROR, message="container is gone")]
        batch_dir = os.path.join(self.w.job, f"b{self._batches}")
        self._batches += 1
        os.mkdir(batch_dir)
        os.chmod(batch_dir, 0o755)
        steps = []
        for i, spec in enumerate(specs):
            files = {}
            for j, (name, data) in enumerate(spec.files.items()):
                write_file_nofollow(batch_dir, f"f{i}_{j}", data)
                files[name] = f"f{i}_{j}"
            if spec.stdin:
                write_file_nofollow(batch_dir, f"in{i}", spec.stdin)
            steps.append(
                {
                    "argv": spec.argv,
                    "limits": spec.limits.to_dict(),
                    "files": files,
                    "stdin": f"in{i}" if spec.stdin else None,
                    "required": spec.required,
                    "fetch": list(spec.fetch),
                }
            )
        batch = {
            "steps": steps,
            "stop_on_failure": stop_on_failure,
            "reset": self.w.fresh,
            "fork_python": self.backend.config.fork_python,
        }
        write_file_nofollow(batch_dir, "batch", encode_batch(batch))
        self.w.fresh = False
        try:
            return self._exec(specs, f"/job/b{self._batches - 1}/batch")
        finally:
            shutil.rmtree(batch_dir, ignore_errors=True)

    def _exec(self, specs: list[RunSpec], batch_path: str) -> list[RunResult]:
        api, cid = self.backend.client.api, self.w.container.id
        budget = sum(s.limits.wall_s for s in specs) + 30  # the runner enforces each wall clock itself
        killed = threading.Event()

        def watchdog() -> None:  # the runner itself was stopped or hung: kill from outside
            killed.set()
            self.w.broken = True
            with contextlib.suppress(Exception):
                self.w.container.kill()

        timer = threading.Timer(budget, watchdog)
        timer.start()
        report, pending, err = RunnerReport(), [], b""
        try:
            ex = api.exec_create(
                cid,
                runner.runner_command("python3", RUNNER_DIR, batch_path),
                user=f"{self.w.uid}:{self.w.uid}",
                workdir=WORK,
            )
            for out, e in api.exec_start(ex["Id"], stream=True, demux=True):
                err = (err + e)[-8192:] if e else err
                if not out:
                    continue
                pending.append(out)
                if b"\n" not in out:  # join only at line ends: results can be megabytes long
                    continue
                *lines, tail = b"".join(pending).split(b"\n")
                pending = [tail]
                for line in lines:
                    report.feed(line)
            code = api.exec_inspect(ex["Id"])["ExitCode"]
        except Exception as e:  # the daemon or container failed under us
            self.w.broken = True
            return report.results + [RunResult(RunStatus.ERROR, message=f"docker exec failed: {type(e).__name__}: {e}")]
        finally:
            timer.cancel()
        if report.interrupted:
            self.w.broken = True
            if not killed.is_set() and self._container_died():
                # killed from outside (OOM, `docker kill`, a daemon restart): not the submission's doing
                return report.results + [RunResult(RunStatus.ERROR, message="the container died under the batch")]
        elif code != 0 and not report.results:
            self.w.broken = True
            return [RunResult(RunStatus.ERROR, message=f"runner exited {code}: {err[-500:].decode(errors='replace')}")]
        return report.finish(killed.is_set(), err)

    def _container_died(self, grace_s: float = 2.0) -> bool:
        """Whether the container itself stopped, as opposed to only the runner inside it (a submission
        may kill its own runner: same uid). The exec stream can end before the daemon marks the
        container exited, so look for up to `grace_s`."""
        deadline = time.monotonic() + grace_s
        while True:
            try:
                self.w.container.reload()
            except Exception:  # NotFound: it removed itself (auto_remove); or the daemon failed
                return True
            if self.w.container.status != "running":
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def _start_reaper(pool_id: str, root: str) -> int:
    """Start the pool's reaper (see _REAPER); returns the pipe's write end, which the pool keeps
    open until `close()`; like every fd of os.pipe it is not inherited across exec."""
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-c", _REAPER, LABEL, pool_id, root],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # no signal to this process group reaches it
        )
        child.wait()  # the first process exits at once; its forked child is the reaper
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return write_end


def collect_stale(client) -> int:
    """Remove this host's sandbox containers whose owning process is gone; returns how many."""
    n = 0
    # sparse: no per-container inspect, which fails with NotFound when a container removes itself meanwhile
    for c in client.containers.list(all=True, sparse=True, filters={"label": [LABEL, f"{LABEL}.host={_HOST}"]}):
        pid = int((c.attrs.get("Labels") or {}).get(f"{LABEL}.pid", "0"))
        if pid != os.getpid() and not _alive(pid):
            with contextlib.suppress(Exception):
                c.remove(force=True)
                n += 1
    return n


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


def _touch(path: str) -> None:
    with open(path, "a"):
        pass
    os.utime(path)
    os.chmod(path, 0o644)
