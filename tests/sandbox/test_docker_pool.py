"""The Docker pool heals: a pooled container that died is replaced and the submission retried once."""

from __future__ import annotations

import pytest

from sandbox import Verdict, judge
from sandbox.backends.docker import DockerBackend, DockerConfig, docker_available

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
