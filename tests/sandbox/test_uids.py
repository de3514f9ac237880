"""Sandbox uids are unique host-wide: two processes never share one, so one process's fork bomb
cannot exhaust another's RLIMIT_NPROC; and a closed backend leaves no slot cgroup behind."""

from __future__ import annotations

import fcntl
import glob
import json
import os
import subprocess
import sys
import time

import pytest

from sandbox import SandboxError, Verdict, judge
from sandbox.backends.uids import UidLease, default_lock_dir, lock_path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADD = {
    "id": "add",
    "judge": "livecodebench",
    "kind": "stdio",
    "time_limit_s": 2,
    "memory_mb": 256,
    "tests": [{"input": "1 2\n", "output": "3"}],
}


# ---- the lease itself (lock files in a private dir, no sandbox needed) ----


def test_leases_are_disjoint_exhaustible_and_released(tmp_path):
    a = UidLease(2, 70000, 3, str(tmp_path))
    b = UidLease(1, 70000, 3, str(tmp_path))
    assert a.uids == [70000, 70001] and b.uids == [70002]
    with pytest.raises(SandboxError, match=r"only 0 of 1 sandbox uids are free in \[70000, 70003\)"):
        UidLease(1, 70000, 3, str(tmp_path))
    a.release()
    assert UidLease(2, 70000, 3, str(tmp_path)).uids == [70000, 70001]  # free again (that lease leaks to gc)
    with pytest.raises(ValueError, match="cannot lease 4 uids from a span of 3"):
        UidLease(4, 70000, 3, str(tmp_path))


# ---- two real processes judging at once ----

_WORKER = r"""
import json, os, sys
from sandbox import judge
from sandbox.backends.bwrap import BwrapBackend, BwrapConfig
role, uid_base, lock_dir, stop_file = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None, sys.argv[4]
be = BwrapBackend(BwrapConfig(workers=1, uid_base=uid_base, lock_dir=lock_dir))
print(json.dumps(be.uids), flush=True)
problem = json.loads(sys.argv[5])
if role == "bomb":
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    while not os.path.exists(stop_file):
        judge(problem, bomb, "python", backend=be)
else:
    sys.stdin.readline()  # "go": the bomb is running
    # A correct solution that starts child processes: each counts against RLIMIT_NPROC.
    code = ("import subprocess\nrc = sum(subprocess.run(['/bin/true']).returncode for _ in range(3))\n"
            "a, b = map(int, input().split())\nprint(a + b + rc)")
    print(json.dumps([judge(problem, code, "python", backend=be).verdict.value for _ in range(3)]), flush=True)
be.close()
"""


def _processes_of(uid: int) -> int:
    n = 0
    for d in glob.glob("/proc/[0-9]*"):
        try:
            n += os.stat(d).st_uid == uid
        except OSError:
            pass
    return n


def _bomb_and_solve(tmp_path, uid_base: int, lock_dirs: tuple[str, str]) -> tuple[list[int], list[int], list[str]]:
    """Run a fork-bombing process and a solving process side by side; their uids and the solver's verdicts."""
    stop = str(tmp_path / "stop")
    env = {**os.environ, "PYTHONPATH": REPO}

    def start(role, lock_dir):
        return subprocess.Popen(
            [sys.executable, "-c", _WORKER, role, str(uid_base), lock_dir, stop, json.dumps(ADD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )

    bomber = start("bomb", lock_dirs[0])
    solver = None
    try:
        bomb_uids = json.loads(bomber.stdout.readline())
        solver = start("solve", lock_dirs[1])
        solve_uids = json.loads(solver.stdout.readline())
        deadline = time.monotonic() + 30
        while _processes_of(bomb_uids[0]) < 16:  # the bomb is live: its uid holds many processes
            assert time.monotonic() < deadline and bomber.poll() is None, "the fork bomb never started"
            time.sleep(0.05)
        solver.stdin.write("go\n")
        solver.stdin.flush()
        verdicts = json.loads(solver.stdout.readline())
    finally:
        open(stop, "w").close()
        for p in (bomber, solver):
            if p is not None:
                p.stdin.close()
                p.wait(timeout=60)
    assert bomber.returncode == 0 and solver.returncode == 0
    return bomb_uids, solve_uids, verdicts


@pytest.mark.usefixtures("bwrap_backend")  # skips, with the reason, where bubblewrap is absent
def test_two_processes_get_disjoint_uids_and_a_fork_bomb_does_not_fail_the_other(tmp_path):
    bomb_uids, solve_uids, verdicts = _bomb_and_solve(tmp_path, 60000, ("", ""))  # the host-wide lock dir
    assert set(bomb_uids).isdisjoint(solve_uids), (bomb_uids, solve_uids)
    assert verdicts == ["AC"] * 3


@pytest.mark.usefixtures("bwrap_backend")
def test_control_without_shared_locks_the_same_uid_lets_the_bomb_fail_the_other(tmp_path):
    """The failure the lease prevents: with private lock dirs both processes take the same uid
    (a high base no other test uses), and the bomb's processes exhaust the solver's RLIMIT_NPROC."""
    a, b = tmp_path / "locks-a", tmp_path / "locks-b"
    bomb_uids, solve_uids, verdicts = _bomb_and_solve(tmp_path, 60900, (str(a), str(b)))
    assert bomb_uids == solve_uids == [60900]
    assert any(v != "AC" for v in verdicts), verdicts


# ---- close() ----


def test_close_removes_slot_cgroups_and_releases_uids(bwrap_backend):
    from sandbox.backends.bwrap import BwrapBackend, BwrapConfig

    be = BwrapBackend(BwrapConfig(workers=2))
    assert set(be.uids).isdisjoint(bwrap_backend.uids), "two backends in one process share no uid either"
    paths = [c.path for c in be._cgroups.values()]
    if None in paths:
        pytest.skip("no writable cgroup-v1 memory hierarchy here, so no slot cgroups to clean up")
    assert judge(ADD, "a, b = map(int, input().split())\nprint(a + b)", "python", backend=be).verdict is Verdict.AC
    assert all(os.path.isdir(p) for p in paths)
    uids, lock_dir = be.uids, be.config.lock_dir or default_lock_dir(be.config.cache_dir)
    be.close()
    assert not any(os.path.exists(p) for p in paths), paths
    for uid in uids:  # the locks are free again
        fd = os.open(lock_path(lock_dir, uid), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    with pytest.raises(SandboxError, match="closed"):
        with be.session():
            pass
    be.close()  # idempotent
