"""Nothing one submission leaves behind reaches the next one judged on the same warm worker.

`state_probe.py` runs as a submission: `plant` writes a mark into every writable directory it
finds by walking the whole file system, marks the directories it owns (mode, times, extended
attributes), creates SysV and POSIX IPC objects, a user-keyring key, and a detached daemon that
holds an abstract unix socket; `read`, in the next submission on the same worker, looks for all
of it. `both` plants and reads in one process, so a reader that cannot see a mark fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.backends import RunSpec
from sandbox.backends.bwrap import BwrapBackend, BwrapConfig, bwrap_available
from sandbox.backends.docker import DockerBackend, DockerConfig, docker_available
from sandbox.languages import PYTHON
from sandbox.verdict import Limits, RunStatus

PROBE = (Path(__file__).parent / "state_probe.py").read_bytes()
LIMITS = Limits(cpu_s=10, wall_s=30)


@pytest.fixture(params=["bwrap", "docker"])
def one_worker(request):
    """A backend with a single warm worker, so consecutive sessions share it."""
    if request.param == "bwrap":
        if reason := bwrap_available():
            pytest.skip(reason)
        be = BwrapBackend(BwrapConfig(workers=1))
    else:
        if reason := docker_available():
            pytest.skip(reason)
        be = DockerBackend(DockerConfig(workers=1))
    yield be
    be.close()


def _probe(be, mode: str) -> dict:
    with be.session() as s:
        # two runs: a one-test submission and a batch both go through the same path
        r = s.run_many(
            [RunSpec([PYTHON, "probe.py", mode], LIMITS, files={"probe.py": PROBE}), RunSpec(["true"])], True
        )
    assert r[0].status is RunStatus.OK, r[0].stderr.decode()[-2000:]
    return json.loads(r[0].stdout)


def test_next_submission_on_a_warm_worker_finds_nothing(one_worker):
    both = _probe(one_worker, "both")
    planted = set(both["found"])
    # the reader sees every kind of mark the planter leaves in its own process
    for kind in (
        "file in /tmp",
        "file in /dev/shm",
        "SysV shared memory",
        "SysV semaphore",
        "SysV message queue",
        "SysV message queue of another uid",
        "POSIX message queue",
        "abstract socket",
    ):
        assert kind in planted, (kind, both)
    assert any(f.startswith("process ") for f in planted)
    assert "file in /work" in planted  # the working directory is writable on both backends
    first = _probe(one_worker, "plant")
    assert {"/tmp", "/work", "/dev/shm"} <= set(first["files"]), first
    assert _probe(one_worker, "read") == {"found": []}
