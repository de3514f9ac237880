"""A busy host never turns a correct program into CE or TLE, and a program that waits forever is
still TLE (docs/sandbox.md, "Verdict rules"): the starvation rules of `judges/classify.py` and the
judge's one rerun with a longer wall clock, then real judging beside busy processes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import time

import pytest

from sandbox import Limits, RunResult, RunStatus, Verdict, judge
from sandbox.judges.classify import STARVED_WALL_FACTOR, compile_starved, starved
from sandbox.languages import COMPILE_LIMITS

AB = {
    "id": "a-plus-b",
    "judge": "livecodebench",
    "kind": "stdio",
    "time_limit_s": 1,
    "memory_mb": 256,
    "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 7\n", "output": "12\n"}],
}
CPP_AB = "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}"
CPP_SLEEP = "#include <unistd.h>\nint main(){ for(;;) sleep(1000); }"
LIMITS = Limits(cpu_s=1, wall_s=3)  # what scoring.test_limits gives AB


def _run(status=RunStatus.OK, cpu_s=0.01, wall_s=0.02, stdout=b""):
    return RunResult(status, exit_code=0 if status is RunStatus.OK else None, stdout=stdout, cpu_s=cpu_s, wall_s=wall_s)


def test_starved_means_computing_under_the_cpu_limit_when_the_wall_clock_fired():
    assert starved(_run(RunStatus.TIMEOUT, cpu_s=0.5, wall_s=3.0), LIMITS)  # a sixth of a CPU: the host's
    assert not starved(_run(RunStatus.TIMEOUT, cpu_s=0.02, wall_s=3.0), LIMITS)  # sleeping: the program's
    assert not starved(_run(RunStatus.TIMEOUT, cpu_s=0.95, wall_s=3.0), LIMITS)  # at its CPU limit: TLE
    assert not starved(_run(RunStatus.OK, cpu_s=0.5, wall_s=3.0), LIMITS)
    # a compiler has nothing to wait on: stopped by the wall clock well under its CPU cap is the host
    assert compile_starved(_run(RunStatus.TIMEOUT, cpu_s=1.0, wall_s=20.0), COMPILE_LIMITS)
    assert compile_starved(_run(RunStatus.TIMEOUT, cpu_s=0.0, wall_s=20.0), COMPILE_LIMITS)
    assert not compile_starved(_run(RunStatus.TIMEOUT, cpu_s=9.0, wall_s=20.0), COMPILE_LIMITS)
    assert not compile_starved(_run(RunStatus.EXITED, cpu_s=0.1, wall_s=0.2), COMPILE_LIMITS)


class ScriptedBackend:
    """Answers each session's batch with the next scripted results (a compile, then tests) and
    records the RunSpecs it was given: the judge's decisions without a process, so exactly."""

    name = "scripted"

    def __init__(self, *batches):
        self.batches, self.specs = list(batches), []

    @contextlib.contextmanager
    def session(self):
        yield self

    def run_many(self, specs, stop_on_failure=False, accept=None):
        self.specs.append(list(specs))
        return self.batches.pop(0)


def test_a_starved_test_runs_again_with_a_longer_wall_clock_from_where_it_stopped():
    be = ScriptedBackend(
        [_run(), _run(stdout=b"3\n"), _run(RunStatus.TIMEOUT, cpu_s=0.6, wall_s=3.0)],
        [_run(), _run(cpu_s=0.9, wall_s=6.0, stdout=b"12\n")],
    )
    r = judge(AB, CPP_AB, "cpp", backend=be)
    assert r.verdict is Verdict.AC and r.passed == 2, r.to_dict()
    first, again = be.specs
    assert [s.limits.wall_s for s in first[1:]] == [3, 3]
    # compiled again (a new session), then only test 1, with the longer wall clock
    assert len(again) == 2 and again[1].stdin == b"5 7\n"
    assert again[1].limits == dataclasses.replace(LIMITS, wall_s=3 * STARVED_WALL_FACTOR, memory_mb=256 + 64)


def test_the_longer_wall_clock_is_given_once_and_a_sleeper_gets_none():
    starving = [_run(), _run(RunStatus.TIMEOUT, cpu_s=0.6, wall_s=3.0)]
    be = ScriptedBackend(starving, [_run(), _run(RunStatus.TIMEOUT, cpu_s=0.7, wall_s=15.0)])
    assert judge(AB, CPP_AB, "cpp", backend=be).verdict is Verdict.TLE and len(be.specs) == 2
    be = ScriptedBackend([_run(), _run(RunStatus.TIMEOUT, cpu_s=0.01, wall_s=3.0)])
    assert judge(AB, CPP_SLEEP, "cpp", backend=be).verdict is Verdict.TLE and len(be.specs) == 1


def test_a_compile_the_wall_clock_stopped_is_a_sandbox_failure_not_ce(backend):
    """A real compile given far too little wall clock stands in for a host too busy to compile."""
    tiny_wall = dataclasses.replace(COMPILE_LIMITS, wall_s=0.05)
    r = judge(AB, CPP_AB, "cpp", backend=backend, compile_limits=tiny_wall)
    assert r.verdict is Verdict.SE and "too busy to compile" in r.message, r.to_dict()


def test_run_code_answers_a_starved_compile_as_a_sandbox_error():
    """SandboxFusion's /run_code shape: SandboxError, which RemoteJudge raises as SE, not a failed compile."""
    from sandbox.runcode import run_code

    be = ScriptedBackend([_run(RunStatus.TIMEOUT, cpu_s=0.3, wall_s=20.0), _run()])
    assert run_code(be, CPP_AB, "cpp", "1 2\n")["status"] == "SandboxError"
    be = ScriptedBackend([_run(RunStatus.TIMEOUT, cpu_s=9.5, wall_s=20.0), _run()])  # it used its CPU: a failure
    assert run_code(be, CPP_AB, "cpp", "1 2\n")["status"] == "Failed"


def _cpu_pressure() -> float | None:
    """The host's CPU pressure, `some avg10` of /proc/pressure/cpu (None where PSI is off)."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split()[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


@pytest.fixture
def busy_host():
    """Busy processes beside the judge, at the judge's own priority, for the test's duration."""
    n = min(4, 2 * (os.cpu_count() or 1))
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        deadline = time.monotonic() + 5  # until the kernel counts tasks waiting for a CPU
        while (_cpu_pressure() or 100) < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def test_loaded_host_correct_program_is_ac_and_waiting_forever_is_still_tle(backend, busy_host):
    r = judge(AB, CPP_AB, "cpp", backend=backend)
    assert r.verdict is Verdict.AC, r.to_dict()  # neither CE (compile) nor TLE (runs)
    r = judge(AB, CPP_SLEEP, "cpp", backend=backend)
    assert r.verdict is Verdict.TLE and len(r.tests) == 1, r.to_dict()
    assert r.tests[0].wall_s < LIMITS.wall_s + 2, "a sleeper is stopped by the first wall clock, not given more"
    r = judge(AB, "while True:\n    pass", "python", backend=backend)
    assert r.verdict is Verdict.TLE, r.to_dict()  # an endless loop, however starved, ends at its CPU limit
