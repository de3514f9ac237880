"""verl's own SandboxFusion client (verl/utils/reward_score/sandbox_fusion, unmodified) against
`python -m sandbox serve` on loopback, at verl's default concurrency (64 requests in flight), on
both backends: no request lost (an API or sandbox error), none mis-scored. Bounded: a few hundred
requests, short programs."""

from __future__ import annotations

import re
import statistics
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox.server import running_server

verl_sf = pytest.importorskip("verl.utils.reward_score.sandbox_fusion")
from verl.utils.reward_score.sandbox_fusion.utils import check_correctness  # noqa: E402

IN_FLIGHT = 64  # verl's default sandbox_fusion max_concurrent
TESTS = {"inputs": ["1 2\n", "20 22\n"], "outputs": ["3\n", "42\n"]}
PY = {
    "right": ("```python\na, b = map(int, input().split())\nprint(a + b)\n```", 1.0),
    "wrong": ("```python\nprint(3)\n```", 0.5),  # passes the first test only
    "crash": ("```python\nraise SystemExit(input() and 2)\n```", 0.0),
}
CPP = {
    "right": ('#include <cstdio>\nint main(){long a,b;scanf("%ld %ld",&a,&b);printf("%ld\\n",a+b);}', [True, True]),
    "abort": ("#include <cstdlib>\nint main(){std::abort();}", [-2, -2]),
}


def _histogram_quantile(metrics: str, q: float) -> str:
    """The upper bound of the /run_code latency bucket holding quantile q (Prometheus text)."""
    buckets = re.findall(r'sandbox_request_seconds_bucket\{endpoint="run_code",le="([^"]+)"\} (\d+)', metrics)
    total = int(buckets[-1][1])
    return next(le for le, n in buckets if int(n) >= q * total)


def _load(url: str, n_python: int, n_cpp: int) -> tuple[list[tuple[str, object, object, float]], float]:
    """Score n_python Python completions (compute_score) and n_cpp C++ ones (check_correctness)
    from 64 threads sharing verl's semaphore; (kind, expected, got, seconds) per completion."""
    gate = threading.Semaphore(IN_FLIGHT)
    run_code = url + "/run_code"

    def python(kind):
        t0 = time.monotonic()
        score, meta = verl_sf.compute_score(run_code, gate, 1024, PY[kind][0], TESTS, continuous=True)
        return kind, PY[kind][1], score, time.monotonic() - t0, meta

    def cpp(kind):
        t0 = time.monotonic()
        res, meta = check_correctness(run_code, TESTS, CPP[kind][0], 10, 1024, "cpp", gate)
        return kind, CPP[kind][1], res, time.monotonic() - t0, meta

    jobs = [(python, k) for k in list(PY) * (n_python // len(PY))] + [(cpp, k) for k in list(CPP) * (n_cpp // 2)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        out = list(pool.map(lambda job: job[0](job[1]), jobs))
    return out, time.monotonic() - t0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["bwrap", "docker"])
def test_verl_client_at_64_in_flight_loses_and_misscores_nothing(kind, request):
    request.getfixturevalue(f"{kind}_backend")  # skips with the reason when the backend is absent
    with running_server(kind, 4) as (url, _):
        results, wall = _load(url, n_python=120, n_cpp=4)
        with urllib.request.urlopen(url + "/metrics") as r:
            server_p99 = _histogram_quantile(r.read().decode(), 0.99)
    lost = [m for *_, meta in results for m in meta if m.get("status") in ("api_error", "sandbox_error")]
    wrong = [(k, want, got) for k, want, got, _, _ in results if want != got]
    seconds = sorted(r[3] for r in results)
    p99 = seconds[int(0.99 * (len(seconds) - 1))]
    n_requests = 2 * len(results)
    print(
        f"\n{kind}: {n_requests} requests, {IN_FLIGHT} in flight, {wall:.1f} s, lost {len(lost)}, "
        f"mis-scored {len(wrong)}, per-completion p50 {statistics.median(seconds):.2f} s p99 {p99:.2f} s, "
        f"server-side request p99 <= {server_p99} s"
    )
    assert lost == [] and wrong == []
