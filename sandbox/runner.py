"""Run one process with a wall clock, an output cap and rusage; also the in-sandbox batch runner.

Standard library only: this file runs inside the sandbox as `python3 -I runner.py BATCH.json`
(copied into the Docker image, bind-mounted read-only under bwrap) and runs a submission's tests
back to back; the bwrap backend also imports `run_capped` on the host for single runs.
"""
from __future__ import annotations

import base64
import json
import math
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time

STDERR_CAP = 64 << 10  # stderr is only kept for messages; it never causes OLE


def rlimits(limits: dict) -> dict[int, int]:
    """The rlimits applying the Limits fields (see verdict.Limits), by `resource` constant.

    soft = hard: SIGKILL at the CPU limit (a namespace's pid 1 would ignore SIGXCPU anyway), and
    the program cannot raise any of them back.
    """
    return {
        resource.RLIMIT_AS: int(limits["memory_mb"]) << 20,
        # Unlimited: deep recursion is legal (as on Codeforces) and still capped by RLIMIT_AS. A finite
        # cap would also become every new thread's stack size (glibc), so threads would fail under AS.
        resource.RLIMIT_STACK: resource.RLIM_INFINITY,
        resource.RLIMIT_CPU: max(1, math.ceil(limits["cpu_s"])),
        resource.RLIMIT_NPROC: int(limits["max_processes"]),
        resource.RLIMIT_FSIZE: int(limits["max_file_mb"]) << 20,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: 256,
    }


def set_rlimits(items: list[tuple[int, int]]) -> None:
    """Apply rlimits to the calling process; safe between fork and exec (only syscalls)."""
    for res, value in items:
        resource.setrlimit(res, (value, value))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_capped(argv, stdin: bytes, wall_s: float, max_output: int, *, user=None, cwd=None, env=None, pass_fds=(), preexec_fn=None):
    """Run argv in a new session; kill its group on the wall clock or when stdout passes max_output.

    preexec_fn runs in the child before exec, after it switched to `user` (rlimits, cgroup join).

    Returns a dict with the RunResult fields (stdout/stderr as bytes).
    """
    t0 = time.monotonic()
    ids = {} if user is None else {"user": user, "group": user, "extra_groups": []}
    p = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
        start_new_session=True, pass_fds=pass_fds, preexec_fn=preexec_fn, **ids,
    )
    pidfd = os.pidfd_open(p.pid)
    sel = selectors.DefaultSelector()
    out, err, sizes = [], [], {1: 0, 2: 0}
    for f in (p.stdout, p.stderr):
        os.set_blocking(f.fileno(), False)
        sel.register(f.fileno(), selectors.EVENT_READ)
    sel.register(pidfd, selectors.EVENT_READ)
    view, stdin_fd = memoryview(stdin), p.stdin.fileno()
    if view:
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        p.stdin.close()
    timed_out = output_limit = exited = False
    deadline = t0 + wall_s
    try:
        while not exited:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(left):
                fd = key.fd
                if fd == pidfd:
                    exited = True
                elif fd == stdin_fd:
                    try:
                        view = view[os.write(fd, view[: 1 << 16]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        view = view[:0]
                    if not view:
                        sel.unregister(fd)
                        p.stdin.close()
                else:
                    n = _read(fd, p, out, err, sizes)
                    if n < 0:
                        sel.unregister(fd)  # EOF; the pidfd tells us when it exits
                    elif sizes[1] > max_output:
                        output_limit = True
                        break
            if output_limit:
                break
        wall = time.monotonic() - t0
        if exited:  # drain what the process wrote before it exited
            for f in (p.stdout, p.stderr):
                while not output_limit and _read(f.fileno(), p, out, err, sizes) > 0:
                    output_limit = sizes[1] > max_output
    finally:
        _kill_group(p.pid)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = 0  # reaped by wait4; keep Popen from waiting again
        sel.close()
        os.close(pidfd)
        for f in (p.stdin, p.stdout, p.stderr):
            if not f.closed:
                f.close()
    result = {
        "exit_code": None, "signal": None, "stdout": b"".join(out)[:max_output], "stderr": b"".join(err)[:STDERR_CAP],
        "cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall, "memory_mb": ru.ru_maxrss / 1024.0, "message": "",
    }
    if os.WIFSIGNALED(status):
        result["signal"] = os.WTERMSIG(status)
    else:
        result["exit_code"] = os.WEXITSTATUS(status)
    if timed_out:
        result["status"] = "timeout"
    elif output_limit:
        result["status"] = "output_limit"
    elif result["signal"] is not None:
        result["status"] = "signaled"
    else:
        result["status"] = "ok" if result["exit_code"] == 0 else "exited"
    return result


def _read(fd: int, p, out: list, err: list, sizes: dict) -> int:
    """Read one chunk: its size, 0 when nothing is ready, -1 at EOF."""
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return 0
    if not data:
        return -1
    is_out = fd == p.stdout.fileno()
    key = 1 if is_out else 2
    if key == 2 and sizes[2] >= STDERR_CAP:
        return len(data)  # keep draining stderr, discard the rest
    sizes[key] += len(data)
    (out if is_out else err).append(data)
    return len(data)


# ---- in-sandbox batch runner (both backends) ----

WORK = "/work"
_DEFAULT_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORK, "LANG": "C.UTF-8"}


def _undumpable() -> None:
    """PR_SET_DUMPABLE 0. The programs run as our uid: without this they could open
    /proc/<runner>/fd/1 or ptrace the runner and write forged results to the host."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _reset(dirs=(WORK, "/tmp")) -> None:
    """Kill every other process this uid owns (not pid 1, not us) and empty the writable dirs.

    Under bwrap the runner is pid 1 of its namespace: orphans are reparented to it, so it reaps them.
    """
    me, uid = os.getpid(), os.getuid()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # killed processes die asynchronously; wait for them
        try:
            os.kill(-1, signal.SIGKILL)  # never reaches pid 1 (Docker's init, or us under bwrap)
        except ProcessLookupError:
            pass
        _reap_orphans()
        if not [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me) and _owner(p) == uid]:
            break
        time.sleep(0.005)
    for d in dirs:
        for name in os.listdir(d):
            path = os.path.join(d, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def _reap_orphans() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _owner(pid: str) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def _write_files(files: dict, job: str) -> None:
    for name, src in files.items():
        dst = os.path.join(WORK, name)
        if os.path.lexists(dst):
            os.unlink(dst)
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
        with open(os.path.join(job, src), "rb") as f, os.fdopen(fd, "wb") as g:
            shutil.copyfileobj(f, g)


def main(batch_path: str) -> int:
    """Run the batch's steps in order, printing one JSON line before ({"begin": i}) and one after
    ({"result": i, ...}) each step. With "sync", wait for a line on stdin after each begin: the
    host resets its memory counter there."""
    _undumpable()
    job = os.path.dirname(batch_path)
    with open(batch_path) as f:
        batch = json.load(f)
    if batch.get("reset"):
        _reset()
    env = batch.get("env") or _DEFAULT_ENV
    for i, step in enumerate(batch["steps"]):
        print(json.dumps({"begin": i}), flush=True)
        if batch.get("sync") and not sys.stdin.readline():
            return 1  # the host went away
        _write_files(step.get("files", {}), job)
        stdin = b""
        if step.get("stdin"):
            with open(os.path.join(job, step["stdin"]), "rb") as f:
                stdin = f.read()
        lim = step["limits"]
        limits = list(rlimits(lim).items())
        r = run_capped(step["argv"], stdin, lim["wall_s"], lim["max_output_bytes"], cwd=WORK, env=env,
                       preexec_fn=lambda: set_rlimits(limits))
        _reset(dirs=("/tmp",))
        if r["status"] != "ok":
            r["stdout"] = r["stdout"][:4096]  # only a run that exited 0 gets compared
        r["stdout"] = base64.b64encode(r["stdout"]).decode()
        r["stderr"] = base64.b64encode(r["stderr"]).decode()
        print(json.dumps({"result": i, **r}), flush=True)
        if r["status"] != "ok" and (batch.get("stop_on_failure") or step.get("required")):
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
