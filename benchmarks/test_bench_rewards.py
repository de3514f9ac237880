"""Reward throughput: math scoring and code judging, each against a plain loop in the same run.

Run: `pytest benchmarks/test_bench_rewards.py --benchmark-only`.
Numbers are ratios (`extra_info["ratio_vs_..."]`, time per batch / baseline time per batch),
never wall-clock thresholds.

- math: N_MATH (XRPO_BENCH_MATH_N, default 200) responses. Baseline: a plain in-process loop of
  math-verify parse+verify (no time limit, main thread only). Ours: `rewards.math.compute_score`
  (extraction + worker processes with a deadline), sequential and from a thread pool.
- code: N_CODE (XRPO_BENCH_CODE_N, default 16) Python submissions (half AC, half WA) in bwrap.
  Baseline: a plain loop of `sandbox.judge`. Ours: the `xrpo` reward manager's `run_single` over
  a DataProto batch, concurrently (max_concurrency = bwrap worker slots).
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox.backends.bwrap import bwrap_available
from xrpo_verl.rewards.math import MathRewardConfig
from xrpo_verl.rewards.math import compute_score as math_score

N_MATH = int(os.environ.get("XRPO_BENCH_MATH_N", 200))
N_CODE = int(os.environ.get("XRPO_BENCH_CODE_N", 16))
WORKERS = max(1, min(4, os.cpu_count() or 1))
MATH_CONFIG = MathRewardConfig(timeout_s=30.0, num_workers=WORKERS)
_BASE: dict[str, float] = {}


def _ratio(benchmark, base_key):
    mean = benchmark.stats.stats.mean
    if base_key in _BASE:
        benchmark.extra_info[f"ratio_vs_{base_key}"] = round(mean / _BASE[base_key], 3)
    return mean


@pytest.fixture(scope="module")
def math_items():
    """(response, gold, expected correct): integers, fractions, radicals, intervals; 2 in 3 correct."""
    forms = [
        (lambda i: (f"{i}", f"{i}")),
        (lambda i: (f"\\frac{{{i}}}{{{i + 1}}}", f"{i}/{i + 1}")),
        (lambda i: (f"{i}\\sqrt{{2}}", f"\\sqrt{{{2 * i * i}}}")),
        (lambda i: (f"({i}, {i + 3}]", f"({i},{i + 3}]")),
    ]
    items = []
    for i in range(1, N_MATH + 1):
        gold, pred = forms[i % len(forms)](i)
        correct = i % 3 != 0
        if not correct:
            pred = f"{i + 7}"
        items.append((f"Some reasoning about step {i}.\nSo the answer is \\boxed{{{pred}}}.", gold, correct))
    return items


def _plain_math(items):
    from math_verify import parse, verify

    return [
        verify(parse(f"${g}$", parsing_timeout=None), parse(r, parsing_timeout=None), timeout_seconds=None)
        for r, g, _ in items
    ]


def test_bench_math_plain_loop_baseline(benchmark, math_items):
    results = benchmark.pedantic(_plain_math, args=(math_items,), rounds=3, warmup_rounds=1)
    assert results == [c for _, _, c in math_items]
    _BASE["math_plain_loop"] = benchmark.stats.stats.mean
    benchmark.extra_info["items"] = len(math_items)


def test_bench_math_scorer_sequential(benchmark, math_items):
    def run():
        return [math_score("math/bench", r, g, None, MATH_CONFIG)["score"] for r, g, _ in math_items]

    results = benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    assert results == [float(c) for _, _, c in math_items]
    _ratio(benchmark, "math_plain_loop")


def test_bench_math_scorer_threaded(benchmark, math_items):
    def run():
        with ThreadPoolExecutor(WORKERS) as pool:
            return list(
                pool.map(lambda it: math_score("math/bench", it[0], it[1], None, MATH_CONFIG)["score"], math_items)
            )

    results = benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    assert results == [float(c) for _, _, c in math_items]
    benchmark.extra_info["threads"] = WORKERS
    _ratio(benchmark, "math_plain_loop")


# --- code ------------------------------------------------------------------------------------------


_NO_BWRAP = bwrap_available()  # None, or why bubblewrap cannot run here
needs_bwrap = pytest.mark.skipif(_NO_BWRAP is not None, reason=f"no sandbox backend: {_NO_BWRAP}")
PROBLEM = {
    "id": "sum", "judge": "livecodebench", "kind": "stdio", "fn_name": None,
    "tests": [{"input": f"{i} {i * 3}\n", "output": f"{i * 4}\n"} for i in range(4)],
    "time_limit_s": 2.0, "memory_mb": 256, "checker": None,
}  # fmt: skip
AC_CODE = "a, b = map(int, input().split())\nprint(a + b)\n"
WA_CODE = "a, b = map(int, input().split())\nprint(a * b)\n"


def _submissions():
    return [AC_CODE if i % 2 == 0 else WA_CODE for i in range(N_CODE)]


@needs_bwrap
def test_bench_code_plain_judge_loop_baseline(benchmark):
    from sandbox import judge

    def run():
        return [judge(PROBLEM, code, "python", backend="bwrap").verdict.value for code in _submissions()]

    verdicts = benchmark.pedantic(run, rounds=2, warmup_rounds=1)
    assert verdicts == ["AC" if i % 2 == 0 else "WA" for i in range(N_CODE)]
    _BASE["code_plain_loop"] = benchmark.stats.stats.mean
    benchmark.extra_info["submissions"] = N_CODE


@needs_bwrap
def test_bench_code_through_manager(benchmark, byte_tokenizer, response_batch):
    from omegaconf import OmegaConf

    from sandbox.backends.bwrap import BwrapConfig
    from xrpo_verl.rewards.manager import XrpoRewardManager

    tok = byte_tokenizer
    texts = [f"```python\n{code}```" for code in _submissions()]
    n = len(texts)
    batch = response_batch(tok, texts, ["code/bench"] * n, ["sum"] * n, [{"problem": json.dumps(PROBLEM)}] * n)
    slots = BwrapConfig().workers
    config = OmegaConf.create({"reward": {"reward_kwargs": {"max_concurrency": slots, "code": {"backend": "bwrap"}}}})
    manager = XrpoRewardManager(config, tok, None)

    def run():
        async def go():
            return await asyncio.gather(*(manager.run_single(batch[i : i + 1]) for i in range(len(batch))))

        return [o["reward_extra_info"]["verdict"] for o in asyncio.run(go())]

    verdicts = benchmark.pedantic(run, rounds=2, warmup_rounds=1)
    assert verdicts == ["AC" if i % 2 == 0 else "WA" for i in range(N_CODE)]
    benchmark.extra_info["max_concurrency"] = slots
    _ratio(benchmark, "code_plain_loop")
