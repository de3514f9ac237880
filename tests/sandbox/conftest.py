"""Sandbox test fixtures: one warm backend of each kind per session.

A backend's tests skip, with the reason, only when bubblewrap or a Docker daemon is genuinely
absent here. The Docker image is built once (about 20 s) and reused while its label hash matches.
"""

from __future__ import annotations

import pytest

from sandbox.backends.bwrap import BwrapBackend, BwrapConfig, bwrap_available
from sandbox.backends.docker import DockerBackend, DockerConfig, docker_available


@pytest.fixture(scope="session")
def bwrap_backend():
    reason = bwrap_available()
    if reason:
        pytest.skip(f"bubblewrap backend unavailable: {reason}")
    be = BwrapBackend(BwrapConfig(workers=4, spawn="exec"))  # a reward worker's path (test_bwrap_spawn: fork's)
    yield be
    be.close()


@pytest.fixture(scope="session")
def docker_backend():
    reason = docker_available()
    if reason:
        pytest.skip(f"docker backend unavailable: {reason}")
    be = DockerBackend(DockerConfig(workers=2))
    yield be
    be.close()


@pytest.fixture(params=["bwrap", "docker"])
def backend(request):
    return request.getfixturevalue(f"{request.param}_backend")


@pytest.fixture
def begun_steps(monkeypatch) -> list[int]:
    """The batch steps the in-sandbox runner announced it was starting (bwrap and Docker alike), in order."""
    from sandbox.backends.base import RunnerReport

    begun: list[int] = []
    feed = RunnerReport.feed

    def counting_feed(self, line):
        started = feed(self, line)
        if started:
            begun.append(self.begun)
        return started

    monkeypatch.setattr(RunnerReport, "feed", counting_feed)
    return begun
