"""Hostile submissions: the right verdict, nothing left behind, nothing let out (both backends)."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import threading
import time

import pytest

from sandbox import Limits, Verdict, judge
from sandbox.backends.docker import LABEL, DockerBackend, DockerConfig
from sandbox.judges.classify import STARVED_WALL_FACTOR

ECHO = {
    "id": "echo",
    "judge": "livecodebench",
    "kind": "stdio",
    "time_limit_s": 1,
    "memory_mb": 256,
    "tests": [{"input": "", "output": "ok"}],
}
# Two tests: judged as one batch in one sandbox (the in-sandbox runner) instead of one direct run.
ECHO2 = {**ECHO, "id": "echo2", "tests": ECHO["tests"] * 2}
SHAPES = pytest.mark.parametrize("problem", [ECHO, ECHO2], ids=["single", "batch"])


def _sandbox_processes(uids) -> list[int]:
    """Processes running as the backend's uids (leased host-wide, so no other process's runs)."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{d}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if uid in uids:
            pids.append(int(d[6:]))
    return pids


def _no_sandbox_processes(backend, grace_s: float = 3.0) -> bool:
    """Killed processes exit asynchronously (namespace teardown, docker exec cleanup)."""
    deadline = time.monotonic() + grace_s
    while _sandbox_processes(backend.uids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _judge(backend, code, language="python", problem=ECHO, **kw):
    r = judge(problem, code, language, backend=backend, **kw)
    assert backend.uids, "the backend leases its sandbox uids"
    assert _no_sandbox_processes(backend), f"sandboxed processes outlived their run: {_sandbox_processes(backend.uids)}"
    return r


FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
MEMORY_BOMB = "x = []\nwhile True:\n    x.append(bytearray(10 ** 7))"


@SHAPES
@pytest.mark.parametrize(
    "code, verdicts",
    [
        (FORK_BOMB, {Verdict.TLE}),
        # Touching 300 MB costs 0.3-0.7 s of kernel CPU here, near a 1 s limit on a loaded machine:
        # MEMORY_BOMB gets a 3 s time limit below, so that it is the memory cap that stops it.
        (MEMORY_BOMB, {Verdict.MLE}),
        ("import time\ntime.sleep(60)", {Verdict.TLE}),
        ("while True:\n    pass", {Verdict.TLE}),
        ("import sys\nwhile True:\n    sys.stdout.write('y' * 65536)", {Verdict.OLE}),
    ],
    ids=["fork-bomb", "memory-bomb", "sleep", "busy-loop", "output-flood"],
)
def test_resource_attacks(backend, code, verdicts, problem):
    if code is MEMORY_BOMB:
        problem = {**problem, "time_limit_s": 3}
    r = _judge(backend, code, problem=problem)
    assert r.verdict in verdicts, r.to_dict()
    assert len(r.tests) == 1, "the first failing test stops the submission"
    # the wall clock of a test is 2 x time limit + 1 s (scoring.test_limits); a run the host starved of
    # CPU runs once more under STARVED_WALL_FACTOR times that (grader._judge), so on a loaded machine the
    # longer one may be what stops it. Either stops it: the 60 s sleep never runs out.
    wall = 2 * problem["time_limit_s"] + 1
    assert r.tests[0].wall_s < wall * STARVED_WALL_FACTOR + 1, "a wall clock must stop it"


def test_network_is_unreachable(backend):
    code = (
        "import socket\nfor addr in [('1.1.1.1', 53), ('127.0.0.1', 22), ('172.17.0.1', 2375)]:\n"
        "    try:\n        socket.create_connection(addr, timeout=1)\n        print('connected', addr)\n"
        "    except OSError:\n        pass\nprint('ok')"
    )
    assert _judge(backend, code).verdict is Verdict.AC  # any connection would print more than "ok"


@SHAPES
def test_host_files_and_environment_are_invisible(backend, monkeypatch, problem):
    monkeypatch.setenv("XRPO_SECRET_TOKEN", "hunter2")
    secret_dir = tempfile.mkdtemp(prefix="xrpo-secret-")
    with open(os.path.join(secret_dir, "key"), "w") as f:
        f.write("secret")
    code = (
        "import os\nleaks = []\n"
        f"for p in ['/etc/shadow', '/root', {secret_dir + '/key'!r}, '/work/main/pyproject.toml', '/var/run/docker.sock']:\n"
        "    try:\n        open(p).read()\n        leaks.append(p)\n    except OSError:\n        pass\n"
        "if any('hunter2' in v or k.startswith('XRPO') for k, v in os.environ.items()):\n    leaks.append('env')\n"
        "print('ok' if not leaks else leaks)"
    )
    try:
        r = _judge(backend, code, problem=problem)
    finally:
        shutil.rmtree(secret_dir)
    assert r.verdict is Verdict.AC, r.to_dict()


@SHAPES
def test_writes_outside_work_dir_fail_and_never_reach_host(backend, problem):
    marker = f"xrpo-escape-{os.getpid()}"
    code = (
        f"paths = ['/etc/{marker}', '/usr/{marker}', '/{marker}', '/job/{marker}', '/pch/{marker}']\nescaped = []\n"
        "for p in paths:\n    try:\n        open(p, 'w').write('x')\n        escaped.append(p)\n    except OSError:\n        pass\n"
        f"open('/tmp/{marker}', 'w').write('private tmp is fine')\n"
        "print('ok' if not escaped else escaped)"
    )
    assert _judge(backend, code, problem=problem).verdict is Verdict.AC
    assert not glob.glob(f"/**/{marker}", recursive=False) and not os.path.exists(f"/tmp/{marker}")


@SHAPES
def test_killing_the_parent_is_the_submissions_fault_and_the_judge_survives(backend, problem):
    for code in (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('ok')",
        "import os, signal\nos.kill(-1, signal.SIGKILL)\nimport time\ntime.sleep(0.2)\nprint('ok')",
    ):
        r = _judge(backend, code, problem=problem)
        assert r.verdict in (Verdict.AC, Verdict.RE), r.to_dict()  # never SE or a hang
    assert _judge(backend, "print('ok')").verdict is Verdict.AC


@SHAPES
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1"])
def test_signalling_the_runner_is_no_sandbox_failure(backend, problem, sig):
    """The programs run as the runner's uid. SIGINT once raised KeyboardInterrupt in the runner, a
    runner traceback the host reports as SE: one line of a policy's program failed a training step."""
    for target in ("1", "os.getppid()"):  # pid 1 (the runner under bwrap, init under Docker); the parent
        code = f"import os, signal, time\nos.kill({target}, signal.{sig})\ntime.sleep(0.2)\nprint('ok')"
        r = _judge(backend, code, problem=problem)
        assert r.verdict in (Verdict.AC, Verdict.RE), (target, r.to_dict())


PIPE_TO_NOBODY = (
    "import os\nr, w = os.pipe()\nos.close(r)\ntry:\n    os.write(w, b'x')\nexcept BrokenPipeError:\n    print('ok')"
)


@pytest.mark.parametrize(
    "code,verdict",
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nprint('ok')", Verdict.RE),  # KeyboardInterrupt
        ("import os\nos.system('kill -INT $$; echo survived')\nprint('ok')", Verdict.AC),  # sh dies of SIGINT
        (PIPE_TO_NOBODY, Verdict.AC),  # python3 ignores SIGPIPE: the write raises instead
        ('#include <csignal>\n#include <cstdio>\nint main() { std::raise(SIGINT); std::puts("ok"); }', Verdict.RE),
    ],
    ids=["python-keyboard-interrupt", "sh-default-sigint", "python-ignores-sigpipe", "cpp-default-sigint"],
)
def test_programs_get_a_fresh_processs_signal_dispositions(backend, code, verdict):
    """The runner ignores SIGINT; its children must not inherit that (python3's handler, exec's default)."""
    r = _judge(backend, code, "cpp" if "#include" in code else "python")
    assert r.verdict is verdict, r.to_dict()


FAST_COMPILE = Limits(cpu_s=3, wall_s=6, memory_mb=1024, max_processes=32, max_output_bytes=1 << 20, max_file_mb=64)
TEMPLATE_BOMB = """template<int N, int M> struct A { static const long v = A<N-1, M>::v + A<N, M-1>::v + A<N-1, M-1>::v; };
template<int M> struct A<0, M> { static const long v = 1; };
template<int N> struct A<N, 0> { static const long v = 1; };
int main() { return A<400, 400>::v & 1; }"""


@pytest.mark.parametrize(
    "code", ['#include "/dev/random"\nint main(){}', TEMPLATE_BOMB], ids=["dev-random", "template-blowup"]
)
def test_compile_time_attacks_are_ce(backend, code):
    r = _judge(backend, code, "cpp", compile_limits=FAST_COMPILE)
    assert r.verdict is Verdict.CE, r.to_dict()


def test_non_utf8_output_is_judged_not_crashed(backend):
    r = _judge(backend, "import sys\nsys.stdout.buffer.write(b'\\xff\\xfeok\\n')")
    assert r.verdict is Verdict.WA
    r = _judge(backend, "import sys\nsys.stdout.buffer.write(b'ok\\n\\xff')")  # garbage on a second line
    assert r.verdict is Verdict.WA


def test_huge_input(backend):
    big = "7 " * (8 << 20) + "\n"  # 16 MiB
    problem = {**ECHO, "tests": [{"input": big, "output": str(8 << 20)}]}
    assert (
        _judge(backend, "import sys\nprint(len(sys.stdin.buffer.read().split()))", problem=problem).verdict
        is Verdict.AC
    )
    # A program that never reads its input must not hang the judge on a full pipe.
    assert _judge(backend, f"print({8 << 20})", problem=problem).verdict is Verdict.AC


def test_concurrent_judging_from_many_threads(backend):
    results = [None] * 8

    def work(i):
        results[i] = judge(
            {**ECHO, "tests": [{"input": f"{i}\n", "output": f"{i * i}"}]},
            "n = int(input())\nprint(n * n)",
            "python",
            backend=backend,
        )

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the message shows only the runs that were not AC, whole: pytest truncates a long one
    assert [r.verdict for r in results] == [Verdict.AC] * 8, [
        r.to_dict() for r in results if r.verdict is not Verdict.AC
    ]
    assert _no_sandbox_processes(backend)


def test_bwrap_leaves_no_work_dirs(bwrap_backend):
    def ours() -> set[str]:  # this backend's uids only: other sandboxes on the host come and go
        return {
            d for uid in bwrap_backend.uids for d in glob.glob(os.path.join(tempfile.gettempdir(), f"xrpo-sbx-{uid}-*"))
        }

    before = ours()
    assert _judge(bwrap_backend, "print('ok')").verdict is Verdict.AC
    assert ours() <= before


def test_docker_leaves_no_container_even_when_interrupted(docker_backend):
    be = DockerBackend(DockerConfig(workers=1))
    try:
        with pytest.raises(KeyboardInterrupt):
            with be.session():
                raise KeyboardInterrupt  # the caller is interrupted mid-session
        assert judge(ECHO, "print('ok')", "python", backend=be).verdict is Verdict.AC
    finally:
        be.close()
    kept = {w.container.id for w in docker_backend._all}
    deadline = time.monotonic() + 10  # removal is asynchronous in the daemon
    while True:
        mine = {
            c.id
            for c in be.client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL}.pid={os.getpid()}"})
        }
        if mine <= kept or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert mine <= kept
