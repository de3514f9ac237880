"""Planner simulation at full size: where B * n_avg rollouts land, XRPO vs uniform vs DAPO filtering.

Run: `pytest benchmarks/test_bench_planner_sim.py --benchmark-only -s`. Quality figures are
ratios against uniform allocation on the same pool and batches (seeds 0-4), stored in
`extra_info` and printed; the timing is one XRPO planning step against one uniform step.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xrpo_verl.config import PlannerConfig
from xrpo_verl.eval.planner_sim import (
    STRATEGIES,
    PoolConfig,
    SimConfig,
    compare,
    lambda_sweep,
    uniform_step,
    xrpo_step,
)

SEEDS = range(5)
LAMS = (0.003, 0.01, 0.03, 0.1)
SIM = SimConfig(batch_prompts=512, planner=PlannerConfig(n_base=8, n_avg=16, rounds=2, n_max=32), steps=8)
POOL = PoolConfig(num_prompts=4096)
_BASE: dict[str, float] = {}


def test_bench_planner_sim_quality(benchmark):
    runs = benchmark.pedantic(lambda: [compare(replace(SIM, seed=s), POOL) for s in SEEDS], rounds=1, iterations=1)
    for strategy in STRATEGIES:
        for key in (
            "informative_share",
            "pass_rate_rmse",
            "share_ratio_vs_uniform",
            "rmse_ratio_vs_uniform",
            "cost_ratio_vs_uniform",
        ):
            vals = np.array([r[strategy][key] for r in runs])
            benchmark.extra_info[f"{strategy}.{key}"] = f"{vals.mean():.4f} +- {vals.std():.4f}"
    for k, v in benchmark.extra_info.items():
        print(f"{k:40s} {v}")
    assert all(r["xrpo"]["share_ratio_vs_uniform"] > 1 for r in runs)


def test_bench_planner_lambda_sweep(benchmark):
    """Share of rollouts in mixed groups and pass-rate RMSE against uniform, for each lambda."""
    runs = benchmark.pedantic(
        lambda: [lambda_sweep(LAMS, replace(SIM, seed=s), POOL) for s in SEEDS], rounds=1, iterations=1
    )
    for lam in LAMS:
        for key in ("share_ratio_vs_uniform", "rmse_ratio_vs_uniform"):
            vals = np.array([r[lam][key] for r in runs])
            benchmark.extra_info[f"lam={lam}.{key}"] = f"{vals.mean():.4f} +- {vals.std():.4f}"
    for k, v in benchmark.extra_info.items():
        print(f"{k:40s} {v}")


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    return np.clip(rng.beta(0.5, 0.5, SIM.batch_prompts), 0, 1)


def test_bench_uniform_step(benchmark, batch):
    benchmark(lambda: uniform_step(batch, SIM, np.random.default_rng(1)))
    _BASE["uniform"] = benchmark.stats.stats.mean


def test_bench_xrpo_step(benchmark, batch):
    benchmark(lambda: xrpo_step(batch, SIM, np.random.default_rng(1)))
    if "uniform" in _BASE:
        benchmark.extra_info["ratio_vs_uniform"] = round(benchmark.stats.stats.mean / _BASE["uniform"], 2)
        print("xrpo step / uniform step (sampling included):", benchmark.extra_info["ratio_vs_uniform"])
