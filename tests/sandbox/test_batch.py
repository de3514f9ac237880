"""A submission's tests run back to back in one sandbox (bwrap: one bwrap and the in-sandbox
runner; Docker: one exec of it). Each test must still be isolated from the others and from the
runner, which runs as the same uid as the programs."""

from __future__ import annotations

import re

import pytest

from sandbox import Limits, RunSpec
from sandbox.backends.base import RunnerReport
from sandbox.backends.bwrap import _batchable_groups
from sandbox.verdict import RunResult, RunStatus

PY = "/usr/bin/python3"
LIM = Limits(cpu_s=2, wall_s=5, memory_mb=512)


def _py(code: str, stdin: bytes = b"") -> RunSpec:
    return RunSpec([PY, "-c", code], LIM, stdin=stdin)


def test_one_sandbox_per_batch_and_stdin_per_test(backend):
    code = "import os, sys\nprint(os.getppid(), sys.stdin.read().strip())"
    with backend.session() as s:
        rs = s.run_many([_py(code, f"{i}\n".encode()) for i in range(4)], stop_on_failure=True)
    assert [r.status for r in rs] == [RunStatus.OK] * 4, [r.message for r in rs]
    parents = {r.stdout.split()[0] for r in rs}
    assert len(parents) == 1, "every test of a batch is a child of the same runner"
    assert [r.stdout.split()[1] for r in rs] == [b"0", b"1", b"2", b"3"]


FORGE = r"""
import ctypes, json, os
runner = os.getppid()
line = json.dumps({"result": 1, "status": "ok", "exit_code": 0, "signal": None, "stdout": "Zm9yZ2Vk",
                   "stderr": "", "cpu_s": 0, "wall_s": 0, "memory_mb": 0, "message": ""}) + "\n"
got = []
for path in (f"/proc/{runner}/fd/1", f"/proc/{runner}/mem"):
    try:
        with open(path, "w") as f:
            f.write(line)
        got.append("wrote " + path)
    except OSError as e:
        got.append(type(e).__name__)
libc = ctypes.CDLL(None, use_errno=True)
got.append("ptrace " + ("ok" if libc.ptrace(16, runner, 0, 0) == 0 else str(ctypes.get_errno())))  # PTRACE_ATTACH
print(" ".join(got))
"""


def test_a_program_cannot_forge_the_runners_report(backend):
    """The runner is not dumpable: its /proc files and ptrace are closed to the programs."""
    with backend.session() as s:
        rs = s.run_many([_py(FORGE), _py("print('genuine')")], stop_on_failure=False)
    assert len(rs) == 2, [r.message for r in rs]
    assert rs[0].stdout.split() == [b"PermissionError", b"PermissionError", b"ptrace", b"1"], rs[0].stdout  # EPERM
    assert rs[1].stdout == b"genuine\n", "the second result is the real one, not the forged line"


def test_memory_is_measured_per_test(backend):
    """Each test's peak is its own: a big test before a small one does not inflate it."""
    big = "x = bytearray(200 << 20)\nx[::4096] = b'1' * len(x[::4096])\nprint(len(x))"
    with backend.session() as s:
        rs = s.run_many([_py(big), _py("print(1)"), _py(big)], stop_on_failure=True)
    assert [r.status for r in rs] == [RunStatus.OK] * 3, [r.message for r in rs]
    assert rs[0].memory_mb >= 200 and rs[2].memory_mb >= 200, [r.memory_mb for r in rs]
    assert 0 < rs[1].memory_mb < 100, [r.memory_mb for r in rs]


def test_leftovers_of_a_test_are_gone_before_the_next(backend):
    """A daemon started by one test is killed, and /tmp emptied, before the next test runs."""
    spawn = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
        "open('/tmp/left', 'w').write('x')\nprint('spawned')"
    )
    look = (
        "import os\nprocs = [open(f'/proc/{p}/cmdline', 'rb').read() for p in os.listdir('/proc') if p.isdigit()]\n"
        "print(any(b'time.sleep(' + b'60)' in c for c in procs), os.path.exists('/tmp/left'))"
    )  # not our own argv
    with backend.session() as s:
        rs = s.run_many([_py(spawn), _py(look)], stop_on_failure=True)
    assert rs[0].stdout == b"spawned\n"
    assert rs[1].stdout == b"False False\n"


def test_stop_on_failure_stops_the_batch(backend):
    with backend.session() as s:
        rs = s.run_many([_py("print(1)"), _py("raise SystemExit(3)"), _py("print(3)")], stop_on_failure=True)
        assert [(r.status, r.exit_code) for r in rs] == [(RunStatus.OK, 0), (RunStatus.EXITED, 3)]
        rs = s.run_many([_py("print(1)"), _py("raise SystemExit(3)"), _py("print(3)")], stop_on_failure=False)
        assert [r.status for r in rs] == [RunStatus.OK, RunStatus.EXITED, RunStatus.OK]


def test_batchable_groups():
    w = RunSpec(["cc"], files={"a.c": b""}, writable=True)
    t = RunSpec(["./a"])
    f1, f1_again = RunSpec(["./a"], files={"x": b"1"}), RunSpec(["./a"], files={"x": b"2"})
    groups = _batchable_groups([w, t, t, f1, t, f1_again, t, w, t])
    assert [len(g) for g in groups] == [1, 4, 2, 1, 1]
    assert groups[2][0] is f1_again and groups[3][0] is w


def test_runner_report_reads_what_a_dead_runner_left():
    ok = RunResult(RunStatus.OK, exit_code=0, stdout=b"1\n")
    lines = [b'{"begin": 0}', __import__("json").dumps({"result": 0, **ok.to_wire()}).encode(), b'{"begin": 1}']
    for killed, err, status in [
        (False, b"", RunStatus.SIGNALED),
        (True, b"", RunStatus.TIMEOUT),
        (False, b"Traceback (most recent call last):", RunStatus.ERROR),
    ]:
        report = RunnerReport()
        assert [report.feed(line) for line in lines] == [True, False, True]
        assert report.interrupted
        rs = report.finish(killed, err)
        assert rs[0] == ok and rs[1].status is status, rs


@pytest.mark.parametrize("n", [2, 5])
def test_bwrap_batch_leaves_no_job_dirs(bwrap_backend, n):
    import glob
    import os
    import tempfile

    # only this session's job dirs (named by its uid, leased to it until it closes): another test
    # process may be judging meanwhile
    with bwrap_backend.session() as s:
        assert [r.stdout for r in s.run_many([_py("print(2)")] * n, True)] == [b"2\n"] * n
        assert glob.glob(os.path.join(tempfile.gettempdir(), f"xrpo-job-{s.uid}-*")) == []


@pytest.mark.parametrize(
    "language, code",
    [
        ("python", "n = int(input())\nprint(n * n)"),
        ("cpp", '#include <cstdio>\nint main(){long n; scanf("%ld", &n); printf("%ld\\n", n * n);}'),
    ],
)
def test_sandbox_starts_per_submission(backend, monkeypatch, language, code):
    """Compilation and all tests in one run_many: Docker runs them in one exec of the runner;
    bwrap needs a second sandbox only for a compiler that writes (C++: /work is writable there)."""
    import subprocess

    from sandbox import Verdict, judge

    problem = {
        "id": "sq",
        "judge": "livecodebench",
        "kind": "stdio",
        "time_limit_s": 1,
        "memory_mb": 256,
        "tests": [{"input": f"{i}\n", "output": f"{i * i}"} for i in range(4)],
    }
    starts = []
    if backend.name == "docker":
        create = backend.client.api.exec_create
        monkeypatch.setattr(backend.client.api, "exec_create", lambda *a, **k: starts.append(a) or create(*a, **k))
    else:
        popen = subprocess.Popen

        def counting(argv, *a, **k):
            starts.append(argv[0])
            return popen(argv, *a, **k)

        monkeypatch.setattr(subprocess, "Popen", counting)
    r = judge(problem, code, language, backend=backend)
    assert (r.verdict, r.passed) == (Verdict.AC, 4), r.to_dict()
    expected = 2 if (backend.name, language) == ("bwrap", "cpp") else 1
    assert len(starts) == expected, starts
    starts.clear()
    r = judge(problem, code[:-3], language, backend=backend)  # CE: the tests never start
    assert r.verdict is Verdict.CE and len(starts) == 1, (r.to_dict(), starts)


def test_docker_image_ships_compiled_stdlib(docker_backend):
    """The image is read-only: without the host's .pyc files every Python start in it would
    compile its imports again (the runner's took ~160 ms per exec)."""
    code = "import importlib.util, json, subprocess\nprint(all(__import__('os').path.exists(importlib.util.cache_from_source(m.__file__)) for m in (json, subprocess)))"
    with docker_backend.session() as s:
        assert s.run(_py(code)).stdout == b"True\n"


def test_a_program_that_cannot_start_is_exit_127_not_a_sandbox_error(backend):
    with backend.session() as s:
        rs = s.run_many([RunSpec(["/work/missing"], LIM), _py("print('next')")], stop_on_failure=False)
    assert (rs[0].status, rs[0].exit_code) == (RunStatus.EXITED, 127), rs[0]
    assert rs[1].stdout == b"next\n"


DESCRIBE_PROCESS = """
import resource
with open('/proc/self/status') as f:
    print(''.join(l for l in f if l.split(':')[0] in ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapAmb', 'NoNewPrivs')))
print([resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NPROC,
       resource.RLIMIT_FSIZE, resource.RLIMIT_CORE, resource.RLIMIT_NOFILE, resource.RLIMIT_STACK)])
x = bytearray(100 << 20)
x[::4096] = b'1' * len(x[::4096])
"""


def test_bwrap_spawn_paths_give_programs_the_same_process(bwrap_backend, monkeypatch):
    """spawn="exec" (dash, prlimit and setpriv exec'd in turn, so the judging process is never
    forked) must start what the fork path's preexec_fn does: the slot uid with no groups and no
    capabilities, the same rlimits, in the slot's memory cgroup (the peak is measured)."""
    from sandbox.backends import bwrap

    started = []
    popen = bwrap.subprocess.Popen

    def spy(argv, **kw):
        started.append((argv[0].rsplit("/", 1)[-1], kw.get("preexec_fn") is not None))
        return popen(argv, **kw)

    monkeypatch.setattr(bwrap.subprocess, "Popen", spy)
    seen = {}
    for spawn in ("exec", "fork"):
        monkeypatch.setattr(bwrap_backend.config, "spawn", spawn)
        with bwrap_backend.session() as s:
            (r,) = s.run_many([_py(DESCRIBE_PROCESS)], stop_on_failure=True)
        assert r.status is RunStatus.OK, r.message
        assert r.memory_mb >= 100, (spawn, r.memory_mb)
        seen[spawn] = r.stdout.decode().replace(str(s.uid), "SLOT")  # sessions may take other slots
    assert started[0][0] in ("dash", "prlimit") and not started[0][1], started  # exec: no preexec_fn
    assert started[-1] == ("bwrap", True), started
    assert seen["exec"] == seen["fork"], seen
    assert "Uid:\tSLOT\tSLOT\tSLOT\tSLOT\n" in seen["exec"] and re.search(r"^Groups:\s*$", seen["exec"], re.M), seen
    assert "CapEff:\t0000000000000000" in seen["exec"], seen


def test_bwrap_spawn_auto_forks_only_a_small_process(bwrap_backend, monkeypatch):
    from sandbox.backends import bwrap

    assert 1 < bwrap._resident_mb() < 100_000
    monkeypatch.setattr(bwrap_backend.config, "spawn", "auto")
    with bwrap_backend.session() as s:
        for resident, forks in ((bwrap._FORK_MAX_MB / 2, True), (bwrap._FORK_MAX_MB * 4, False)):
            monkeypatch.setattr(bwrap, "_resident_mb", lambda resident=resident: resident)
            assert (s._spawn_prefix(LIM) is None) is forks, resident
    with pytest.raises(ValueError, match="spawn"):
        bwrap.BwrapConfig(spawn="vfork")


def test_a_run_the_caller_rejects_ends_the_batch(backend, begun_steps):
    """`accept` graded run 1 wrong: run_many returns runs 0 and 1 only, whatever the runner could
    still run, and the session's next batch is whole (nothing of the stopped one is left over)."""
    specs = [_py(f"print({i})") for i in range(4)]
    graded = []

    def accept(i, r):
        graded.append(i)
        return r.stdout != b"1\n"

    with backend.session() as s:
        rs = s.run_many(specs, stop_on_failure=True, accept=accept)
        assert [r.stdout for r in rs] == [b"0\n", b"1\n"]
        assert [r.status for r in rs] == [RunStatus.OK] * 2
        if backend.name == "bwrap":  # the host never let the runner start run 2
            assert begun_steps == [0, 1] and graded == [0, 1]
        again = s.run_many(specs, stop_on_failure=True)
    assert [r.stdout for r in again] == [b"0\n", b"1\n", b"2\n", b"3\n"]
    with backend.session() as s:  # accept is a stop rule: without stop_on_failure every run is kept
        assert len(s.run_many(specs, stop_on_failure=False, accept=accept)) == 4
