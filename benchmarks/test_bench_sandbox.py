"""Sandbox overheads against a bare `python3` subprocess measured in the same run, and the
service (`python -m sandbox serve`) against the same backend called in-process.

Targets (issue 3): bwrap at most 1.5x bare per run and a Docker warm pool at most 3x, where a
run is one test of a submission (its tests run back to back in one sandbox: one bwrap or one
`docker exec` of the in-sandbox runner); throughput grows with workers up to the cores.
Every ratio pairs each timed round with a bare round of the same size measured just before it,
so both see the same load on a shared machine; the median of the per-round ratios is stored in
the benchmark's extra_info (`make bench` prints it, `--benchmark-json` keeps it).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox import Limits, RunSpec
from sandbox.backends.bwrap import BwrapBackend, BwrapConfig, bwrap_available
from sandbox.backends.docker import DockerBackend, DockerConfig, docker_available

PY = "/usr/bin/python3"
SOL = "a, b = map(int, input().split())\nprint(a + b)"
BATCH = 10  # tests per submission
ROUNDS = 15


def _bare() -> None:
    r = subprocess.run([PY, "-c", SOL], input=b"1 2\n", capture_output=True)
    assert r.stdout == b"3\n"


def _spec() -> RunSpec:
    return RunSpec([PY, "-c", SOL], Limits(), stdin=b"1 2\n")


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _paired(benchmark, target, runs_per_round: int) -> None:
    """Time target for ROUNDS rounds, each after a bare round of runs_per_round runs."""
    bare = []

    def setup():
        bare.append(_timed(lambda: [_bare() for _ in range(runs_per_round)]))

    benchmark.pedantic(target, setup=setup, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    timed = benchmark.stats.stats.data[-ROUNDS:]
    ratios = [t / b for t, b in zip(timed, bare[-ROUNDS:])]
    benchmark.extra_info["per_run_s"] = statistics.median(timed) / runs_per_round
    benchmark.extra_info["bare_per_run_s"] = statistics.median(bare) / runs_per_round
    benchmark.extra_info["ratio_vs_bare"] = statistics.median(ratios)
    benchmark.extra_info["ratio_p25_p75"] = [statistics.quantiles(ratios, n=4)[i] for i in (0, 2)]


@pytest.fixture(scope="module")
def bwrap():
    if reason := bwrap_available():
        pytest.skip(reason)
    be = BwrapBackend(BwrapConfig(workers=2))
    yield be
    be.close()  # removes the slot cgroups and releases the leased uids


@pytest.fixture(scope="module")
def docker_be():
    if reason := docker_available():
        pytest.skip(reason)
    be = DockerBackend(DockerConfig(workers=2))
    yield be
    be.close()


def _submission(session) -> None:
    rs = session.run_many([_spec() for _ in range(BATCH)], stop_on_failure=True)
    assert [r.stdout for r in rs] == [b"3\n"] * BATCH, [r.message for r in rs]


def test_bench_bwrap_per_test(benchmark, bwrap):
    """The target: one test of a submission, its BATCH tests in one bwrap."""
    with bwrap.session() as s:
        _paired(benchmark, lambda: _submission(s), BATCH)


def test_bench_bwrap_single_run(benchmark, bwrap):
    """One bwrap for one run: what a compilation, a checker or a one-test problem pays."""
    with bwrap.session() as s:
        _paired(benchmark, lambda: s.run(_spec()), 1)


def test_bench_docker_warm_pool_per_test(benchmark, docker_be):
    with docker_be.session() as s:
        _paired(benchmark, lambda: _submission(s), BATCH)


def test_bench_docker_single_exec(benchmark, docker_be):
    with docker_be.session() as s:
        _paired(benchmark, lambda: s.run(_spec()), 1)


PROBLEM = {
    "id": "a-plus-b",
    "judge": "livecodebench",
    "kind": "stdio",
    "time_limit_s": 2,
    "memory_mb": 256,
    "tests": [{"input": "1 2\n", "output": "3"}] * BATCH,
}


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_bench_judge_per_test(benchmark, request, backend):
    """End to end: `judge()` of a Python submission with BATCH tests (its syntax check included),
    per test, against BATCH bare runs."""
    from sandbox import Verdict, judge

    be = request.getfixturevalue({"bwrap": "bwrap", "docker": "docker_be"}[backend])

    def run():
        assert judge(PROBLEM, SOL, "python", backend=be).verdict is Verdict.AC

    _paired(benchmark, run, BATCH)


TINY = {**PROBLEM, "tests": [{"input": "1 2\n", "output": "3"}] * 4}  # the tiny code task's shape


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_bench_judge_fork_vs_exec(benchmark, request, monkeypatch, backend):
    """`judge()` of a 4-test Python submission with its tests forked from the runner
    (`fork_python`, the default) against the same with a new interpreter per test, paired per
    round: extra_info["ratio_vs_exec"] is the fork server's share of exec's time."""
    from sandbox import Verdict, judge

    be = request.getfixturevalue({"bwrap": "bwrap", "docker": "docker_be"}[backend])

    def judged(fork: bool) -> None:
        monkeypatch.setattr(be.config, "fork_python", fork)
        assert judge(TINY, SOL, "python", backend=be).verdict is Verdict.AC

    _against(benchmark, lambda: judged(True), lambda: judged(False), "exec", "fork")


@pytest.mark.parametrize("tests", [4, 20])
def test_bench_bwrap_stop_at_graded_wa(benchmark, bwrap, monkeypatch, tests):
    """`judge()` of a Python submission that is wrong on test 0 (WA, the commonest failure of an RL
    policy): the host grades each output as it comes back and ends the batch at the WA, against the
    runner going on through every test (before: it stopped only at a failed run), paired per round
    (extra_info["ratio_vs_run_on"])."""
    from sandbox import Verdict, judge
    from sandbox.backends.bwrap import BwrapSession

    problem = {**PROBLEM, "tests": [{"input": "1 2\n", "output": "3"}] * tests}
    wrong = SOL.replace("a + b", "a - b")
    exec_batch = BwrapSession._exec_batch

    def judged(stop_at_wa: bool) -> None:
        def run(self, outer, job, accept=None):
            return exec_batch(self, outer, job, accept if stop_at_wa else None)

        monkeypatch.setattr(BwrapSession, "_exec_batch", run)
        assert judge(problem, wrong, "python", backend=bwrap).verdict is Verdict.WA

    _against(benchmark, lambda: judged(True), lambda: judged(False), "run_on", "stop_at_wa")


def _against(benchmark, target, baseline, base_name: str, name: str) -> None:
    """Time target for ROUNDS rounds, each after one run of baseline; extra_info["ratio_vs_<base>"]
    is the median of the per-round ratios (target's share of baseline's time)."""
    base = []
    benchmark.pedantic(
        target, setup=lambda: base.append(_timed(baseline)), rounds=ROUNDS, iterations=1, warmup_rounds=1
    )
    timed = benchmark.stats.stats.data[-ROUNDS:]
    ratios = [t / b for t, b in zip(timed, base[-ROUNDS:])]
    benchmark.extra_info[f"{base_name}_per_submission_s"] = statistics.median(base)
    benchmark.extra_info[f"{name}_per_submission_s"] = statistics.median(timed)
    benchmark.extra_info[f"ratio_vs_{base_name}"] = statistics.median(ratios)
    benchmark.extra_info["ratio_p25_p75"] = [statistics.quantiles(ratios, n=4)[i] for i in (0, 2)]


def test_bench_bwrap_spawn_exec_vs_fork(benchmark, bwrap, monkeypatch):
    """`judge()` of a 4-test submission from a process holding 512 MiB (a reward worker's size):
    bwrap started through the exec chain (`BwrapConfig.spawn="exec"`) against a fork of the
    judging process, paired per round (extra_info["ratio_vs_fork"])."""
    from sandbox import Verdict, judge

    ballast = bytearray(512 << 20)
    ballast[:: 1 << 12] = b"1" * len(ballast[:: 1 << 12])  # resident, as a worker's heap is

    def judged(spawn: str) -> None:
        monkeypatch.setattr(bwrap.config, "spawn", spawn)
        assert judge(TINY, SOL, "python", backend=bwrap).verdict is Verdict.AC

    _against(benchmark, lambda: judged("exec"), lambda: judged("fork"), "fork", "exec")
    del ballast


def _rate(run_one, workers: int, n: int) -> float:
    """Calls of run_one per second from `workers` threads."""
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: run_one(), range(n)))
    return n / (time.perf_counter() - t)


@pytest.mark.parametrize("workers", [1, 2])
def test_bench_bwrap_throughput(benchmark, bwrap, workers):
    """Tests per second with `workers` concurrent submissions of BATCH tests, against bare
    python3 runs from as many threads; scaling is the 2-worker rate over the 1-worker one."""

    def submission():
        with bwrap.session() as s:
            _submission(s)

    subs, sandboxed, bare = 4 * workers, [], []

    def one_round():
        sandboxed.append(_rate(submission, workers, subs) * BATCH)
        bare.append(_rate(_bare, workers, subs * BATCH))

    benchmark.pedantic(one_round, rounds=3, iterations=1)
    benchmark.extra_info["bwrap_tests_per_s"] = statistics.median(sandboxed)
    benchmark.extra_info["bare_runs_per_s"] = statistics.median(bare)
    benchmark.extra_info["ratio_vs_bare"] = statistics.median(b / t for b, t in zip(bare, sandboxed))


# ---- the service: `python -m sandbox serve` against the same backend in-process ----

SERVICE_WORKERS = 2  # the cores here: the server's pool and the in-process backend alike
RUN_CODE = {"code": SOL, "language": "python", "stdin": "1 2\n", "run_timeout": 5, "memory_limit_MB": 256}


def _post_run_code(url: str) -> None:
    import json
    import urllib.request

    req = urllib.request.Request(url + "/run_code", json.dumps(RUN_CODE).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        body = json.loads(r.read())
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "3\n", body


def _in_process(backend) -> None:
    from sandbox.runcode import run_code

    body = run_code(backend, SOL, "python", stdin="1 2\n", run_timeout=5, memory_limit_mb=256)
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "3\n", body


def _load_round(call, in_flight: int, n: int) -> dict:
    """n calls from in_flight threads: requests/s and latency quantiles."""
    latencies: list[float] = []

    def one(_):
        t = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(one, range(n)))
    wall = time.perf_counter() - t0
    latencies.sort()
    return {"rps": n / wall, "p50": latencies[n // 2], "p99": latencies[min(n - 1, int(0.99 * n))]}


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def service(request):
    """(url, in-process backend of the same kind and size)."""
    from sandbox.server import running_server

    kind = request.param
    if reason := (bwrap_available() if kind == "bwrap" else docker_available()):
        pytest.skip(reason)
    config = BwrapConfig if kind == "bwrap" else DockerConfig
    backend = (BwrapBackend if kind == "bwrap" else DockerBackend)(config(workers=SERVICE_WORKERS))
    with running_server(kind, SERVICE_WORKERS) as (url, _):
        yield url, backend
    backend.close()


@pytest.mark.parametrize("in_flight", [1, 8, 64])
def test_bench_service_vs_in_process(benchmark, service, in_flight):
    """/run_code requests from `in_flight` client threads against the same programs run through
    the same backend in-process (run_code()) from as many threads, paired round by round.
    Ratios: service requests/s over in-process calls/s, and service latency over in-process."""
    url, backend = service
    n = max(16, 2 * in_flight)
    pairs = []

    def setup():
        pairs.append([_load_round(lambda: _in_process(backend), in_flight, n)])

    def target():
        pairs[-1].append(_load_round(lambda: _post_run_code(url), in_flight, n))

    benchmark.pedantic(target, setup=setup, rounds=3, iterations=1, warmup_rounds=0)
    for key in ("rps", "p50", "p99"):
        benchmark.extra_info[f"service_{key}"] = statistics.median(s[key] for _, s in pairs)
        benchmark.extra_info[f"in_process_{key}"] = statistics.median(p[key] for p, _ in pairs)
        benchmark.extra_info[f"ratio_{key}"] = statistics.median(s[key] / p[key] for p, s in pairs)
