"""Sandbox overheads against a bare `python3` subprocess measured in the same run.

Targets (issue 3): bwrap per run <= 1.5x bare; a Docker warm pool <= 3x bare per test (tests of one
submission run back to back in one exec); throughput grows with workers up to the cores.
Ratios are stored in each benchmark's extra_info; `make bench` prints them.
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
BATCH = 10  # tests per submission for the batched Docker measurement


def _bare() -> None:
    r = subprocess.run([PY, "-c", SOL], input=b"1 2\n", capture_output=True)
    assert r.stdout == b"3\n"


@pytest.fixture(scope="module")
def bare_s() -> float:
    """Median seconds of one bare run, measured now so every ratio shares the machine's load."""
    times = []
    for _ in range(30):
        t = time.perf_counter()
        _bare()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


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


def _spec() -> RunSpec:
    return RunSpec([PY, "-c", SOL], Limits(), stdin=b"1 2\n")


def test_bench_bare_python(benchmark, bare_s):
    benchmark(_bare)
    benchmark.extra_info["bare_median_s"] = bare_s


def test_bench_bwrap_single_run(benchmark, bwrap, bare_s):
    with bwrap.session() as s:
        r = benchmark(lambda: s.run(_spec()))
    assert r.stdout == b"3\n"
    benchmark.extra_info["ratio_vs_bare"] = benchmark.stats.stats.median / bare_s


def test_bench_docker_warm_pool_per_test(benchmark, docker_be, bare_s):
    with docker_be.session() as s:
        rs = benchmark(lambda: s.run_many([_spec() for _ in range(BATCH)], stop_on_failure=True))
    assert [r.stdout for r in rs] == [b"3\n"] * BATCH
    benchmark.extra_info["per_test_s"] = benchmark.stats.stats.median / BATCH
    benchmark.extra_info["ratio_vs_bare"] = benchmark.stats.stats.median / BATCH / bare_s


def test_bench_docker_single_exec(benchmark, docker_be, bare_s):
    with docker_be.session() as s:
        benchmark(lambda: s.run(_spec()))
    benchmark.extra_info["ratio_vs_bare"] = benchmark.stats.stats.median / bare_s


def _throughput(run_one, workers: int, n: int = 40) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: run_one(), range(n)))
    return n / (time.perf_counter() - t)


@pytest.mark.parametrize("workers", [1, 2])
def test_bench_throughput(benchmark, bwrap, workers):
    def bwrap_one():
        with bwrap.session() as s:
            s.run(_spec())

    rate = benchmark.pedantic(lambda: _throughput(bwrap_one, workers), rounds=2, iterations=1)
    benchmark.extra_info["bwrap_exec_per_s"] = rate
    benchmark.extra_info["bare_exec_per_s"] = _throughput(_bare, workers)
