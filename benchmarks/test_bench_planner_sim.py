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
    EngineConfig,
    PoolConfig,
    SimConfig,
    compare,
    lambda_sweep,
    simulate,
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
            "gen_time_ratio_vs_uniform",
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


SCHEDULES = {  # name: (strategy, rounds)
    "phased R=2": ("xrpo", 2),
    "phased R=1": ("xrpo", 1),
    "streaming R=2": ("xrpo_streaming", 2),
    "streaming R=1": ("xrpo_streaming", 1),
}


@pytest.mark.parametrize("concurrency", [256, 1024, 8192])
def test_bench_planner_schedules(benchmark, concurrency):
    """Phased against streaming rounds on an engine of C slots: quality and generation time against
    uniform on the same pool, batches and lengths (seeds 0-4); C = 8192 holds the whole step."""

    def run():
        out = []
        for seed in SEEDS:
            sim = replace(SIM, seed=seed, engine=EngineConfig(concurrency=concurrency))
            uni = simulate("uniform", sim, POOL)
            row = {}
            for name, (strategy, rounds) in SCHEDULES.items():
                r = simulate(strategy, replace(sim, planner=replace(sim.planner, rounds=rounds)), POOL)
                row[name] = {
                    "share": r["informative_share"] / uni["informative_share"],
                    "rmse": r["pass_rate_rmse"] / uni["pass_rate_rmse"],
                    "gen_time": r["gen_time_per_step"] / uni["gen_time_per_step"],
                }
            for name in SCHEDULES:  # the share of phased R = 2's gain over uniform kept
                for key in ("share", "rmse"):
                    row[name][f"{key}_kept"] = (row[name][key] - 1) / (row["phased R=2"][key] - 1)
            out.append(row)
        return out

    runs = benchmark.pedantic(run, rounds=1, iterations=1)
    for name in SCHEDULES:
        for key in ("share", "rmse", "gen_time", "share_kept", "rmse_kept"):
            vals = np.array([r[name][key] for r in runs])
            benchmark.extra_info[f"C={concurrency} {name} {key}"] = f"{vals.mean():.4f} +- {vals.std():.4f}"
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
