"""Planner simulation: where does a fixed rollout budget land? Pure numpy; never imports verl.

A pool of prompts has hidden pass rates p_q drawn from a Beta mixture (many near 0, many near 1,
some in between, as on a real math set). Each step samples B prompts; a rollout of prompt q is
a Bernoulli(p_q) reward. Three ways to spend rollouts are compared:

- uniform: n_avg rollouts per prompt (plain GRPO), budget B * n_avg.
- xrpo:    n_base per prompt, then R rounds of `xrpo_verl.planner.plan_round`
           (Pi_q = Delta_q + phi_q, capped at n_max), same budget B * n_avg.
- dapo:    dynamic sampling: generate batches of B prompts x n_avg, drop groups whose rewards
           all agree, repeat until B groups are kept (or max_gen_batches); every generated
           rollout is counted, so its cost per step is >= B * n_avg.

Measured per strategy: the share of generated rollouts that land in groups with non-zero
reward variance (the only groups with a GRPO gradient) and the RMSE of the per-prompt pass-rate
estimate rbar_q against the hidden p_q.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np

from xrpo_verl import planner
from xrpo_verl.config import PlannerConfig

Strategy = Literal["uniform", "xrpo", "dapo"]
STRATEGIES: tuple[str, ...] = ("uniform", "xrpo", "dapo")


@dataclass(frozen=True)
class PoolConfig:
    """Hidden pass rates: a mixture of Beta(a, b) components (our choice, shaped like DAPO-Math-17k)."""

    num_prompts: int = 4096
    """Q, prompts in the pool"""
    hard_frac: float = 0.4
    """share of near-0 prompts, p ~ Beta(0.3, 6)"""
    easy_frac: float = 0.3
    """share of near-1 prompts, p ~ Beta(6, 0.3); the rest are p ~ Beta(1.5, 1.5)"""

    def __post_init__(self) -> None:
        if self.num_prompts < 1:
            raise ValueError(f"num_prompts = {self.num_prompts!r} must be >= 1")
        if not (0 <= self.hard_frac and 0 <= self.easy_frac and self.hard_frac + self.easy_frac <= 1):
            raise ValueError(
                f"hard_frac = {self.hard_frac!r} and easy_frac = {self.easy_frac!r} must be >= 0 and sum to at most 1"
            )


@dataclass(frozen=True)
class SimConfig:
    """One simulated run; the XRPO planner is the trainer's own `PlannerConfig`."""

    batch_prompts: int = 512
    """B, prompts per step"""
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    """the XRPO planner (n_base, n_avg, rounds, n_max, alpha, lam, ...); uniform and dapo use its n_avg"""
    max_gen_batches: int = 10
    """dapo: most generation batches per step (verl's max_num_gen_batches)"""
    steps: int = 8
    """simulated training steps"""
    seed: int = 0
    """seed of the pool and the rewards"""

    def __post_init__(self) -> None:
        if self.batch_prompts < 1 or self.steps < 1 or self.max_gen_batches < 1:
            raise ValueError(
                f"batch_prompts, steps and max_gen_batches must be >= 1, got {self.batch_prompts}, "
                f"{self.steps}, {self.max_gen_batches}"
            )
        if not isinstance(self.planner, PlannerConfig):
            raise ValueError(f"planner must be a PlannerConfig, got {type(self.planner).__name__}")
        if self.planner.n_base < 2:
            raise ValueError(f"the simulation needs n_base >= 2, got {self.planner.n_base}")

    @property
    def n_avg(self) -> int:
        return self.planner.n_avg


@dataclass(frozen=True)
class StepStats:
    """What one strategy produced in one step."""

    rollouts: int  # generated rollouts
    informative_rollouts: int  # rollouts in groups with non-zero reward variance
    sq_error_sum: float  # sum over estimated prompts of (rbar_q - p_q)^2
    prompts_estimated: int  # prompts with an estimate


def sample_pool(cfg: PoolConfig, rng: np.random.Generator) -> np.ndarray:
    """Hidden pass rates p (Q,) in [0, 1]."""
    kind = rng.choice(3, size=cfg.num_prompts, p=[cfg.hard_frac, cfg.easy_frac, 1 - cfg.hard_frac - cfg.easy_frac])
    a = np.array([0.3, 6.0, 1.5])[kind]
    b = np.array([6.0, 0.3, 1.5])[kind]
    return rng.beta(a, b)


def expected_informative_share(p: np.ndarray, n: int) -> float:
    """Uniform allocation, analytically: 1 - E_q[p^n + (1-p)^n] (a group is mixed unless all agree)."""
    p = np.asarray(p, dtype=np.float64)
    return float(1.0 - np.mean(p**n + (1.0 - p) ** n))


def _stats(groups: list[np.ndarray], p: np.ndarray) -> StepStats:
    n = np.array([g.size for g in groups])
    mixed = np.array([g.min() != g.max() for g in groups])
    means = np.array([g.mean() for g in groups])
    return StepStats(int(n.sum()), int(n[mixed].sum()), float(((means - p) ** 2).sum()), len(groups))


def uniform_step(p: np.ndarray, cfg: SimConfig, rng: np.random.Generator) -> StepStats:
    groups = [(rng.random(cfg.n_avg) < pq).astype(np.float64) for pq in p]
    return _stats(groups, p)


def xrpo_step(p: np.ndarray, cfg: SimConfig, rng: np.random.Generator) -> StepStats:
    """Phase 0 with n_base each, then R rounds of `planner.plan_round`, as the trainer runs them."""
    pc = cfg.planner
    budgets = planner.round_budgets(p.size, pc.n_avg, pc.n_base, pc.rounds)
    groups = [(rng.random(pc.n_base) < pq).astype(np.float64) for pq in p]
    for budget in budgets[1:]:
        extra = planner.plan_round(groups, budget, pc).extra
        groups = [
            np.concatenate([g, (rng.random(k) < pq).astype(np.float64)]) if k else g
            for g, k, pq in zip(groups, extra, p)
        ]
    return _stats(groups, p)


def dapo_step(pool: np.ndarray, cfg: SimConfig, rng: np.random.Generator) -> StepStats:
    """DAPO dynamic sampling: generate B-prompt batches until B mixed groups are kept."""
    kept = rollouts = informative = 0
    sq, estimated = 0.0, 0
    for _ in range(cfg.max_gen_batches):
        p = pool[rng.choice(pool.size, size=cfg.batch_prompts, replace=False)]
        s = uniform_step(p, cfg, rng)
        rollouts += s.rollouts
        informative += s.informative_rollouts
        sq, estimated = sq + s.sq_error_sum, estimated + s.prompts_estimated
        kept += s.informative_rollouts // cfg.n_avg
        if kept >= cfg.batch_prompts:
            break
    return StepStats(rollouts, informative, sq, estimated)


def simulate(strategy: Strategy, sim: SimConfig = SimConfig(), pool_cfg: PoolConfig = PoolConfig()) -> dict:
    """Run `sim.steps` steps of one strategy on a pool seeded by `sim.seed`.

    Returns:
        {"strategy", "informative_share", "pass_rate_rmse", "rollouts_per_step", "budget_per_step"}.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    if sim.batch_prompts > pool_cfg.num_prompts:
        raise ValueError(f"batch_prompts = {sim.batch_prompts} exceeds the pool's {pool_cfg.num_prompts} prompts")
    pool = sample_pool(pool_cfg, np.random.default_rng(sim.seed))
    rng = np.random.default_rng(sim.seed + 1)  # same batches for every strategy
    total = StepStats(0, 0, 0.0, 0)
    for _ in range(sim.steps):
        p = pool[rng.choice(pool.size, size=sim.batch_prompts, replace=False)]
        if strategy == "uniform":
            s = uniform_step(p, sim, rng)
        elif strategy == "xrpo":
            s = xrpo_step(p, sim, rng)
        else:
            s = dapo_step(pool, sim, rng)
        total = StepStats(*(a + b for a, b in zip(asdict(total).values(), asdict(s).values())))
    return {
        "strategy": strategy,
        "informative_share": total.informative_rollouts / total.rollouts,
        "pass_rate_rmse": float(np.sqrt(total.sq_error_sum / total.prompts_estimated)),
        "rollouts_per_step": total.rollouts / sim.steps,
        "budget_per_step": sim.batch_prompts * sim.n_avg,
    }


def compare(sim: SimConfig = SimConfig(), pool_cfg: PoolConfig = PoolConfig()) -> dict[str, dict]:
    """All strategies on the same pool, plus ratios against uniform."""
    out = {s: simulate(s, sim, pool_cfg) for s in STRATEGIES}
    base = out["uniform"]
    for s in STRATEGIES:
        out[s]["share_ratio_vs_uniform"] = out[s]["informative_share"] / base["informative_share"]
        out[s]["rmse_ratio_vs_uniform"] = out[s]["pass_rate_rmse"] / base["pass_rate_rmse"]
        out[s]["cost_ratio_vs_uniform"] = out[s]["rollouts_per_step"] / base["rollouts_per_step"]
    return out


def lambda_sweep(
    lams: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1),
    sim: SimConfig = SimConfig(),
    pool_cfg: PoolConfig = PoolConfig(),
) -> dict[float, dict]:
    """XRPO against uniform for each lambda: share of rollouts in mixed groups and RMSE, as ratios."""
    out = {}
    base = simulate("uniform", sim, pool_cfg)
    for lam in lams:
        run = simulate("xrpo", replace(sim, planner=replace(sim.planner, lam=lam)), pool_cfg)
        run["share_ratio_vs_uniform"] = run["informative_share"] / base["informative_share"]
        run["rmse_ratio_vs_uniform"] = run["pass_rate_rmse"] / base["pass_rate_rmse"]
        out[lam] = run
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(compare(), indent=1))
    print(json.dumps({str(k): v for k, v in lambda_sweep().items()}, indent=1))
