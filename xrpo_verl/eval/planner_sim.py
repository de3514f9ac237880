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
from functools import partial
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
    released_at_close: int = 0  # streaming: rollouts held back until the last prompt decided round R


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
    return replace(_stats([np.asarray(g) for g in known], p, now), released_at_close=plan.released_at_close)


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
        "released_at_close_per_step": total.released_at_close / sim.steps,
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


# --------------------------------------------------------------------------------------------
# Which prompts a step trains (issue 46): selection over a dataset visited for several epochs.
#
# The dataset's prompts have hidden pass rates p_q(t) that move while the policy learns:
#     logit p_q(t+1) = logit p_q(t) + mu / S + (sigma / sqrt(S)) z_q,  z_q ~ N(0, 1)
# over a run of S steps (mu, sigma: the run's total drift in logits, our choice; a visit's history
# goes stale by exactly this). A sampler walks the dataset in a fresh random order each epoch, as
# verl's dataloader does. Every strategy spends B * n rollouts a step except Pilot-Commit, whose
# code generates until B prompts pass its filter; every generated rollout is counted.
#
# - uniform:        the next B prompts, n each (GRPO).
# - xrpo:           the next B prompts, XRPO's phased planner (n_base = n/2, one round).
# - xrpo_floor:     the same with the fail floor f = n (`planner.fail_floor_shares`): a prompt
#                   with no success after the base phase is topped up to n first.
# - pilot:          a pilot inside the step: the next P*B prompts get k rollouts each; what is left
#                   of B * n goes by Pi_q (`planner.plan_round`) to the prompts whose pilot was
#                   mixed (none to all-pass or all-fail ones).
# - pilot_commit:   Pilot-Commit's released code at our size: each generation round pilots B new
#                   prompts with k_e rollouts, keeps those whose pilot mean lies in [lo, 1 - hi] in a
#                   buffer (at most 4 steps old), and commits n_c rollouts to buffered prompts; a
#                   trained group is its k_e + n_c rollouts; rounds go on until B groups are trained.
# - skip:           GRESO's rule: the sampler skips a prompt whose last group was all-pass or all-fail
#                   with probability 0.8, until B are taken or C*B looked at (then the skipped fill in).
# - history:        ours: the next C*B prompts, train the B with the largest I_q(n) from
#                   `planner.PromptHistory` (discounted Beta posterior), n each.
# - history_xrpo:   ours: history's choice, then XRPO's planner inside the step.
# - oracle:         the next C*B prompts, the B with the largest true 1 - p^n - (1-p)^n.
#
# Measured: the share of generated rollouts that land in trained groups with mixed rewards, the
# mixed groups a step, rollouts a step and generation passes a step (each pass waits on its last
# rollout: a round, a pilot, a DAPO batch), and the rare successes a step: trained successes on
# prompts whose pass rate is then below RARE_P, the lucky solves a hard prompt is learned from
# (the pass rates here drift the same way whatever is trained, so this counts chances, not learning).
# --------------------------------------------------------------------------------------------

SELECTION_STRATEGIES: tuple[str, ...] = (
    "uniform",
    "xrpo",
    "xrpo_floor",
    "pilot",
    "pilot_commit",
    "skip",
    "history",
    "history_xrpo",
    "oracle",
)
RARE_P = 0.1  # a pass rate below which a success is a rare one (our choice)


@dataclass(frozen=True)
class SelectionConfig:
    """One multi-epoch run of the selection simulation (module notes above)."""

    dataset_prompts: int = 4096
    """Q, prompts in the training set"""
    batch_prompts: int = 8
    """B, prompts trained a step"""
    rollouts: int = 8
    """n, GRPO's rollouts per prompt; the budget is B * n a step"""
    steps: int = 50
    """S, training steps"""
    drift_mean: float = 1.0
    """mu, the run's mean shift of logit p (the policy learns; our choice)"""
    drift_sd: float = 1.0
    """sigma, the run's per-prompt spread of that shift (our choice)"""
    candidates: float = 3.0
    """C, prompts considered per trained prompt (skip, history, history_xrpo, oracle)"""
    half_life: float = 0.0
    """history's half-life in steps (0: one epoch of uniform sampling, Q / B)"""
    pilot_prompts: float = 2.0
    """pilot: prompts piloted per trained prompt"""
    pilot_rollouts: int = 2
    """pilot: k, rollouts of each piloted prompt"""
    pc_explore: int = 2
    """pilot_commit: k_e, pilot rollouts (its n_explore)"""
    pc_commit: int = 6
    """pilot_commit: n_c, committed rollouts (its rollout.n); k_e + n_c is a trained group"""
    pc_lower: float = 0.25
    """pilot_commit: a pilot mean below this is too hard (its diversity_threshold_lower)"""
    pc_upper: float = 0.25
    """pilot_commit: a pilot mean above 1 - this is too easy (its diversity_threshold_upper)"""
    pc_max_off_steps: int = 4
    """pilot_commit: oldest buffered pilot, in steps (its buffer_max_off_steps)"""
    skip_prob: float = 0.8
    """skip: chance of skipping a prompt whose last group agreed"""
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.dataset_prompts, self.batch_prompts, self.steps) < 1 or self.rollouts < 2:
            raise ValueError("need dataset_prompts, batch_prompts, steps >= 1 and rollouts >= 2")
        if self.candidates * self.batch_prompts > self.dataset_prompts:
            raise ValueError(
                f"C * B = {self.candidates * self.batch_prompts} exceeds the {self.dataset_prompts} prompts"
            )
        if self.candidates < 1 or self.pilot_prompts < 1:
            raise ValueError("candidates and pilot_prompts must be >= 1")
        if self.pilot_prompts * self.batch_prompts * self.pilot_rollouts > self.batch_prompts * self.rollouts:
            raise ValueError("the pilot alone exceeds the step's budget B * n")
        if self.pilot_rollouts < 2 or self.pc_explore < 1 or self.pc_commit < 1:
            raise ValueError("pilot_rollouts must be >= 2, pc_explore and pc_commit >= 1")


class _Sampler:
    """The dataset in a fresh random order each epoch; `take(k)` the next k prompt ids."""

    def __init__(self, q: int, rng: np.random.Generator) -> None:
        self.q, self.rng, self.order, self.pos, self.epochs = q, rng, rng.permutation(q), 0, 0

    def take(self, k: int) -> np.ndarray:
        out = []
        while k:
            if self.pos == self.q:
                self.order, self.pos, self.epochs = self.rng.permutation(self.q), 0, self.epochs + 1
            got = self.order[self.pos : self.pos + k]
            out.append(got)
            self.pos += got.size
            k -= got.size
        return np.concatenate(out)


def _mixed_prob(p: np.ndarray, n: int) -> np.ndarray:
    return 1.0 - p**n - (1.0 - p) ** n


class _Run:
    """State of one selection run: pass rates, sampler, history, counters."""

    def __init__(self, cfg: SelectionConfig, pool: PoolConfig) -> None:
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        p0 = np.clip(sample_pool(replace(pool, num_prompts=cfg.dataset_prompts), rng), 1e-4, 1 - 1e-4)
        self.logit = np.log(p0 / (1 - p0))
        self.drift_rng = np.random.default_rng(cfg.seed + 1)  # the same drift for every strategy
        self.sampler = _Sampler(cfg.dataset_prompts, np.random.default_rng(cfg.seed + 2))
        self.rng = np.random.default_rng(cfg.seed + 3)  # rewards and choices
        half_life = cfg.half_life or cfg.dataset_prompts / cfg.batch_prompts
        self.history = planner.PromptHistory(cfg.dataset_prompts, half_life=half_life)
        self.last_mixed = np.ones(cfg.dataset_prompts, dtype=bool)  # skip: unvisited counts as mixed
        self.buffer: list[tuple[int, np.ndarray, int]] = []  # pilot_commit: (prompt, pilot rewards, step)
        self.step = 0
        self.rollouts = self.informative = self.groups_mixed = self.passes = self.rare_successes = 0

    @property
    def p(self) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logit))

    def advance(self) -> None:
        c, s = self.cfg, self.cfg.steps
        self.logit += c.drift_mean / s + c.drift_sd / np.sqrt(s) * self.drift_rng.standard_normal(self.logit.size)
        self.step += 1

    def rewards(self, q: int, k: int) -> np.ndarray:
        return (self.rng.random(k) < self.p[q]).astype(np.float64)

    def train(self, groups: dict[int, np.ndarray], generated: int, passes: int) -> None:
        """Count a step whose trained groups are `groups` and that generated `generated` rollouts."""
        idx = np.fromiter(groups, dtype=np.int64, count=len(groups))
        mixed = np.array([g.min() != g.max() for g in groups.values()], dtype=bool)
        sizes = np.array([g.size for g in groups.values()])
        self.rollouts += generated
        self.informative += int(sizes[mixed].sum())
        self.groups_mixed += int(mixed.sum())
        self.passes += passes
        succ = np.array([g.sum() for g in groups.values()])
        self.rare_successes += int(succ[self.p[idx] < RARE_P].sum())
        self.history.record(idx, succ, sizes, self.step)
        self.last_mixed[idx] = mixed


def _planned_groups(run: _Run, qs: np.ndarray, fail_floor: int = 0) -> tuple[dict[int, np.ndarray], int]:
    """XRPO's phased planner over prompts `qs`: n_base = n/2, one round of the rest by Pi_q."""
    n = run.cfg.rollouts
    pc = PlannerConfig(n_base=max(2, n // 2), n_avg=n, rounds=1, n_max=2 * n, fail_floor=fail_floor)
    groups = [run.rewards(q, pc.n_base) for q in qs]
    extra = planner.plan_round(groups, qs.size * (n - pc.n_base), pc).extra
    return {int(q): np.concatenate([g, run.rewards(q, k)]) for q, g, k in zip(qs, groups, extra)}, 2


def _step_uniform(run: _Run) -> None:
    c = run.cfg
    qs = run.sampler.take(c.batch_prompts)
    run.train({int(q): run.rewards(q, c.rollouts) for q in qs}, c.batch_prompts * c.rollouts, 1)


def _step_xrpo(run: _Run, floor: bool = False) -> None:
    """XRPO's planner; `floor`: with the fail floor at n."""
    qs = run.sampler.take(run.cfg.batch_prompts)
    groups, passes = _planned_groups(run, qs, fail_floor=run.cfg.rollouts if floor else 0)
    run.train(groups, run.cfg.batch_prompts * run.cfg.rollouts, passes)


def _step_pilot(run: _Run) -> None:
    c = run.cfg
    qs = run.sampler.take(int(round(c.pilot_prompts * c.batch_prompts)))
    pilots = [run.rewards(q, c.pilot_rollouts) for q in qs]
    mixed = np.array([g.min() != g.max() for g in pilots])
    budget = c.batch_prompts * c.rollouts - qs.size * c.pilot_rollouts
    pc = PlannerConfig(n_base=c.pilot_rollouts, n_avg=c.rollouts, rounds=1, n_max=4 * c.rollouts)
    d = planner.priority_diagnostics(pilots, step=qs.size * c.pilot_rollouts, alpha=pc.alpha, lam=pc.lam)
    room = np.where(mixed, pc.n_max - c.pilot_rollouts, 0)
    extra = planner.allocate_by_priority(np.where(mixed, d.priority, 0.0), budget, room) if mixed.any() else []
    groups = {int(q): g for q, g in zip(qs, pilots)}
    for q, k in zip(qs[mixed], np.asarray(extra)[mixed] if mixed.any() else []):
        groups[int(q)] = np.concatenate([groups[int(q)], run.rewards(q, int(k))])
    trained = {q: g for q, g in groups.items() if g.size > c.pilot_rollouts}
    spent = qs.size * c.pilot_rollouts + int(sum(extra))
    run.train(trained or {int(qs[0]): groups[int(qs[0])]}, spent, 2)


def _step_pilot_commit(run: _Run) -> None:
    c = run.cfg
    trained: dict[int, np.ndarray] = {}
    generated = passes = 0
    while len(trained) < c.batch_prompts and passes < 10:
        passes += 1
        new = run.sampler.take(c.batch_prompts)
        commit = [b for b in run.buffer[: c.batch_prompts - len(trained)] if b[0] not in trained]
        run.buffer = run.buffer[len(commit) :]
        generated += new.size * c.pc_explore + len(commit) * c.pc_commit
        for q, pilot, _ in commit:
            trained[q] = np.concatenate([pilot, run.rewards(q, c.pc_commit)])
        for q in new:
            pilot = run.rewards(q, c.pc_explore)
            if c.pc_lower <= pilot.mean() <= 1 - c.pc_upper and int(q) not in trained:
                run.buffer.append((int(q), pilot, run.step))
        run.rng.shuffle(run.buffer)  # buffer_sampling_method: random
    run.buffer = [b for b in run.buffer if run.step - b[2] < c.pc_max_off_steps]
    run.train(trained, generated, passes)


def _step_skip(run: _Run) -> None:
    c = run.cfg
    taken: list[int] = []
    skipped: list[int] = []
    limit = int(round(c.candidates * c.batch_prompts))
    while len(taken) < c.batch_prompts and len(taken) + len(skipped) < limit:
        q = int(run.sampler.take(1)[0])
        (skipped if not run.last_mixed[q] and run.rng.random() < c.skip_prob else taken).append(q)
    taken += skipped[: c.batch_prompts - len(taken)]
    run.train({q: run.rewards(q, c.rollouts) for q in taken}, c.batch_prompts * c.rollouts, 1)


def _chosen(run: _Run, scores_of) -> np.ndarray:
    c = run.cfg
    cand = run.sampler.take(int(round(c.candidates * c.batch_prompts)))
    cand = np.unique(cand)  # an epoch boundary inside the window can repeat a prompt
    return cand[planner.select_by_signal(scores_of(cand), min(c.batch_prompts, cand.size), run.rng)]


def _step_history(run: _Run) -> None:
    c = run.cfg
    qs = _chosen(run, lambda cand: run.history.score(cand, run.step, c.rollouts))
    run.train({int(q): run.rewards(q, c.rollouts) for q in qs}, qs.size * c.rollouts, 1)


def _step_history_xrpo(run: _Run) -> None:
    c = run.cfg
    qs = _chosen(run, lambda cand: run.history.score(cand, run.step, c.rollouts))
    groups, passes = _planned_groups(run, qs)
    run.train(groups, qs.size * c.rollouts, passes)


def _step_oracle(run: _Run) -> None:
    c = run.cfg
    qs = _chosen(run, lambda cand: _mixed_prob(run.p[cand], c.rollouts))
    run.train({int(q): run.rewards(q, c.rollouts) for q in qs}, qs.size * c.rollouts, 1)


_SELECTION_STEPS = {
    "uniform": _step_uniform,
    "xrpo": _step_xrpo,
    "xrpo_floor": partial(_step_xrpo, floor=True),
    "pilot": _step_pilot,
    "pilot_commit": _step_pilot_commit,
    "skip": _step_skip,
    "history": _step_history,
    "history_xrpo": _step_history_xrpo,
    "oracle": _step_oracle,
}


def simulate_selection(
    strategy: str, cfg: SelectionConfig = SelectionConfig(), pool: PoolConfig = PoolConfig()
) -> dict:
    """Run one strategy for `cfg.steps` steps; the pass rates drift the same way for every strategy.

    Returns:
        {"strategy", "informative_share", "mixed_groups_per_step", "rollouts_per_step",
         "passes_per_step", "rare_successes_per_step", "epochs"}.
    """
    if strategy not in _SELECTION_STEPS:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {list(SELECTION_STRATEGIES)}")
    run = _Run(cfg, pool)
    for _ in range(cfg.steps):
        _SELECTION_STEPS[strategy](run)
        run.advance()
    return {
        "strategy": strategy,
        "informative_share": run.informative / run.rollouts,
        "mixed_groups_per_step": run.groups_mixed / cfg.steps,
        "rollouts_per_step": run.rollouts / cfg.steps,
        "passes_per_step": run.passes / cfg.steps,
        "rare_successes_per_step": run.rare_successes / cfg.steps,
        "epochs": run.sampler.epochs + run.sampler.pos / cfg.dataset_prompts,
    }


def compare_selection(
    cfg: SelectionConfig = SelectionConfig(),
    pool: PoolConfig = PoolConfig(),
    strategies: tuple[str, ...] = SELECTION_STRATEGIES,
) -> dict[str, dict]:
    """Strategies on the same dataset and drift, with each share as a ratio against uniform's."""
    out = {s: simulate_selection(s, cfg, pool) for s in strategies}
    base = (
        out["uniform"]["informative_share"]
        if "uniform" in out
        else simulate_selection("uniform", cfg, pool)["informative_share"]
    )
    for r in out.values():
        r["share_ratio_vs_uniform"] = r["informative_share"] / base
    return out


# The protocols the study runs, fixed before its first run (docs/algorithms.md, selection):
# the testbed as set C runs it (4,096 prompts, each seen about once), its multi-epoch protocol
# (128 prompts, 64 steps: four epochs of GRPO), and a cluster run (DAPO-Math-17k at 512 x 16 for
# 300 steps: nine epochs) on the DAPO-shaped pool.
TESTBED_POOL = PoolConfig(hard_frac=0.34, easy_frac=0.09)  # 30% never and 11% always solved in 8 (P1)
PROTOCOLS: dict[str, tuple[SelectionConfig, PoolConfig]] = {
    "testbed": (SelectionConfig(dataset_prompts=4096, batch_prompts=8, rollouts=8, steps=50), TESTBED_POOL),
    "testbed_epochs": (SelectionConfig(dataset_prompts=128, batch_prompts=8, rollouts=8, steps=64), TESTBED_POOL),
    "cluster": (
        SelectionConfig(
            dataset_prompts=17000,
            batch_prompts=512,
            rollouts=16,
            steps=300,
            pilot_rollouts=4,
            pc_explore=4,
            pc_commit=12,
        ),
        PoolConfig(),
    ),
}


def selection_table(protocol: str, seeds=range(5), strategies=SELECTION_STRATEGIES, **overrides) -> dict[str, dict]:
    """Mean and SD over seeds of each strategy's figures on one protocol, `overrides` applied to it."""
    cfg, pool = PROTOCOLS[protocol]
    runs = [compare_selection(replace(cfg, seed=s, **overrides), pool, strategies) for s in seeds]
    out = {}
    for s in strategies:
        out[s] = {}
        for key in (
            "informative_share",
            "share_ratio_vs_uniform",
            "mixed_groups_per_step",
            "rollouts_per_step",
            "passes_per_step",
            "rare_successes_per_step",
        ):
            vals = np.array([r[s][key] for r in runs])
            out[s][key] = float(vals.mean())
            out[s][key + "_sd"] = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Where the rollout budget lands (planner_sim).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("planner", help="the within-step planner against uniform and DAPO (one batch of B prompts)")
    sel = sub.add_parser("selection", help="which prompts a step trains, over a multi-epoch run")
    sel.add_argument("--protocol", choices=list(PROTOCOLS), default="testbed_epochs")
    sel.add_argument("--seeds", type=int, default=5)
    sel.add_argument("--strategies", nargs="+", default=list(SELECTION_STRATEGIES))
    sel.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="SelectionConfig overrides")
    sel.add_argument("--json", help="write the table here too")
    args = ap.parse_args(argv)
    if args.cmd == "planner":
        print(json.dumps(compare(), indent=1))
        print(json.dumps({str(k): v for k, v in lambda_sweep().items()}, indent=1))
        return
    overrides = {}
    for item in args.set:
        name, value = item.split("=", 1)
        kind = type(getattr(SelectionConfig(), name))
        overrides[name] = kind(value)
    table = selection_table(args.protocol, range(args.seeds), tuple(args.strategies), **overrides)
    print(f"protocol {args.protocol} {overrides or ''}, {args.seeds} seeds (mean ± SD)")
    print(
        "| strategy | share in mixed groups | vs uniform | mixed groups / step | rollouts / step | passes / step "
        f"| rare successes / step (p < {RARE_P}) |"
    )
    print("|---|---|---|---|---|---|---|")
    for s, r in table.items():
        print(
            f"| {s} | {r['informative_share']:.3f} ± {r['informative_share_sd']:.3f} | "
            f"{r['share_ratio_vs_uniform']:.2f} ± {r['share_ratio_vs_uniform_sd']:.2f} | "
            f"{r['mixed_groups_per_step']:.1f} | {r['rollouts_per_step']:.0f} | {r['passes_per_step']:.2f} | "
            f"{r['rare_successes_per_step']:.3f} ± {r['rare_successes_per_step_sd']:.3f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"protocol": args.protocol, "overrides": overrides, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
