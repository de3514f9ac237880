"""Run one process with a wall clock, an output cap and rusage; also the in-sandbox batch runner.

Standard library only: this file runs inside the sandbox (`python3 -I -S -c "... import runner
..." BATCH`, from a precompiled copy in the Docker image or bound read-only under bwrap: see
`runner_command`) and runs a submission's tests back to back; the bwrap backend also imports
`run_capped` on the host for single runs.
"""

from __future__ import annotations

import _signal
import binascii
import marshal
import math
import os
import resource
import select
import sys
import time

# Only modules that import fast: the runner starts once per submission inside the sandbox, and
# json, signal, shutil, selectors or subprocess would add more to its start than a small test
# costs (_signal is built in).
SIGKILL = 9  # Linux
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


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of group `pgid` or descended from its leader,
    and of the children they reaped, from /proc: what a wall-clock kill would lose, since a driver
    killed with its children (g++ and cc1plus) never reaps them and `wait4` reports the driver alone.
    Descendants count though they left the group: bwrap runs its command in a session of its own.
    0 where /proc is absent."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    procs: dict[int, tuple[int, int, int]] = {}  # pid -> (ppid, pgrp, clock ticks)
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        # after the command: state ppid pgrp ... utime(12) stime(13) cutime(14) cstime(15), 0-based here
        procs[int(name)] = (int(fields[1]), int(fields[2]), sum(int(x) for x in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    counted = {pid for pid, (_, pgrp, _) in procs.items() if pgrp == pgid}
    todo = [pgid, *counted]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in counted:
                counted.add(child)
                todo.append(child)
    return sum(procs[pid][2] for pid in counted if pid in procs) / tick


def kill_group(pid: int) -> None:
    """SIGKILL a process group that may already be gone."""
    try:
        os.killpg(pid, SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _popen(argv, cwd, env, preexec_fn, user, pass_fds, stdio):
    """Start argv through subprocess (thread-safe: the host judges from many threads)."""
    import subprocess  # not at the top: the in-sandbox runner never needs it (slow to import)

    ids = {} if user is None else {"user": user, "group": user, "extra_groups": []}
    p = subprocess.Popen(
        argv,
        stdin=stdio[0],
        stdout=stdio[1],
        stderr=stdio[2],
        cwd=cwd,
        env=env,
        start_new_session=True,
        pass_fds=pass_fds,
        preexec_fn=preexec_fn,
        **ids,
    )
    p.returncode = 0  # we reap it with wait4; keep Popen from ever waiting on it
    return p.pid


def _fork_exec(argv, cwd, env, preexec_fn, stdio, in_process=None) -> int:
    """fork + execve, for the single-threaded batch runner: no subprocess import, no Popen per test.
    An exec failure comes back through a close-on-exec pipe as OSError, like Popen's.
    in_process(argv, env), when given, replaces the execve: it runs the program in the forked
    child and never returns (see `run_python`)."""
    exe = argv[0] if "/" in argv[0] else _which(argv[0], (env or os.environ).get("PATH", os.defpath))
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            _restore_signals(in_process is not None)
            for target, fd in enumerate(stdio):
                os.dup2(fd, target)
            os.closerange(3, err_w)
            os.closerange(err_w + 1, 1 << 16)
            if cwd:
                os.chdir(cwd)
            if preexec_fn is not None:
                preexec_fn()
            if in_process is not None:
                os.close(err_w)  # nothing is exec'd: the parent would wait on it until the program ends
                in_process(argv, env if env is not None else dict(os.environ))
            os.execve(exe or argv[0], argv, env if env is not None else os.environ)
        except BaseException as e:  # noqa: BLE001 - anything here must end the child
            os.write(err_w, f"{getattr(e, 'errno', 0) or 0}:{e}".encode()[:1000])
        finally:
            os._exit(127)
    os.close(err_w)
    with os.fdopen(err_r, "rb") as f:
        failure = f.read()
    if failure:
        os.waitpid(pid, 0)
        code, _, msg = failure.decode(errors="replace").partition(":")
        raise OSError(int(code) if code.isdigit() else 0, f"cannot run {argv[0]!r}: {msg}")
    return pid


def _restore_signals(python: bool) -> None:
    """In a forked child: the signal dispositions a program gets from a fresh start. The runner
    ignores SIGINT (main); a new python3 handles it with KeyboardInterrupt and ignores SIGPIPE and
    SIGXFSZ, an exec'd program gets all three at their defaults (as subprocess's restore_signals)."""
    if python:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        return
    for sig in (_signal.SIGINT, _signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)


def _which(name: str, path: str) -> str | None:
    for d in path.split(os.pathsep):
        exe = os.path.join(d, name)
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    return None


def run_capped(
    argv,
    stdin: bytes,
    wall_s: float,
    max_output: int,
    *,
    user=None,
    cwd=None,
    env=None,
    pass_fds=(),
    preexec_fn=None,
    fork: bool = False,
    in_process=None,
):
    """Run argv in a new session; kill its group on the wall clock or when stdout passes max_output.

    preexec_fn runs in the child before exec, after it switched to `user` (rlimits, cgroup join).
    fork=True starts it with a bare fork+exec (single-threaded callers only; no user or pass_fds);
    with in_process too, the forked child runs it without exec (`_fork_exec`).

    Returns a dict with the RunResult fields (stdout/stderr as bytes).
    """
    t0 = time.monotonic()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        if fork:
            pid = _fork_exec(argv, cwd, env, preexec_fn, (in_r, out_w, err_w), in_process)
        else:
            pid = _popen(argv, cwd, env, preexec_fn, user, pass_fds, (in_r, out_w, err_w))
    except BaseException:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    poll = select.poll()
    chunks, sizes = {out_r: [], err_r: []}, {out_r: 0, err_r: 0}
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
        poll.register(fd, select.POLLIN)
    poll.register(pidfd, select.POLLIN)
    view = memoryview(stdin)
    if view:
        os.set_blocking(in_w, False)
        poll.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)
        in_w = -1
    timed_out = output_limit = exited = False
    group_cpu = 0.0
    deadline = t0 + wall_s
    try:
        while not exited and not output_limit:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                group_cpu = group_cpu_s(pid)  # before the kill: the children's CPU dies with them
                break
            for fd, _ in poll.poll(max(1, math.ceil(left * 1000))):
                if fd == pidfd:
                    exited = True
                elif fd == in_w:
                    try:
                        view = view[os.write(fd, view[: 1 << 16]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        view = view[:0]
                    if not view:
                        poll.unregister(fd)
                        os.close(fd)
                        in_w = -1
                else:
                    if _read(fd, chunks, sizes, fd == err_r) < 0:
                        poll.unregister(fd)  # EOF; the pidfd tells us when it exits
                    elif sizes[out_r] > max_output:
                        output_limit = True
                        break
        wall = time.monotonic() - t0
        if exited:  # drain what the process wrote before it exited
            for fd in (out_r, err_r):
                while not output_limit and _read(fd, chunks, sizes, fd == err_r) > 0:
                    output_limit = sizes[out_r] > max_output
    finally:
        kill_group(pid)
        _, status, ru = os.wait4(pid, 0)
        for fd in (pidfd, in_w, out_r, err_r):
            if fd >= 0:
                os.close(fd)
    result = {
        "exit_code": None,
        "signal": None,
        "stdout": b"".join(chunks[out_r])[:max_output],
        "stderr": b"".join(chunks[err_r])[:STDERR_CAP],
        "cpu_s": max(ru.ru_utime + ru.ru_stime, group_cpu),
        "wall_s": wall,
        "memory_mb": ru.ru_maxrss / 1024.0,
        "message": "",
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


def _read(fd: int, chunks: dict, sizes: dict, is_stderr: bool) -> int:
    """Read one chunk: its size, 0 when nothing is ready, -1 at EOF."""
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return 0
    if not data:
        return -1
    if is_stderr and sizes[fd] >= STDERR_CAP:
        return len(data)  # keep draining stderr, discard the rest
    sizes[fd] += len(data)
    chunks[fd].append(data)
    return len(data)


# ---- Python programs without a new interpreter (the batch runner's fork server) ----


def forkable_python(argv: list[str], executable: str) -> bool:
    """Whether argv is `python3 FILE [ARG...]` or `python3 -c CODE [ARG...]` for this interpreter:
    what `run_python` runs in a forked child, as that command would, without starting Python."""
    if len(argv) < 2 or argv[0] != executable:
        return False
    return (argv[1] == "-c" and len(argv) >= 3) or not argv[1].startswith("-")


def prepare_python() -> None:
    """Import once, in the runner, what every forked program needs: the site packages a plain
    `python3` has on sys.path (the runner starts with -I -S), and the modules `run_python` uses."""
    import atexit  # noqa: F401
    import importlib.machinery  # noqa: F401
    import site

    site.main()


def _std_streams() -> None:
    """New sys.stdin/stdout/stderr over fds 0-2, configured as the interpreter's own (the runner
    was started in the same environment, so its streams have the encoding a fresh python3 picks)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        old = getattr(sys, "__" + name + "__")
        stream = open(fd, mode, encoding=old.encoding, errors=old.errors, newline="\n", closefd=False)  # noqa: SIM115
        stream.reconfigure(line_buffering=old.line_buffering, write_through=old.write_through)
        setattr(sys, name, stream)
        setattr(sys, "__" + name + "__", stream)


def _exit_status(exc: SystemExit) -> int:
    """The status `sys.exit(code)` gives, as the interpreter computes it."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # noqa: BLE001 - as the interpreter, ignore a broken stderr
        pass
    return 1


def _report(exc: BaseException, filename: str) -> None:
    """Print an uncaught exception as python3 would: from the program's first frame on (none for a
    SyntaxError in its source), without the runner's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _main_module(filename: str | None):
    """A fresh __main__ in sys.modules, as the interpreter makes for a script (filename) or -c."""
    main = type(sys)("__main__")
    main.__dict__.update({"__builtins__": __builtins__, "__package__": None, "__spec__": None})
    if filename is not None:
        from importlib.machinery import SourceFileLoader

        main.__file__, main.__cached__ = filename, None
        main.__loader__ = SourceFileLoader("__main__", filename)
    sys.modules["__main__"] = main
    return main


def run_python(argv: list[str], env: dict) -> None:
    """In a child forked from the runner: run `python3 FILE|-c CODE [ARG...]` as a new interpreter
    would (sys.argv, sys.path[0], a fresh __main__, exit status and traceback, non-daemon threads
    joined, atexit handlers, stdout flushed), then _exit. Never returns.

    What it saves is the interpreter's start, several times a test's own cost for short
    programs. The program inherits the runner's PR_SET_DUMPABLE 0 and nothing of its descriptors.
    """
    import atexit

    os.environ.clear()
    os.environ.update(env)
    _std_streams()
    status = 0
    if argv[1] == "-c":
        sys.argv, filename, source = ["-c", *argv[3:]], "<string>", argv[2]
        sys.path.insert(0, "")
    else:
        sys.argv, filename = argv[1:], os.path.abspath(argv[1])
        sys.path.insert(0, os.path.dirname(filename))
    try:
        main = _main_module(None if argv[1] == "-c" else filename)
        if argv[1] != "-c":
            with open(filename, "rb") as f:
                source = f.read()  # compile() reads the coding cookie, as the interpreter does
        exec(compile(source, filename, "exec"), main.__dict__)
    except SystemExit as e:
        status = _exit_status(e)
    except BaseException as e:  # noqa: BLE001 - the program's uncaught exception
        _report(e, filename)
        status = 1
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()  # joins the program's non-daemon threads, as interpreter exit does
        atexit._run_exitfuncs()
    except SystemExit as e:
        status = _exit_status(e)
    except BaseException as e:  # noqa: BLE001
        _report(e, filename)
        status = 1
    try:
        sys.stdout.flush()
    except Exception as e:  # noqa: BLE001 - python3 exits 120 when it cannot flush stdout
        status = 120
        _ignored(e)
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(status)


def _ignored(exc: BaseException) -> None:
    try:
        stdout = f"<_io.TextIOWrapper name='<stdout>' mode='w' encoding='{sys.stdout.encoding}'>"
        sys.stderr.write(f"Exception ignored in: {stdout}\n{type(exc).__name__}: {exc}\n")
    except Exception:  # noqa: BLE001
        pass


# ---- the runner's command line (host side, both backends) ----


def runner_command(python: str, runner_dir: str, batch_path: str) -> list[str]:
    """How a sandbox starts the batch runner on batch_path: this file imported from runner_dir,
    where `compile_runner` left its bytecode (run as a script it would be compiled at every
    start, a third of the runner's start-up), then removed from sys.path and sys.modules, so that
    the programs it forks see what a new interpreter has."""
    boot = (
        f"import sys; sys.path.insert(0, {runner_dir!r}); import runner; "
        "del sys.path[0], sys.modules['runner']; sys.exit(runner.main(sys.argv[1]))"
    )
    return [python, "-I", "-S", "-c", boot, batch_path]


def compile_runner(python: str, runner_dir: str) -> None:
    """Copy this file to runner_dir/runner.py and compile it there with `python` (the sandbox's
    interpreter: bytecode is version-specific) into runner_dir/__pycache__, unchecked against the
    source, which never changes under a given runner_dir. Raises OSError when it cannot."""
    import subprocess

    target = os.path.join(runner_dir, "runner.py")
    with open(__file__, "rb") as f, open(target, "wb") as g:
        g.write(f.read())
    os.chmod(target, 0o644)
    compile_it = (
        "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True, "
        "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"
    )
    r = subprocess.run([python, "-I", "-S", "-c", compile_it, target], capture_output=True)
    if r.returncode != 0:
        raise OSError(f"compiling the runner with {python} failed: {r.stderr.decode(errors='replace')[-300:]}")
    for root, dirs, files in os.walk(runner_dir):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


# ---- in-sandbox batch runner (both backends) ----

WORK = "/work"
_DEFAULT_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORK, "LANG": "C.UTF-8"}


def _libc(name: str):
    """A libc function returning int, errno kept (`_ctypes.get_errno`), from ctypes' C module:
    importing ctypes itself costs the runner's start more than a short test does."""
    import _ctypes

    class Int(_ctypes._SimpleCData):
        _type_ = "i"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Int

    class Libc:
        _handle = _ctypes.dlopen(None, 0)  # the process's own symbols (libc is loaded)

    return Function((name, Libc()))


def _undumpable() -> None:
    """PR_SET_DUMPABLE 0. The programs run as our uid: without this they could open
    /proc/<runner>/fd/1 or ptrace the runner and write forged results to the host."""
    import _ctypes

    if _libc("prctl")(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(_ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _reset() -> None:
    """Erase what earlier submissions under this uid left in a warm sandbox (Docker's pooled
    container; bwrap starts every batch in fresh namespaces): their processes, their files and
    directories on every writable file system, the marks left on directories they cannot delete
    (mode, times, extended attributes) and their SysV IPC objects. POSIX message queues and shared
    memory are files in /dev/mqueue and /dev/shm. What cannot be erased raises: the host then
    discards the container.
    """
    _kill_others()
    uid = os.getuid()
    for mount in _writable_mounts():
        _empty(mount, uid)
    _remove_sysv_ipc(uid)
    left = [m for m in _writable_mounts() for _ in _owned_entries(m, uid)][:5]
    left += [f"SysV {kind} {ident}" for kind, ident in _sysv_ipc(uid)][:5]
    if left:
        raise RuntimeError(f"reset left state behind: {left}")


def _kill_others() -> None:
    """SIGKILL every other process this uid owns (not pid 1, not us) and wait until they are gone.

    Under bwrap the runner is pid 1 of its namespace: orphans are reparented to it, so it reaps them.
    """
    me, uid = os.getpid(), os.getuid()
    deadline = time.monotonic() + 5
    while True:  # killed processes die asynchronously; wait for them
        try:
            os.kill(-1, SIGKILL)  # never reaches pid 1 (Docker's init, or us under bwrap)
        except ProcessLookupError:
            pass
        _reap_orphans()
        left = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me) and _owner(p) == uid]
        if not left:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {left[:5]} survived SIGKILL")
        time.sleep(0.005)


_VIRTUAL_FS = ("proc", "sysfs", "cgroup", "cgroup2", "devpts", "securityfs", "debugfs", "tracefs", "bpf")


def _writable_mounts() -> list[str]:
    """Mount points of the read-write file systems this process sees (not /proc, /sys, devpts)."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, fs = line.partition(" - ")
            parts = fields.split()
            point = parts[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            if (
                "rw" in parts[5].split(",")
                and fs.split()[0] not in _VIRTUAL_FS
                and not point.startswith(("/proc", "/sys"))
            ):
                points.append(point)
    return points


def _owned_entries(mount: str, uid: int):
    """Paths on the file system mounted at `mount` that uid created or marked (never crossing
    into another mount; the mount point itself when uid owns it)."""
    dev = os.lstat(mount).st_dev
    stack = [mount]
    while stack:
        d = stack.pop()
        try:
            st = os.lstat(d)
            if st.st_uid == uid and (d != mount or _marked(d)):
                yield d
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            st = e.stat(follow_symlinks=False)
            if st.st_dev != dev:
                continue
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            elif st.st_uid == uid:
                yield e.path


def _marked(root: str) -> bool:
    """Whether a mount root this uid owns carries anything a submission could have set."""
    try:
        return bool(os.listxattr(root, follow_symlinks=False))
    except OSError:
        return False


def _empty(mount: str, uid: int) -> None:
    """Delete everything uid owns on one file system; reset the mount point it owns."""
    dev = os.lstat(mount).st_dev
    for root, subdirs, _files in os.walk(mount, topdown=True):
        for name in subdirs:  # a submission may have made its directories unreadable
            path = os.path.join(root, name)
            st = os.lstat(path)
            if st.st_uid == uid and not os.path.islink(path) and st.st_dev == dev:
                os.chmod(path, 0o700)
        subdirs[:] = [n for n in subdirs if os.lstat(os.path.join(root, n)).st_dev == dev]
    for root, subdirs, files in os.walk(mount, topdown=False):  # never follows links
        for name in files + subdirs:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if st.st_dev != dev or st.st_uid != uid:
                continue
            try:
                if _is_dir(st):
                    os.rmdir(path)
                else:
                    os.unlink(path)
            except OSError:  # in a directory of another user's; the final check reports it
                pass
    st = os.lstat(mount)
    if st.st_uid == uid:  # Docker's /work: a tmpfs owned by the submission uid
        for attr in os.listxattr(mount, follow_symlinks=False):
            os.removexattr(mount, attr, follow_symlinks=False)
        os.chmod(mount, 0o700)
        os.utime(mount)


def _is_dir(st) -> bool:
    return (st.st_mode & 0o170000) == 0o040000


_SYSV = (("shm", 7), ("sem", 4), ("msg", 7))  # /proc/sysvipc file, column of the owner's uid (creator's: +2)


def _sysv_ipc(uid: int) -> list[tuple[str, int]]:
    """(kind, id) of the SysV IPC objects uid owns or created in this IPC namespace (an owner may
    hand an object to another uid with IPC_SET; its creator can still remove it)."""
    found = []
    for kind, col in _SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        found += [(kind, int(r[1])) for r in rows if len(r) > col + 2 and uid in (int(r[col]), int(r[col + 2]))]
    return found


def _remove_sysv_ipc(uid: int) -> None:
    objs = _sysv_ipc(uid)
    if not objs:
        return
    ipc_rmid = 0
    for kind, ident in objs:
        if kind == "sem":
            _libc("semctl")(ident, 0, ipc_rmid)
        else:
            _libc(f"{kind}ctl")(ident, ipc_rmid, None)


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


def create_nofollow(root: str, name: str, mode: int) -> int:
    """A new file at root/name (name may hold subdirectories, created as needed), opened for
    writing, never through a symlink the programs may have planted there (a file in its place is
    removed first; a symlinked directory on the way fails with OSError)."""
    parts = name.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = sub
        try:
            os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            pass
        return os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=fd)
    finally:
        os.close(fd)


def _read_nofollow(root: str, name: str, cap: int) -> bytes | None:
    """Up to cap bytes of the regular file root/name, or None (missing, a link, not a file)."""
    fd = -1
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for part in name.split("/"):
            sub = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            os.close(fd)
            fd = sub
        if (os.fstat(fd).st_mode & 0o170000) != 0o100000:
            return None
        return os.read(fd, cap)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


FETCH_CAP = 4 << 20  # bytes returned of one fetched file


def encode_files(files: dict) -> str:
    """{name: bytes} as one JSON-safe string (the runner's report has no nested values)."""
    b64 = binascii.b2a_base64
    return ";".join(
        b64(k.encode(), newline=False).decode() + ":" + b64(v, newline=False).decode() for k, v in files.items()
    )


def decode_files(text: str) -> dict:
    out = {}
    for item in filter(None, text.split(";")):
        k, _, v = item.partition(":")
        out[binascii.a2b_base64(k).decode()] = binascii.a2b_base64(v)
    return out


def _write_files(files: dict, job: str) -> None:
    for name, src in files.items():
        fd = create_nofollow(WORK, name, 0o755)
        with open(os.path.join(job, src), "rb") as f, os.fdopen(fd, "wb") as g:
            while chunk := f.read(1 << 20):
                g.write(chunk)


def _seed(src: str) -> None:
    """Copy the tree at src (the host's work dir under bwrap) into the empty /work."""
    for root, subdirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target = WORK if rel == "." else os.path.join(WORK, rel)
        for name in subdirs:
            os.mkdir(os.path.join(target, name), 0o755)
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                continue
            fd = create_nofollow(target, name, os.stat(path).st_mode & 0o755)
            with open(path, "rb") as f, os.fdopen(fd, "wb") as g:
                while chunk := f.read(1 << 20):
                    g.write(chunk)


def encode_batch(batch: dict) -> bytes:
    """The host's side: the file `main` reads (plain dicts, lists, str, numbers, None)."""
    return marshal.dumps(batch, 4)  # version 4 (Python >= 3.4) for plain types: any host reads the same


_JSON_SAFE = str.maketrans({**{i: " " for i in range(32)}, '"': "'", "\\": "/"})


def _say(msg: dict) -> None:
    """One JSON line to the host, written without the json module: the values are ints, finite
    floats, None and strings (statuses, base64, messages, which lose quotes and control characters)."""

    def enc(v):
        if v is None:
            return "null"
        if isinstance(v, str):
            return '"' + v.translate(_JSON_SAFE) + '"'
        return repr(v)

    sys.stdout.write("{" + ", ".join(f'"{k}": {enc(v)}' for k, v in msg.items()) + "}\n")
    sys.stdout.flush()


def main(batch_path: str) -> int:
    """Run the batch's steps in order, printing one JSON line before ({"begin": i}) and one after
    ({"result": i, ...}) each step. With "sync", wait for a line on stdin after each begin: the
    host resets its memory counter there."""
    # The programs run as our uid and may signal us: SIGINT would raise KeyboardInterrupt here, a
    # runner traceback that the host must report as its own failure (SE, retried, then raised).
    # Ignored, the program gets no SE out of it; SIGKILL still ends the runner (RE, "killed the runner").
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    _undumpable()
    job = os.path.dirname(batch_path)
    with open(batch_path, "rb") as f:
        batch = marshal.load(f)  # written by the host (encode_batch), read-only to the programs
    if batch.get("reset"):
        _reset()
    if batch.get("seed"):
        _seed(batch["seed"])
    env = batch.get("env") or _DEFAULT_ENV
    # Python programs run in a child forked from this interpreter (run_python) unless the batch
    # asks for exec; a program that fetches files keeps exec (its open files are flushed at exit).
    forked = [
        batch.get("fork_python", True) and forkable_python(step["argv"], sys.executable) and not step.get("fetch")
        for step in batch["steps"]
    ]
    if any(forked):
        prepare_python()
    for i, step in enumerate(batch["steps"]):
        _say({"begin": i})
        if batch.get("sync") and not sys.stdin.readline():
            return 1  # the host went away
        _write_files(step.get("files", {}), job)
        stdin = b""
        if step.get("stdin"):
            with open(os.path.join(job, step["stdin"]), "rb") as f:
                stdin = f.read()
        lim = step["limits"]
        limits = list(rlimits(lim).items())
        try:
            r = run_capped(
                step["argv"],
                stdin,
                lim["wall_s"],
                lim["max_output_bytes"],
                cwd=WORK,
                env=env,
                preexec_fn=lambda limits=limits: set_rlimits(limits),
                fork=True,
                in_process=run_python if forked[i] else None,
            )
        except OSError as e:  # the program cannot start (as a shell's 127)
            r = {
                "status": "exited",
                "exit_code": 127,
                "signal": None,
                "stdout": b"",
                "stderr": str(e).encode(),
                "cpu_s": 0.0,
                "wall_s": 0.0,
                "memory_mb": 0.0,
                "message": str(e),
            }
        if step.get("fetch"):
            found = {n: d for n in step["fetch"] if (d := _read_nofollow(WORK, n, FETCH_CAP)) is not None}
            r["files"] = encode_files(found)
        _kill_others()  # what the test left running or in /tmp is gone before the next test
        _empty("/tmp", os.getuid())
        if r["status"] != "ok":
            r["stdout"] = r["stdout"][:4096]  # only a run that exited 0 gets compared
        r["stdout"] = binascii.b2a_base64(r["stdout"], newline=False).decode()
        r["stderr"] = binascii.b2a_base64(r["stderr"], newline=False).decode()
        _say({"result": i, **r})
        if r["status"] != "ok" and (batch.get("stop_on_failure") or step.get("required")):
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
