"""Planner simulation: where does a fixed rollout budget land? Pure numpy; never imports verl.

A pool of prompts has hidden pass rates p_q drawn from a Beta mixture (many near 0, many near 1,
some in between, as on a real math set). Each step samples B prompts; a rollout of prompt q is
a Bernoulli(p_q) reward. Four ways to spend rollouts are compared:

- uniform: n_avg rollouts per prompt (plain GRPO), budget B * n_avg.
- xrpo:    n_base per prompt, then R rounds of `xrpo_verl.planner.plan_round`
           (Pi_q = Delta_q + phi_q, capped at n_max), same budget B * n_avg; each round waits
           until every rollout of the one before is back (the phased planner).
- xrpo_streaming: the same rounds, run by each prompt on its own: its next round is decided
           (`xrpo_verl.planner.StreamingRounds`) once its own rollouts are back, while the
           others still generate; same budget, no barrier across prompts.
- dapo:    dynamic sampling: generate batches of B prompts x n_avg, drop groups whose rewards
           all agree, repeat until B groups are kept (or max_gen_batches); every generated
           rollout is counted, so its cost per step is >= B * n_avg.

Generation time (`EngineConfig`, our model): an engine decodes up to C sequences at once and
starts a queued one the moment one finishes (continuous batching); a sequence takes time equal
to its length, whatever the occupancy (decoding is memory-bound), so an unfilled slot is lost
time. Lengths are long-tailed, L = min(exp(sigma * z), L_max) with z ~ N(0, 1), and a wrong
response runs fail_length_factor times longer. The unit is the median correct response's time.
A submission that waits for all of its rollouts (a planner round, a DAPO batch) lasts until its
slowest one is back: the step's generation time is the sum over submissions.

Measured per strategy: the share of generated rollouts that land in groups with non-zero
reward variance (the only groups with a GRPO gradient), the RMSE of the per-prompt pass-rate
estimate rbar_q against the hidden p_q, and the generation time of a step.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np

from xrpo_verl import planner
from xrpo_verl.config import PlannerConfig

Strategy = Literal["uniform", "xrpo", "xrpo_streaming", "dapo"]
STRATEGIES: tuple[str, ...] = ("uniform", "xrpo", "xrpo_streaming", "dapo")


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
class EngineConfig:
    """Generation-time model (module docstring); the values are our choice, not measured."""

    concurrency: int = 256
    """C, sequences the engine decodes at once"""
    length_sigma: float = 0.6
    """sigma of the log-normal response length (median 1)"""
    fail_length_factor: float = 1.3
    """a wrong response is this many times longer than a right one"""
    max_length: float = 4.0
    """L_max, lengths are cut here as max_response_length cuts a response"""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency = {self.concurrency!r} must be >= 1")
        if self.length_sigma < 0 or self.fail_length_factor <= 0 or self.max_length <= 0:
            raise ValueError(
                f"length_sigma = {self.length_sigma!r} must be >= 0, fail_length_factor = "
                f"{self.fail_length_factor!r} and max_length = {self.max_length!r} > 0"
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
    engine: EngineConfig = field(default_factory=EngineConfig)
    """the generation-time model"""
    streaming_rounds: int | None = None
    """xrpo_streaming: rounds each prompt runs after its base (None: the planner's R)"""
    steps: int = 8
    """simulated training steps"""
    seed: int = 0
    """seed of the pool and the rewards"""

    def __post_init__(self) -> None:
        if min(self.batch_prompts, self.steps, self.max_gen_batches) < 1:
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
    gen_time: float  # generation time of the step, in median-response units


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


def response_lengths(rewards: np.ndarray, eng: EngineConfig, rng: np.random.Generator) -> np.ndarray:
    """Decode time of each rollout (N,), from its reward (N,): long-tailed, longer when wrong."""
    rewards = np.asarray(rewards, dtype=np.float64)
    base = np.exp(eng.length_sigma * rng.standard_normal(rewards.size))
    return np.minimum(np.where(rewards > 0, base, base * eng.fail_length_factor), eng.max_length)


def makespan(lengths: np.ndarray, concurrency: int) -> float:
    """Time until the last of `lengths` (in submission order) is done on C slots refilled at once."""
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.size == 0:
        return 0.0
    slots = list(lengths[:concurrency])
    heapq.heapify(slots)
    for length in lengths[concurrency:]:
        heapq.heappush(slots, heapq.heappop(slots) + length)
    return float(max(slots))


def _stats(groups: list[np.ndarray], p: np.ndarray, gen_time: float) -> StepStats:
    n = np.array([g.size for g in groups])
    mixed = np.array([g.min() != g.max() for g in groups])
    means = np.array([g.mean() for g in groups])
    return StepStats(int(n.sum()), int(n[mixed].sum()), float(((means - p) ** 2).sum()), len(groups), gen_time)


def _generate(p: np.ndarray, counts, cfg: SimConfig, rng, len_rng) -> tuple[list[np.ndarray], float]:
    """One submission of counts[q] rollouts per prompt: rewards per prompt and the time it lasts."""
    groups = [(rng.random(int(k)) < pq).astype(np.float64) for pq, k in zip(p, counts)]
    flat = np.concatenate(groups) if groups else np.zeros(0)
    return groups, makespan(response_lengths(flat, cfg.engine, len_rng), cfg.engine.concurrency)


def uniform_step(p: np.ndarray, cfg: SimConfig, rng: np.random.Generator, len_rng=None) -> StepStats:
    groups, time = _generate(p, [cfg.n_avg] * p.size, cfg, rng, len_rng or rng)
    return _stats(groups, p, time)


def xrpo_step(p: np.ndarray, cfg: SimConfig, rng: np.random.Generator, len_rng=None) -> StepStats:
    """Phase 0 with n_base each, then R rounds of `planner.plan_round`, as the trainer runs them."""
    pc, len_rng = cfg.planner, len_rng or rng
    budgets = planner.round_budgets(p.size, pc.n_avg, pc.n_base, pc.rounds)
    groups, time = _generate(p, [pc.n_base] * p.size, cfg, rng, len_rng)
    for budget in budgets[1:]:
        extra = planner.plan_round(groups, budget, pc).extra
        new, round_time = _generate(p, extra, cfg, rng, len_rng)
        groups = [np.concatenate([g, r]) for g, r in zip(groups, new)]
        time += round_time
    return _stats(groups, p, time)


def streaming_step(p: np.ndarray, cfg: SimConfig, rng: np.random.Generator, len_rng=None) -> StepStats:
    """n_base each; each prompt then runs XRPO's rounds on its own (`planner.StreamingRounds`).

    An event simulation of the engine: rollouts queue in submission order and at most C decode
    at once. When the last outstanding rollout of a prompt comes back, the prompt's next round is
    decided from its rewards and queued while every other prompt is still generating.
    """
    pc, eng, len_rng = cfg.planner, cfg.engine, len_rng or rng
    if cfg.streaming_rounds is not None:
        pc = replace(pc, rounds=cfg.streaming_rounds)
    plan = planner.StreamingRounds(p.size, pc)
    known: list[list[float]] = [[] for _ in range(p.size)]
    queue: deque[tuple[int, float, float]] = deque()  # (prompt, reward, length), not yet started

    def submit(q: int, k: int) -> None:
        rewards = (rng.random(k) < p[q]).astype(np.float64)
        for r, length in zip(rewards, response_lengths(rewards, eng, len_rng)):
            queue.append((q, float(r), float(length)))

    for q in range(p.size):
        submit(q, pc.n_base)
    running: list[tuple[float, int, int, float]] = []  # (finish time, order, prompt, reward)
    now, order = 0.0, 0
    while queue or running:
        while queue and len(running) < eng.concurrency:
            q, r, length = queue.popleft()
            heapq.heappush(running, (now + length, order, q, r))
            order += 1
        now, _, q, r = heapq.heappop(running)
        known[q].append(r)
        if len(known[q]) == plan.issued[q]:
            for other, k in plan.back(q, known[q]).items():
                submit(other, k)
    return _stats([np.asarray(g) for g in known], p, now)


def dapo_step(pool: np.ndarray, cfg: SimConfig, rng: np.random.Generator, len_rng=None) -> StepStats:
    """DAPO dynamic sampling: generate B-prompt batches until B mixed groups are kept."""
    kept = rollouts = informative = 0
    sq, estimated, time = 0.0, 0, 0.0
    for _ in range(cfg.max_gen_batches):
        p = pool[rng.choice(pool.size, size=cfg.batch_prompts, replace=False)]
        s = uniform_step(p, cfg, rng, len_rng)
        rollouts += s.rollouts
        informative += s.informative_rollouts
        sq, estimated, time = sq + s.sq_error_sum, estimated + s.prompts_estimated, time + s.gen_time
        kept += s.informative_rollouts // cfg.n_avg
        if kept >= cfg.batch_prompts:
            break
    return StepStats(rollouts, informative, sq, estimated, time)


def simulate(strategy: Strategy, sim: SimConfig = SimConfig(), pool_cfg: PoolConfig = PoolConfig()) -> dict:
    """Run `sim.steps` steps of one strategy on a pool seeded by `sim.seed`.

    Returns:
        {"strategy", "informative_share", "pass_rate_rmse", "rollouts_per_step", "budget_per_step",
         "gen_time_per_step"}.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    if sim.batch_prompts > pool_cfg.num_prompts:
        raise ValueError(f"batch_prompts = {sim.batch_prompts} exceeds the pool's {pool_cfg.num_prompts} prompts")
    pool = sample_pool(pool_cfg, np.random.default_rng(sim.seed))
    rng = np.random.default_rng(sim.seed + 1)  # same batches for every strategy
    len_rng = np.random.default_rng(sim.seed + 2)  # lengths apart, so rewards do not depend on them
    total = StepStats(0, 0, 0.0, 0, 0.0)
    step_fn = {"uniform": uniform_step, "xrpo": xrpo_step, "xrpo_streaming": streaming_step}
    for _ in range(sim.steps):
        p = pool[rng.choice(pool.size, size=sim.batch_prompts, replace=False)]
        if strategy == "dapo":
            s = dapo_step(pool, sim, rng, len_rng)
        else:
            s = step_fn[strategy](p, sim, rng, len_rng)
        total = StepStats(*(a + b for a, b in zip(asdict(total).values(), asdict(s).values())))
    return {
        "strategy": strategy,
        "informative_share": total.informative_rollouts / total.rollouts,
        "pass_rate_rmse": float(np.sqrt(total.sq_error_sum / total.prompts_estimated)),
        "rollouts_per_step": total.rollouts / sim.steps,
        "budget_per_step": sim.batch_prompts * sim.n_avg,
        "gen_time_per_step": total.gen_time / sim.steps,
    }


def compare(sim: SimConfig = SimConfig(), pool_cfg: PoolConfig = PoolConfig()) -> dict[str, dict]:
    """All strategies on the same pool, plus ratios against uniform."""
    out = {s: simulate(s, sim, pool_cfg) for s in STRATEGIES}
    base = out["uniform"]
    for s in STRATEGIES:
        out[s]["share_ratio_vs_uniform"] = out[s]["informative_share"] / base["informative_share"]
        out[s]["rmse_ratio_vs_uniform"] = out[s]["pass_rate_rmse"] / base["pass_rate_rmse"]
        out[s]["cost_ratio_vs_uniform"] = out[s]["rollouts_per_step"] / base["rollouts_per_step"]
        out[s]["gen_time_ratio_vs_uniform"] = out[s]["gen_time_per_step"] / base["gen_time_per_step"]
    for s in ("xrpo_streaming",):
        out[s]["share_gain_kept"] = gain_kept(out, s, "informative_share")
        out[s]["rmse_gain_kept"] = gain_kept(out, s, "pass_rate_rmse")
    return out


def gain_kept(results: dict[str, dict], strategy: str, key: str) -> float:
    """(m_s - m_uniform) / (m_xrpo - m_uniform): the share of the phased planner's gain kept."""
    base, phased = results["uniform"][key], results["xrpo"][key]
    if phased == base:
        raise ValueError(f"the phased planner has no gain over uniform in {key}; nothing to keep")
    return (results[strategy][key] - base) / (phased - base)


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
