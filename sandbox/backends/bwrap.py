"""bubblewrap backend: a private uid per worker slot; one bwrap per compilation, one per batch.

A compilation: Popen(user=uid, preexec_fn: join the slot cgroup, set the rlimits) -> bwrap (all
namespaces unshared, read-only root, fresh tmpfs /tmp, the session's work dir bound writable at
/work) -> compiler, as pid 1 so wait4() sees its CPU time. No shell or prlimit between.
Everything else (a submission's tests, a checker's runs) runs in one bwrap through the batch
runner (runner.py and its bytecode, read-only at /xrpo), which is pid 1: the programs are its children, so signals
reach them as they do under Docker. /work is then a size-capped tmpfs that the runner fills from
the session's work dir (read-only at /src): programs may write there, and nothing they write
reaches the host's disk or outlives the batch. A batch pays bwrap's namespace setup once.
RLIMIT_NPROC counts per uid host-wide, so every slot's uid is leased host-wide (uids.py); host
isolation (slot cgroups, reaping) is in isolation.py.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import queue
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from .. import runner
from ..languages import PCH_DIR, PYTHON, pch_build_argv
from ..options import option
from ..verdict import Limits, RunResult, RunStatus, SandboxError
from .base import WORK, Accept, Backend, RunnerReport, RunSpec, Session, rejected, stops, write_file_nofollow
from .isolation import MemoryCgroup, reap
from .uids import UidLease, default_lock_dir

_ROOT_BINDS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/alternatives")
_PCH_LIMITS = Limits(cpu_s=60, wall_s=180, memory_mb=4096, max_processes=32, max_file_mb=1024)
_RUNNER_DIR = "/xrpo"  # the batch runner and its bytecode, read-only, inside the sandbox
_JOB_DIR = "/job"  # a batch's steps and stdin files, read-only, inside the sandbox
_SRC_DIR = "/src"  # the session's work dir, read-only, copied into /work by the runner
_BATCH_PROCS = 1  # the runner counts against the tests' RLIMIT_NPROC
_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}  # all a sandboxed program sees
# What a batch's bwrap is started through, so that the host never forks itself (see _spawn_prefix)
_SPAWN_TOOLS = {name: shutil.which(name, path="/usr/bin:/bin") for name in ("dash", "prlimit", "setpriv")}
_PRLIMIT_NAMES = {resource.RLIMIT_AS: "as", resource.RLIMIT_STACK: "stack", resource.RLIMIT_CPU: "cpu"}
_PRLIMIT_NAMES |= {resource.RLIMIT_NPROC: "nproc", resource.RLIMIT_FSIZE: "fsize", resource.RLIMIT_CORE: "core"}
_PRLIMIT_NAMES |= {resource.RLIMIT_NOFILE: "nofile"}
_CACHE_DIR = "/var/cache/xrpo-sandbox" if os.geteuid() == 0 else os.path.expanduser("~/.cache/xrpo-sandbox")


@dataclass
class BwrapConfig:
    """The bubblewrap backend: its slots, their uids, sizes and host dirs."""

    workers: int = option(
        help="Concurrent sessions (slots); each has its own uid. Default: the host's CPU count.",
        factory=lambda: max(1, os.cpu_count() or 1),
    )
    uid_base: int = option(
        60000, "Slots run as uids leased from [uid_base, uid_base + uid_span); keep the range free of real users."
    )
    uid_span: int = option(
        1000, "How many uids to scan for free ones; all processes on a host share the range (one lock file per uid)."
    )
    tmp_mb: int = option(64, "Size of the private tmpfs /tmp of every run, in MiB.")
    work_mb: int = option(512, "Size of the tmpfs /work of a batch (as Docker's /work), in MiB.")
    work_root: str | None = option(None, "Where session work dirs are created on the host (None: the system temp dir).")
    cache_dir: str = option(
        help="Host dir for the precompiled header (built on first C++ use); sandbox uids must be able to read it. "
        "Default: /var/cache/xrpo-sandbox as root, else ~/.cache/xrpo-sandbox.",
        factory=lambda: _CACHE_DIR,
    )
    lock_dir: str | None = option(
        None, "Dir of the per-uid lock files (None: /run/xrpo-sandbox as root, else under cache_dir)."
    )
    fork_python: bool = option(
        True, "Run Python tests in children forked from the batch runner (runner.run_python), not in new interpreters."
    )
    spawn: str = option(
        "auto",
        "How a batch's bwrap starts: fork (the judging process forks), exec (vfork, then dash, prlimit and "
        "setpriv exec'd in turn: no copy of a large judging process), auto (exec when this process holds more "
        "than 128 MiB).",
    )

    def __post_init__(self) -> None:
        if self.spawn not in ("auto", "fork", "exec"):
            raise ValueError(f"bad BwrapConfig: spawn={self.spawn!r} (auto, fork or exec)")
        if self.workers < 1 or self.uid_base < 1000 or self.uid_span < self.workers or self.tmp_mb < 1:
            raise ValueError(
                f"bad BwrapConfig: workers={self.workers} (>=1), uid_base={self.uid_base} (>=1000), "
                f"uid_span={self.uid_span} (>=workers), tmp_mb={self.tmp_mb} (>=1)"
            )


def bwrap_available() -> str | None:
    """None when bubblewrap can start a sandbox here, else the reason it cannot."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    try:
        r = subprocess.run(
            ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--", "true"], capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start: {e}"
    return None if r.returncode == 0 else f"bwrap cannot create namespaces: {r.stderr.decode(errors='replace').strip()}"


class BwrapBackend(Backend):
    name = "bwrap"

    def __init__(self, config: BwrapConfig | None = None) -> None:
        self.config = cfg = config or BwrapConfig()
        if cfg.spawn == "exec" and None in _SPAWN_TOOLS.values():
            raise RuntimeError(
                f"BwrapConfig(spawn='exec') needs dash, prlimit and setpriv in /usr/bin or /bin: {_SPAWN_TOOLS}"
            )
        self._lease = UidLease(cfg.workers, cfg.uid_base, cfg.uid_span, cfg.lock_dir or default_lock_dir(cfg.cache_dir))
        self._slots: queue.Queue[int] = queue.Queue()
        self._cgroups: dict[int, MemoryCgroup] = {}
        for uid in self._lease.uids:
            reap(uid)  # leftovers of a dead previous holder would count against RLIMIT_NPROC
            self._remove_stale_dirs(uid)
            self._cgroups[uid] = MemoryCgroup(uid)
            self._slots.put(uid)
        self._closed = False
        self._pch_lock = threading.Lock()
        self.pch_dir = os.path.join(cfg.cache_dir, f"pch-{_gcc_version()}")
        self.runner_dir = _runner_dir(cfg.cache_dir)
        atexit.register(self.close)

    @property
    def uids(self) -> list[int]:
        """The uids this backend's slots run as (leased host-wide until close)."""
        return sorted(self._cgroups)

    @contextlib.contextmanager
    def session(self):
        if self._closed:
            raise SandboxError("this bwrap backend is closed")
        uid = self._slots.get()
        work = tempfile.mkdtemp(prefix=f"xrpo-sbx-{uid}-", dir=self.config.work_root)
        try:
            os.chmod(work, 0o700)
            os.chown(work, uid, uid)
            yield BwrapSession(self, uid, work, self._cgroups[uid])
        finally:
            try:
                reap(uid)
            finally:
                shutil.rmtree(work, ignore_errors=True)
                self._slots.put(uid)

    def _remove_stale_dirs(self, uid: int) -> None:
        """Work and job dirs of this uid left by a holder that was killed (the lease is ours now)."""
        root = self.config.work_root or tempfile.gettempdir()
        for name in os.listdir(root):
            if name.startswith((f"xrpo-sbx-{uid}-", f"xrpo-job-{uid}-")):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    def close(self, timeout_s: float = 30.0) -> None:
        """Wait for running sessions (up to timeout_s), remove the slot cgroups, release the uids."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        for _ in self._cgroups:
            with contextlib.suppress(queue.Empty):
                self._slots.get(timeout=max(0.0, deadline - time.monotonic()))
        for uid, cgroup in self._cgroups.items():
            with contextlib.suppress(SandboxError):
                reap(uid)
            cgroup.remove()
        self._lease.release()
        atexit.unregister(self.close)

    def ensure_pch(self) -> None:
        """Build bits/stdc++.h.gch once (seconds of CPU); compiles use it through -I/pch."""
        gch = os.path.join(self.pch_dir, "bits", "stdc++.h.gch")
        with self._pch_lock:
            if os.path.exists(gch):
                return
            os.makedirs(os.path.dirname(self.pch_dir), mode=0o755, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix="pch-", dir=os.path.dirname(self.pch_dir))
            # The header is trusted system input, so the host compiler builds it directly.
            r = subprocess.run(pch_build_argv(os.path.join(tmp, "bits", "stdc++.h.gch")), capture_output=True)
            if r.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise RuntimeError(
                    f"building the precompiled header failed: {r.stderr.decode(errors='replace')[-500:]}"
                )
            os.chmod(tmp, 0o755)
            os.replace(tmp, self.pch_dir)


class BwrapSession(Session):
    def __init__(self, backend: BwrapBackend, uid: int, work: str, cgroup: MemoryCgroup) -> None:
        self.backend, self.uid, self.work, self.cgroup = backend, uid, work, cgroup

    def _argv(self, command: list[str], status_fd: int, job: str | None = None) -> list[str]:
        """bwrap around command, which is pid 1 of its namespace (bwrap's own init would outlive
        bwrap's exit, a zombie for the host's pid 1 to reap). Without a job dir: a compilation,
        the work dir bound writable; with one: the batch runner over a tmpfs /work."""
        cfg = self.backend.config
        argv = ["bwrap", "--size", str(cfg.tmp_mb << 20), "--tmpfs", "/tmp"]
        for d in _ROOT_BINDS:
            if os.path.exists(d):
                argv += ["--ro-bind", d, d]
        if job is None:
            argv += ["--bind", self.work, WORK]
        else:
            argv += ["--size", str(cfg.work_mb << 20), "--tmpfs", WORK, "--ro-bind", self.work, _SRC_DIR]
            argv += ["--ro-bind", self.backend.runner_dir, _RUNNER_DIR, "--ro-bind", job, _JOB_DIR]
        if os.path.isdir(self.backend.pch_dir):
            argv += ["--ro-bind", self.backend.pch_dir, PCH_DIR]
        argv += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--remount-ro",
            "/",
            "--chdir",
            WORK,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--as-pid-1",
            "--clearenv",
            *(a for k, v in _ENV.items() for a in ("--setenv", k, v)),
            # bwrap writes {"exit-code": n} here only when its setup finished and exec succeeded:
            # without it the failure is ours (SE). The program does not inherit this fd.
            "--json-status-fd",
            str(status_fd),
            "--",
        ]
        return argv + command

    def _preexec(self, limits: Limits):
        """What the child does between fork and exec of bwrap, as the slot uid: join the slot's
        memory cgroup, then set the rlimits, which bwrap and the program inherit."""
        join = self.cgroup.join_in_child if self.cgroup.reset_peak() else None
        rlims = list(runner.rlimits(limits.to_dict()).items())

        def preexec() -> None:
            if join is not None:
                join()
            runner.set_rlimits(rlims)

        return preexec

    def _spawn_prefix(self, limits: Limits) -> list[str] | None:
        """`_preexec`'s work as exec'd steps of the started process itself, for a batch's bwrap:
        with no preexec_fn and no user switch Popen uses vfork, where it would fork the judging
        process (a reward worker of hundreds of MiB: tens of ms of page tables and copy-on-write
        faults a submission). dash joins the slot cgroup (writing "0" moves the writer), prlimit
        sets the rlimits, setpriv drops to the slot uid (real, effective and saved; no groups),
        then bwrap is exec'd in the same process. Three execs cost more than forking a small
        process, so "auto" takes this path only for a large one. None: fork."""
        spawn = self.backend.config.spawn
        if spawn == "fork" or (spawn == "auto" and _resident_mb() <= _FORK_MAX_MB):
            return None
        if None in _SPAWN_TOOLS.values():
            return None
        prefix = []
        if self.cgroup.reset_peak() and (procs := self.cgroup.procs_file) is not None:
            prefix += [_SPAWN_TOOLS["dash"], "-c", 'echo 0 > "$0" && exec "$@"', procs]
        rlimits = runner.rlimits(limits.to_dict())
        prefix += [_SPAWN_TOOLS["prlimit"]]
        unlimited = resource.RLIM_INFINITY
        prefix += [f"--{_PRLIMIT_NAMES[r]}={'unlimited' if v == unlimited else v}" for r, v in rlimits.items()]
        prefix += ["--", _SPAWN_TOOLS["setpriv"], f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        return prefix

    def _write_files(self, spec: RunSpec) -> None:
        if f"-I{PCH_DIR}" in spec.argv:
            self.backend.ensure_pch()
        for name, data in spec.files.items():
            write_file_nofollow(self.work, name, data, 0o755)

    def run(self, spec: RunSpec) -> RunResult:
        if not spec.writable:
            return self._run_batch([spec], stop_on_failure=True)[0]
        self._write_files(spec)
        r_fd, w_fd = os.pipe()
        try:
            raw = runner.run_capped(
                self._argv(spec.argv, w_fd),
                spec.stdin,
                spec.limits.wall_s,
                spec.limits.max_output_bytes,
                user=self.uid,
                pass_fds=(w_fd,),
                preexec_fn=self._preexec(spec.limits),
            )
            peak = self.cgroup.peak_mb()
            if peak is not None:
                raw["memory_mb"] = peak
            if raw["status"] != "ok":
                reap(self.uid)
            os.close(w_fd)
            w_fd = -1
            status = _read_available(r_fd)
        except OSError as e:
            return RunResult(RunStatus.ERROR, message=f"bwrap could not start: {e}")
        finally:
            for fd in (r_fd, w_fd):
                if fd >= 0:
                    os.close(fd)
        return _result(raw, status)

    def run_many(self, specs: list[RunSpec], stop_on_failure: bool, accept: Accept | None = None) -> list[RunResult]:
        results: list[RunResult] = []
        if accept is not None:  # each run graded once: in the batch's report, then here
            graded: dict[int, bool] = {}
            accept = functools.partial(_graded_once, accept, graded)
        for group in _batchable_groups(specs):
            offset = len(results)
            if group[0].writable:
                done = [self.run(group[0])]
            else:
                done = self._run_batch(group, stop_on_failure, accept and (lambda i, r, o=offset: accept(o + i, r)))
            results += done
            end = stops(group[-1], done[-1], stop_on_failure) or rejected(
                accept, len(results) - 1, done[-1], stop_on_failure
            )
            if len(done) < len(group) or end:
                break
        return results

    def _run_batch(self, specs: list[RunSpec], stop_on_failure: bool, accept: Accept | None = None) -> list[RunResult]:
        """specs in one bwrap, through the batch runner; with stop_on_failure, the runner is told to
        stop after a run that `accept` rejects, before the next test starts."""
        for spec in specs:
            self._write_files(spec)
        job = tempfile.mkdtemp(prefix=f"xrpo-job-{self.uid}-", dir=self.backend.config.work_root)
        try:
            os.chmod(job, 0o755)  # readable by the slot uid, writable only by us
            steps = []
            for i, spec in enumerate(specs):
                if spec.stdin:
                    write_file_nofollow(job, f"in{i}", spec.stdin)
                lim = spec.limits.to_dict()
                lim["max_processes"] += _BATCH_PROCS
                stdin = f"in{i}" if spec.stdin else None
                steps.append(
                    {
                        "argv": spec.argv,
                        "limits": lim,
                        "stdin": stdin,
                        "required": spec.required,
                        "fetch": list(spec.fetch),
                    }
                )
            batch = {
                "steps": steps,
                "stop_on_failure": stop_on_failure,
                "sync": True,
                "env": _ENV,
                "seed": _SRC_DIR,
                "fork_python": self.backend.config.fork_python,
            }
            write_file_nofollow(job, "batch", runner.encode_batch(batch))
            return self._exec_batch(_outer_limits([s.limits for s in specs]), job, accept if stop_on_failure else None)
        finally:
            shutil.rmtree(job, ignore_errors=True)

    def _exec_batch(self, outer: Limits, job: str, accept: Accept | None = None) -> list[RunResult]:
        """Run the runner on job/batch, following its report; a watchdog kills it past the
        batch's wall clock (the runner enforces each test's own)."""
        command = runner.runner_command(PYTHON, _RUNNER_DIR, f"{_JOB_DIR}/batch")
        killed = threading.Event()
        r_fd, w_fd = os.pipe()
        with tempfile.TemporaryFile() as err:
            try:
                argv, prefix = self._argv(command, w_fd, job), self._spawn_prefix(outer)
                # the fork path (no prefix) switches user and joins the cgroup in the child itself
                switch = {}
                if prefix is None:
                    switch = {
                        "user": self.uid,
                        "group": self.uid,
                        "extra_groups": [],
                        "preexec_fn": self._preexec(outer),
                    }
                p = subprocess.Popen(
                    argv if prefix is None else prefix + argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    start_new_session=True,
                    pass_fds=(w_fd,),
                    **switch,
                )
            except OSError as e:
                os.close(r_fd)
                return [RunResult(RunStatus.ERROR, message=f"bwrap could not start: {e}")]
            finally:
                os.close(w_fd)
            timer = threading.Timer(outer.wall_s, lambda: (killed.set(), runner.kill_group(p.pid)))
            timer.start()
            report, ended = RunnerReport(), False
            try:
                ended = self._follow(p, report, accept)
            finally:
                timer.cancel()
                _stop(p, ended)
                status = _read_available(r_fd)
                os.close(r_fd)
            reap(self.uid)
            err.seek(0)
            runner_err = err.read()[-8192:]
        if not report.results and report.begun < 0 and not killed.is_set():
            who = "the runner" if b'"exit-code"' in status else "bwrap"
            detail = runner_err.decode(errors="replace").strip()[-300:]
            return [RunResult(RunStatus.ERROR, message=f"{who} failed before the first test: {detail}")]
        return report.finish(killed.is_set(), runner_err)

    def _follow(self, p: subprocess.Popen, report: RunnerReport, accept: Accept | None = None) -> bool:
        """Read the runner's report. Before each step the host resets the slot's peak memory (the
        runner waits for a line on stdin), so each test's peak is its own, above what the runner
        held. A result that `accept` rejects ends the batch there: the host closes the runner's
        stdin instead of starting the next step, and the runner exits. Returns whether the runner
        closed its output by itself (or was told to stop)."""
        base = None
        for line in p.stdout:
            try:
                begun = report.feed(line)
            except (ValueError, KeyError, TypeError):  # a line cut short when the runner was killed
                return False
            if not begun:
                if base is not None and (peak := self.cgroup.peak_mb()) is not None:
                    report.results[-1].memory_mb = max(0.0, peak - base)
                if accept is not None and not accept(len(report.results) - 1, report.results[-1]):
                    with contextlib.suppress(BrokenPipeError):
                        p.stdin.close()  # the runner's next readline sees the end: it returns
                    report.stop_after_last()
                    return True
                continue
            self.cgroup.reset_peak()
            base = self.cgroup.usage_mb()
            try:
                p.stdin.write(b"\n")
                p.stdin.flush()
            except BrokenPipeError:
                return False
        return True


def _graded_once(accept: Accept, graded: dict[int, bool], index: int, result: RunResult) -> bool:
    if index not in graded:
        graded[index] = accept(index, result)
    return graded[index]


def _stop(p: subprocess.Popen, ended: bool) -> None:
    """Let bwrap reap the runner and exit (a runner killed first would be a zombie of bwrap's)."""
    try:
        p.wait(timeout=5 if ended else 0)
    except subprocess.TimeoutExpired:
        runner.kill_group(p.pid)
        p.wait()
    for f in (p.stdin, p.stdout):
        with contextlib.suppress(BrokenPipeError):
            f.close()


def _batchable_groups(specs: list[RunSpec]) -> list[list[RunSpec]]:
    """Consecutive runs that can share one sandbox: none whose /work must persist (a compilation),
    no file written twice (the host writes a group's files before its first run)."""
    groups: list[list[RunSpec]] = []
    names: set[str] = set()
    for spec in specs:
        if spec.writable or not groups or groups[-1][0].writable or names & spec.files.keys():
            groups.append([spec])
            names = set(spec.files)
        else:
            groups[-1].append(spec)
            names |= spec.files.keys()
    return groups


_FORK_MAX_MB = 128  # above this, forking the judging process costs more than the exec chain


def _resident_mb() -> float:
    """This process's resident memory, which a fork copies the page tables of."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _runner_dir(cache_dir: str) -> str:
    """cache_dir/runner-<hash of runner.py>: the runner compiled by the sandbox's python3, built
    once per version of the runner and readable by the slot uids (runner.compile_runner)."""
    with open(runner.__file__, "rb") as f:
        digest = hashlib.sha256(f.read() + PYTHON.encode()).hexdigest()[:16]
    path = os.path.join(cache_dir, f"runner-{digest}")
    if os.path.isdir(path):
        return path
    os.makedirs(cache_dir, mode=0o755, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="runner-tmp-", dir=cache_dir)
    try:
        os.chmod(tmp, 0o755)
        runner.compile_runner(PYTHON, tmp)
        os.replace(tmp, path)
    except OSError:
        if not os.path.isdir(path):  # not another backend's build that won the race
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _outer_limits(limits: list[Limits]) -> Limits:
    """The rlimits of bwrap and the runner: at least each test's, which the runner lowers per
    test (a hard limit can be lowered, never raised). RLIMIT_CPU counts per process, and the
    runner itself uses little."""
    return Limits(
        cpu_s=sum(lim.cpu_s for lim in limits) + 10,
        wall_s=sum(lim.wall_s for lim in limits) + 30,
        memory_mb=max(256, *(lim.memory_mb for lim in limits)),
        max_processes=max(lim.max_processes for lim in limits) + _BATCH_PROCS,
        max_file_mb=max(lim.max_file_mb for lim in limits),
    )


def _read_available(fd: int) -> bytes:
    """What bwrap wrote to the status pipe; never blocks (a dying sandbox process may hold no end,
    but bwrap writes before it exits, so everything is there once wait4 returned)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def _result(raw: dict, status: bytes) -> RunResult:
    started = b'"exit-code"' in status
    err = raw["stderr"].decode(errors="replace").strip()
    if not started and raw["status"] not in ("timeout", "output_limit"):
        if err.startswith("bwrap: execvp"):  # the sandbox is up but the program could not start (as a shell's 127)
            return RunResult(
                RunStatus.EXITED, exit_code=127, stderr=raw["stderr"], wall_s=raw["wall_s"], message=err[-300:]
            )
        return RunResult(RunStatus.ERROR, message=f"bwrap failed before starting the program: {err[-300:]}")
    res = RunResult(
        RunStatus(raw["status"]),
        **{k: raw[k] for k in ("exit_code", "signal", "stdout", "stderr", "cpu_s", "wall_s", "memory_mb", "message")},
    )
    # The program is pid 1 of its namespace; bwrap reports its death by signal n as exit 128+n.
    if res.status is RunStatus.EXITED and res.exit_code is not None and 128 < res.exit_code < 160:
        res.status, res.signal, res.exit_code = RunStatus.SIGNALED, res.exit_code - 128, None
    return res


def _gcc_version() -> str:
    try:
        return (
            subprocess.run(["g++", "-dumpfullversion"], capture_output=True, text=True, timeout=30).stdout.strip()
            or "none"
        )
    except OSError:
        return "none"
