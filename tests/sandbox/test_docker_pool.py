"""The Docker pool heals: a pooled container that died is replaced and the submission retried once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from sandbox import Verdict, judge
from sandbox.backends.base import RunSpec
from sandbox.backends.docker import DockerBackend, DockerConfig, docker_available
from sandbox.verdict import Limits, RunStatus

AB = {
    "id": "ab",
    "judge": "livecodebench",
    "kind": "stdio",
    "time_limit_s": 2,
    "tests": [{"input": "1 2\n", "output": "3"}],
}
SOL = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.fixture
def one_container():
    if reason := docker_available():
        pytest.skip(reason)
    be = DockerBackend(DockerConfig(workers=1))
    yield be
    be.close()


def _only_container(be):
    (w,) = be._all
    return w.container


def test_a_killed_container_is_replaced_and_the_submission_judged(one_container):
    assert judge(AB, SOL, "python", backend=one_container).verdict is Verdict.AC
    dead = _only_container(one_container)
    dead.kill()  # as an OOM kill or a daemon restart would
    r = judge(AB, SOL, "python", backend=one_container)
    assert r.verdict is Verdict.AC, r.message
    assert _only_container(one_container).id != dead.id
    assert judge(AB, "print(4)", "python", backend=one_container).verdict is Verdict.WA


def _kill_when_running(container) -> threading.Thread:
    """Kill the container once a test runs in it (so the kill lands mid-run however loaded the
    machine is, not before the exec starts). A Python test runs in a child the runner forks, under
    the runner's command line (runner.runner_command: `python3 ... -c "... import runner ..."`), so
    a test is running when a runner process has a runner parent. The thread's `seen` says whether it saw one before its deadline."""

    def running(top: dict) -> bool:
        titles = top.get("Titles") or []
        procs = [dict(zip(titles, p)) for p in top.get("Processes") or []]
        runners = {p["PID"] for p in procs if "import runner" in p.get("CMD", "")}
        return any(p["PPID"] in runners for p in procs if "import runner" in p.get("CMD", ""))

    def kill():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not t.seen:
            t.seen = running(container.top())
            if not t.seen:
                time.sleep(0.05)
        container.kill()

    t = threading.Thread(target=kill, daemon=True)
    t.seen = False
    t.start()
    return t


SLOW = {**AB, "id": "slow-ab", "time_limit_s": 10}
SLOW_SOL = "import time\ntime.sleep(4)\n" + SOL


def test_a_container_killed_while_a_test_runs_is_retried_never_scored(one_container):
    """`docker kill` (an OOM kill, a daemon restart) mid-test is the sandbox's failure, not the
    submission's: the session's first batch runs again on a fresh container."""
    assert judge(AB, SOL, "python", backend=one_container).verdict is Verdict.AC
    dead = _only_container(one_container)
    killer = _kill_when_running(dead)  # the program sleeps 4 s
    r = judge(SLOW, SLOW_SOL, "python", backend=one_container)
    killer.join()
    assert killer.seen, "the kill did not land while a test ran"
    assert r.verdict is Verdict.AC, r.message
    assert _only_container(one_container).id != dead.id


def test_a_container_killed_under_a_later_batch_is_a_sandbox_error(one_container):
    """Past the session's first batch /work held earlier output, so no retry: the run comes back as
    the sandbox's ERROR (verdict SE, retried by the scorer), never as the program's crash."""
    with one_container.session() as s:
        assert s.run(RunSpec(["/usr/bin/python3", "-c", "print(1)"])).status is RunStatus.OK
        killer = _kill_when_running(s.w.container)
        r = s.run(RunSpec(["/usr/bin/python3", "-c", "import time; time.sleep(4)"], limits=Limits(wall_s=10)))
        killer.join()
        assert killer.seen, "the kill did not land while a test ran"
    assert r.status is RunStatus.ERROR, r
    assert "container died" in r.message


def test_a_program_that_kills_its_runner_is_still_its_own_fault(one_container):
    """The other side of the line drawn above: the container lives on, so the verdict is RE."""
    r = judge(AB, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "python", backend=one_container)
    assert r.verdict is Verdict.RE, r.message


def test_without_reuse_every_submission_gets_a_new_container():
    if reason := docker_available():
        pytest.skip(reason)
    with DockerBackend(DockerConfig(workers=1, reuse=False)) as be:
        seen = []
        for _ in range(2):
            with be.session() as s:
                seen.append(s.w.container.id)
        assert seen[0] != seen[1]
        assert judge(AB, SOL, "python", backend=be).verdict is Verdict.AC


# A process that judges one submission on a Docker pool and is then killed with SIGKILL, as Ray
# ends its reward workers (no atexit, so no close()). It prints the pool's id and temp root first.
KILLED_OWNER = """
import os, signal, sys
from sandbox import judge
from sandbox.backends.docker import DockerBackend, DockerConfig
be = DockerBackend(DockerConfig(workers=1))
assert judge(AB, SOL, "python", backend=be).verdict.value == "AC"
print(be._pool_id, be._root, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _pool_containers(pool_id: str) -> list:
    import docker

    return docker.from_env().containers.list(all=True, sparse=True, filters={"label": f"xrpo.sandbox.pool={pool_id}"})


def test_a_pool_whose_process_is_killed_leaves_no_container_or_temp_root():
    if reason := docker_available():
        pytest.skip(reason)
    script = f"AB = {AB!r}\nSOL = {SOL!r}\n" + KILLED_OWNER
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]  # it did die by SIGKILL, without cleaning up
    pool_id, root = proc.stdout.split()
    deadline = time.time() + 60
    while (os.path.exists(root) or _pool_containers(pool_id)) and time.time() < deadline:
        time.sleep(0.5)
    assert not os.path.exists(root), "the pool's temp root outlived its process"
    assert not _pool_containers(pool_id), "the pool's container outlived its process"


def test_close_leaves_the_next_pool_of_the_same_process_alone():
    """The reaper of a closed pool wakes at close(); it must remove only its own pool's containers."""
    if reason := docker_available():
        pytest.skip(reason)
    first = DockerBackend(DockerConfig(workers=1))
    assert judge(AB, SOL, "python", backend=first).verdict is Verdict.AC
    first.close()
    with DockerBackend(DockerConfig(workers=1)) as second:
        assert judge(AB, SOL, "python", backend=second).verdict is Verdict.AC
        time.sleep(3)  # the first pool's reaper has woken and swept by now
        assert _pool_containers(second._pool_id), "the first pool's reaper removed the second pool's container"
        assert judge(AB, SOL, "python", backend=second).verdict is Verdict.AC
    assert not _pool_containers(first._pool_id)


def test_close_returns_once_its_containers_are_gone():
    """close() kills its containers, whose removal (auto_remove) the daemon finishes on its own:
    close must wait for it, or a server that exits on SIGTERM leaves containers behind."""
    if reason := docker_available():
        pytest.skip(reason)
    for judged in (True, False, True, False):  # the race is timing-dependent: several pools
        be = DockerBackend(DockerConfig(workers=2))
        if judged:
            assert judge(AB, SOL, "python", backend=be).verdict is Verdict.AC
        else:
            with be.session():
                pass
        assert _pool_containers(be._pool_id)
        be.close()
        assert not _pool_containers(be._pool_id)
