"""Hierarchical rollout planner (XRPO §2.2). Pure numpy/scipy; never imports verl.

For prompt q with n_q rollouts and rewards r_q (binary or continuous in [0, 1]):

    h_q(n)  = t_{1-alpha/2, n-1} * s_q / sqrt(n)       Student-t CI half-width, s_q sample std (ddof=1)
    Delta_q = h_q(n_q) - h_q(n_q + k)                   expected CI shrink, s_q held fixed (k = 1 default)
    phi_q   = lambda * sqrt(ln(1+T) / n_q)              exploration bonus ("sqrt"), or lambda*ln(1+T)/n_q ("inverse")
    Pi_q    = Delta_q + phi_q                           allocation priority

T and n_q are counted within the training step (UCB1 over this step's pulls): T = rollouts generated
so far this step, n_q = rollouts of prompt q this step. A prompt sampled again in a later epoch
starts from the same T, so its bonus does not grow over training (docs/algorithms.md, planner).

Groups of one (n_q = 1) have no variance estimate and the t-quantile needs df >= 1, so we set
s_q := 0 for them: Delta_q = 0 and Pi_q = phi_q (our rule [I], like a zero-variance group).

The fail floor (ours [I], issue 46; off by default). Pi_q gives a prompt whose rollouts all failed
only phi_q, since s_q = 0, so the rounds move its share of the budget to mixed prompts, and a hard
prompt gets fewer fresh chances to be solved at all than GRPO's n_avg. With floor f > 0, a round
first gives each prompt with no positive reward yet

    F_q = min(f - n_q, n_max - n_q)^+                  its top-up to f (cut evenly if sum F_q > N_r)

and splits what is left of N_r by Pi_q, so the redistribution draws on all-pass and mixed prompts
only. f = n_avg keeps GRPO's rollouts on every prompt that is still unsolved this step.

`plan_round` is one planner round as the trainer and the simulation run it.

Streaming allocation (ours [I], for engines with continuous batching): the same Pi_q, evaluated
while rollouts are still generating, so no round waits for the slowest rollout of the last one.
With k_q rollouts of q issued and its rewards r_q known so far (|r_q| <= k_q):

    s_q     = std(r_q), from the known rewards only
    Delta_q = h_q(k_q) - h_q(k_q + k)                   the shrink once the issued ones are back
    phi_q   = lambda * sqrt(ln(1+T) / k_q)              T = rollouts issued so far this step
    Pi_q    = Delta_q + phi_q, for prompts whose n_base base rewards are all in (others wait)

Each prompt runs the phased rounds on its own: when all of q's rollouts of round r are back, q
gets its round-(r+1) rollouts at once, its share of N_{r+1} by `streaming_share`; the step's
budget stays B * n_avg.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from xrpo_verl.config import PlannerConfig

BonusForm = Literal["sqrt", "inverse"]
_BONUS_FORMS = ("sqrt", "inverse")


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha = {alpha!r} must lie in (0, 1)")


def ci_half_width(std: float | np.ndarray, n: int | np.ndarray, alpha: float) -> np.ndarray:
    """h_q(n) = t_{1-alpha/2, n-1} * s_q / sqrt(n) (XRPO §2.2).

    Args:
        std: s_q, sample standard deviation(s), >= 0. Scalar or (Q,).
        n: rollouts, every n >= 2 (df = n - 1 >= 1). Scalar or (Q,).
        alpha: confidence level in (0, 1).
    Returns:
        float64 array broadcast from `std` and `n`.
    """
    _check_alpha(alpha)
    std = np.asarray(std, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(n < 2):
        raise ValueError(f"ci_half_width needs n >= 2 (df = n - 1 >= 1), got n = {n.tolist()}")
    if np.any(~np.isfinite(std)) or np.any(std < 0):
        raise ValueError(f"std must be finite and >= 0, got {std.tolist()}")
    return stats.t.ppf(1.0 - alpha / 2.0, n - 1.0) * std / np.sqrt(n)


def expected_ci_shrink(std: float | np.ndarray, n: int | np.ndarray, alpha: float, k: int = 1) -> np.ndarray:
    """Delta_q = h_q(n) - h_q(n + k) with s_q frozen (one-step form for k = 1; k-step variant otherwise).

    Always >= 0: both the t-quantile and 1/sqrt(n) fall with n.
    """
    if int(k) != k or k < 1:
        raise ValueError(f"k (shrink steps) = {k!r} must be an integer >= 1")
    n = np.asarray(n)
    return ci_half_width(std, n, alpha) - ci_half_width(std, n + k, alpha)


def exploration_bonus(step: int | float, n: int | np.ndarray, lam: float, form: BonusForm = "sqrt") -> np.ndarray:
    """phi_q(T, n_q): "sqrt" = lambda*sqrt(ln(1+T)/n_q) (UCB1-shaped), "inverse" = lambda*ln(1+T)/n_q [3P].

    Args:
        step: T >= 0, rollouts generated so far in this training step.
        n: n_q >= 1, scalar or (Q,).
        lam: lambda >= 0.
        form: "sqrt" or "inverse".
    """
    if form not in _BONUS_FORMS:
        raise ValueError(f"bonus form {form!r} is not supported; choose one of {list(_BONUS_FORMS)}")
    if not np.isfinite(step) or step < 0:
        raise ValueError(f"step T = {step!r} must be finite and >= 0")
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lam = {lam!r} must be finite and >= 0")
    n = np.asarray(n, dtype=np.float64)
    if np.any(n < 1):
        raise ValueError(f"exploration_bonus needs n >= 1, got {n.tolist()}")
    log_t = np.log1p(float(step))
    if form == "sqrt":
        return lam * np.sqrt(log_t / n)
    return lam * log_t / n


@dataclass(frozen=True)
class PriorityDiagnostics:
    """Per-prompt planner statistics, each (Q,) float64 (n is int64); for metrics and logging."""

    n: np.ndarray  # n_q, rollouts so far
    mean: np.ndarray  # rbar_q
    std: np.ndarray  # s_q used in h_q (0 for n_q = 1; smoothed if asked)
    delta: np.ndarray  # Delta_q
    phi: np.ndarray  # phi_q
    priority: np.ndarray  # Pi_q = Delta_q + phi_q


def _as_groups(rewards: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Validate `rewards` (one sequence per prompt) into float64 arrays."""
    if isinstance(rewards, np.ndarray) and rewards.ndim == 1:
        raise ValueError("rewards must be one sequence of rewards per prompt, got a flat array")
    groups = []
    for q, r in enumerate(rewards):
        arr = np.asarray(r, dtype=np.float64).reshape(-1)
        if arr.size == 0:
            raise ValueError(f"prompt {q} has an empty reward group (n_q = 0); every prompt needs >= 1 rollout")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"prompt {q} has non-finite rewards {arr.tolist()}")
        groups.append(arr)
    if not groups:
        raise ValueError("rewards is empty: no prompts to plan for")
    return groups


def _group_std(groups: list[np.ndarray], smoothed: bool) -> np.ndarray:
    """s_q (ddof=1), or sqrt(p(1-p)) with p = (sum r + 0.5)/(n + 1) when smoothed [I]; 0 for n_q = 1."""
    out = np.zeros(len(groups))
    for q, r in enumerate(groups):
        if r.size < 2:
            continue  # n_q = 1: no variance estimate, s_q := 0 (module docstring)
        if smoothed:
            if np.any((r < 0) | (r > 1)):
                raise ValueError(f"smoothed_std needs rewards in [0, 1]; prompt {q} has {r.tolist()}")
            p = (r.sum() + 0.5) / (r.size + 1)
            out[q] = np.sqrt(p * (1 - p))
        else:
            out[q] = r.std(ddof=1)
    return out


def priority_diagnostics(
    rewards: Sequence[Sequence[float]],
    *,
    step: int | float,
    alpha: float = 0.05,
    lam: float = 0.03,
    bonus: BonusForm = "sqrt",
    k: int = 1,
    smoothed_std: bool = False,
) -> PriorityDiagnostics:
    """Delta_q, phi_q and Pi_q for every prompt (see module docstring)."""
    groups = _as_groups(rewards)
    n = np.array([g.size for g in groups], dtype=np.int64)
    std = _group_std(groups, smoothed_std)
    delta = np.zeros(len(groups))
    multi = n >= 2
    if np.any(multi):
        delta[multi] = expected_ci_shrink(std[multi], n[multi], alpha, k)
    else:
        _check_alpha(alpha)
        expected_ci_shrink(0.0, 2, alpha, k)  # validates k even when no group has n >= 2
    phi = exploration_bonus(step, n, lam, bonus)
    mean = np.array([g.mean() for g in groups])
    return PriorityDiagnostics(n=n, mean=mean, std=std, delta=delta, phi=phi, priority=delta + phi)


def allocate_by_priority(priority: Sequence[float], budget: int, headroom: Sequence[int]) -> list[int]:
    """Integer split of `budget` proportional to `priority`, capped per prompt by `headroom`.

    1. Largest-remainder rounding of budget * Pi_q / sum(Pi) (uniform if sum(Pi) = 0); remainder
       ties go to higher Pi, then lower index.
    2. Cap each share at headroom_q.
    3. What the caps cut off goes to the uncapped prompts, highest Pi first (lower index on ties),
       each filled up to its headroom before the next [I].
    The result sums to min(budget, sum(headroom)).
    """
    pi = np.asarray(priority, dtype=np.float64).reshape(-1)
    room = np.asarray(headroom).reshape(-1)
    if pi.size == 0:
        raise ValueError("priority is empty: no prompts to allocate to")
    if room.shape != pi.shape:
        raise ValueError(f"headroom has {room.size} entries but priority has {pi.size}")
    if not np.all(np.isfinite(pi)) or np.any(pi < 0):
        raise ValueError(f"priorities must be finite and >= 0, got {pi.tolist()}")
    if np.any(room < 0) or not np.all(room == np.round(room)):
        raise ValueError(f"headroom must be non-negative integers, got {room.tolist()}")
    if int(budget) != budget or budget < 0:
        raise ValueError(f"budget = {budget!r} must be a non-negative integer")
    room = room.astype(np.int64)
    budget = int(budget)
    weight = pi if pi.sum() > 0 else np.ones_like(pi)
    quota = budget * weight / weight.sum()
    share = np.floor(quota).astype(np.int64)
    left = budget - int(share.sum())
    idx = np.arange(pi.size)
    # lexsort: last key is primary -> larger remainder, then larger Pi, then lower index
    order = np.lexsort((idx, -pi, -(quota - share)))
    share[order[:left]] += 1
    capped = np.minimum(share, room)
    overflow = int((share - capped).sum())
    for q in np.lexsort((idx, -pi)):
        if overflow == 0:
            break
        give = min(overflow, int(room[q] - capped[q]))
        capped[q] += give
        overflow -= give
    return capped.tolist()


def fail_floor_shares(unsolved: Sequence[bool], n: Sequence[int], floor: int, budget: int, n_max: int) -> list[int]:
    """F_q, the rollouts a round gives unsolved prompts before Pi_q splits the rest (module docstring).

    Args:
        unsolved: (Q,), no rollout of q has a positive reward yet this step.
        n: n_q (Q,), rollouts of q this step.
        floor: f; 0 gives all zeros.
        budget: N_r; when sum F_q exceeds it, it is split evenly over the unsolved prompts (lower
            index first on the remainder), each up to its F_q.
        n_max: the per-prompt cap.
    Returns:
        F_q (Q,), summing to at most `budget`.
    """
    n = np.asarray(n, dtype=np.int64).reshape(-1)
    mask = np.asarray(unsolved, dtype=bool).reshape(-1)
    if mask.shape != n.shape:
        raise ValueError(f"unsolved has {mask.size} entries but n has {n.size}")
    want = np.where(mask, np.clip(np.minimum(floor, n_max) - n, 0, None), 0)
    if want.sum() <= budget:
        return want.tolist()
    return allocate_by_priority(mask.astype(np.float64), budget, want)


def round_budgets(num_prompts: int, n_avg: int, n_base: int, rounds: int) -> list[int]:
    """Phased plan: [B*n_base, N_1, ..., N_R] where the R rounds share B*(n_avg - n_base).

    The shared part is split as evenly as possible, earlier rounds taking the remainder.
    The total is always B*n_avg (compute-matched to GRPO with n_avg rollouts per prompt).
    """
    for name, v, lo in (("num_prompts", num_prompts, 1), ("n_base", n_base, 1), ("rounds", rounds, 0)):
        if int(v) != v or v < lo:
            raise ValueError(f"{name} = {v!r} must be an integer >= {lo}")
    if int(n_avg) != n_avg or n_avg < n_base:
        raise ValueError(f"n_avg = {n_avg!r} must be an integer >= n_base = {n_base}")
    rest = num_prompts * (n_avg - n_base)
    if rounds == 0:
        if rest:
            raise ValueError(f"rounds = 0 but n_avg - n_base = {n_avg - n_base} rollouts per prompt remain")
        return [num_prompts * n_base]
    per, extra = divmod(rest, rounds)
    return [num_prompts * n_base] + [per + (1 if r < extra else 0) for r in range(rounds)]


@dataclass(frozen=True)
class RoundPlan:
    """One planner round: extra rollouts per prompt and the statistics behind them."""

    extra: list[int]  # k_q, rollouts to add to prompt q this round (its floor top-up included)
    diagnostics: PriorityDiagnostics  # n_q, Delta_q, phi_q, Pi_q before the round
    all_fail: list[bool]  # no rollout of q has a positive reward yet (XRPO §2.3: ICL candidates)
    step_rollouts: int  # T of phi_q: rollouts generated so far this step
    floor: list[int]  # F_q, the part of k_q the fail floor gave (zeros with the floor off)


def plan_round(rewards: Sequence[Sequence[float]], budget: int, cfg: PlannerConfig) -> RoundPlan:
    """One dynamic round of XRPO's phased allocation (XRPO §2.2).

    Args:
        rewards: this step's rewards so far, one sequence per prompt (n_q >= 1 each).
        budget: N_r, rollouts to hand out this round.
        cfg: the planner's settings; `allocation="uniform"` splits the budget evenly (ablation).
    Returns:
        A `RoundPlan`; sum(extra) == min(budget, sum_q (n_max - n_q)).
    """
    groups = _as_groups(rewards)
    step_rollouts = int(sum(g.size for g in groups))
    d = priority_diagnostics(
        groups,
        step=step_rollouts,
        alpha=cfg.alpha,
        lam=cfg.lam,
        bonus=cfg.bonus_form,
        k=cfg.shrink_steps,
        smoothed_std=cfg.smoothed_std,
    )
    over = np.flatnonzero(d.n > cfg.n_max)
    if over.size:
        raise ValueError(f"prompts {over.tolist()} already have more than n_max = {cfg.n_max} rollouts")
    weight = d.priority if cfg.allocation == "priority" else np.ones_like(d.priority)
    all_fail = [bool(np.max(g) <= 0) for g in groups]
    floor = np.asarray(fail_floor_shares(all_fail, d.n, cfg.fail_floor, budget, cfg.n_max), dtype=np.int64)
    rest = allocate_by_priority(weight, budget - int(floor.sum()), cfg.n_max - d.n - floor)
    extra = (floor + np.asarray(rest, dtype=np.int64)).tolist()
    return RoundPlan(extra=extra, diagnostics=d, all_fail=all_fail, step_rollouts=step_rollouts, floor=floor.tolist())


def in_flight_priority(
    known: Sequence[Sequence[float]], issued: Sequence[int], *, step: int | float, cfg: PlannerConfig
) -> PriorityDiagnostics:
    """Pi_q while rollouts are in flight: s_q from the `known` rewards, n_q = `issued` (module docstring).

    Args:
        known: rewards back so far, one sequence per prompt, |known_q| >= 1 and <= issued_q.
        issued: k_q (Q,), rollouts submitted for q this step, finished or not.
        step: T, rollouts issued so far this step.
        cfg: alpha, lam, bonus_form, shrink_steps, smoothed_std as in `plan_round`.
    """
    groups = _as_groups(known)
    n = np.asarray(issued, dtype=np.int64).reshape(-1)
    if n.size != len(groups):
        raise ValueError(f"issued has {n.size} entries but known has {len(groups)} prompts")
    short = np.flatnonzero(n < np.array([g.size for g in groups]))
    if short.size:
        raise ValueError(f"prompts {short.tolist()} have more known rewards than issued rollouts")
    std = _group_std(groups, cfg.smoothed_std)
    delta = np.zeros(len(groups))
    multi = n >= 2
    if np.any(multi):
        delta[multi] = expected_ci_shrink(std[multi], n[multi], cfg.alpha, cfg.shrink_steps)
    phi = exploration_bonus(step, n, cfg.lam, cfg.bonus_form)
    mean = np.array([g.mean() for g in groups])
    return PriorityDiagnostics(n=n, mean=mean, std=std, delta=delta, phi=phi, priority=delta + phi)


def streaming_share(priority: float, budget_left: int, decided: Sequence[float], undecided: int, headroom: int) -> int:
    """k_q for one prompt whose round is back, decided without waiting for the rest of the round.

    Phased allocation gives q the share N_r * Pi_q / sum(Pi) of its round. Streaming decides q as
    soon as its own rollouts are in, so sum(Pi) is not known yet: the prompts still to decide are
    counted at the mean Pi of those decided so far, q included, and q takes its share of what is
    left of the round's budget (ours [I]). The last prompt of a round takes what is left.

    Args:
        priority: Pi_q from `in_flight_priority`.
        budget_left: rollouts of this round not yet handed out.
        decided: Pi of the prompts already decided this round.
        undecided: prompts other than q still to decide this round.
        headroom: n_max - k_q.
    Returns:
        An int in [0, min(budget_left, headroom)].
    """
    if priority < 0 or not np.isfinite(priority):
        raise ValueError(f"priority must be finite and >= 0, got {priority}")
    if min(budget_left, undecided, headroom) < 0:
        raise ValueError(
            f"budget_left, undecided and headroom must be >= 0, got {budget_left}, {undecided}, {headroom}"
        )
    if budget_left == 0 or headroom == 0:
        return 0
    if undecided == 0:
        return min(budget_left, headroom)
    mean = (float(np.sum(decided)) + priority) / (len(decided) + 1)
    share = 1.0 / (1 + undecided) if mean == 0 else priority / (priority + undecided * mean)
    return min(int(np.floor(budget_left * share + 0.5)), budget_left, headroom)


class StreamingRounds:
    """One step of streaming allocation: each prompt runs the R rounds on its own (module docstring).

    Call `back(q, rewards)` each time every rollout issued for q so far is back; it returns the
    rollouts to issue now, {prompt: k}: q's next round, decided without waiting for the other
    prompts. A round's budget is N_r of `round_budgets`; what the caps leave of a round passes to
    the next, and when the last prompt decides round R what is left goes to every prompt with
    headroom, by Pi over its rewards known then (`allocate_by_priority`), so the step issues
    min(B * n_avg, headroom) rollouts as the phased planner does. A prompt never has two
    submissions in flight (its group has one status in the engine's queue): what the last
    allocation gives a prompt still generating is issued when that prompt comes back.
    """

    def __init__(self, num_prompts: int, cfg: PlannerConfig) -> None:
        self.cfg = cfg
        self.left = round_budgets(num_prompts, cfg.n_avg, cfg.n_base, cfg.rounds)  # [0]: the base phase, issued
        self.left[0] = 0
        self.issued = np.full(num_prompts, cfg.n_base, dtype=np.int64)  # k_q
        self.round_of = np.zeros(num_prompts, dtype=np.int64)  # the last round decided for q
        self.decided: list[list[float]] = [[] for _ in self.left]  # Pi of the prompts decided in round r
        self.known: list[list[float]] = [[] for _ in range(num_prompts)]
        self.per_round = [0] * len(self.left)  # rollouts handed out in round r (metrics)
        self.deferred = np.zeros(num_prompts, dtype=np.int64)  # decided for a prompt still in flight
        self.released_at_close = 0  # rollouts the last decision of round R handed to every prompt (metrics)
        self.floor_rollouts = 0  # rollouts the fail floor gave (metrics)

    @property
    def done(self) -> bool:
        """Every prompt has decided every round and nothing waits: no more rollouts this step."""
        return bool(np.all(self.round_of == self.cfg.rounds) and not self.deferred.any())

    def in_flight(self, q: int) -> bool:
        """Some rollout issued for q is not back yet."""
        return len(self.known[q]) < self.issued[q]

    def _priority(self, qs: np.ndarray) -> np.ndarray:
        if self.cfg.allocation == "uniform":
            return np.ones(qs.size)
        d = in_flight_priority([self.known[q] for q in qs], self.issued[qs], step=int(self.issued.sum()), cfg=self.cfg)
        return d.priority

    def _floor_top_up(self, q: int, r: int) -> int:
        """F_q (`fail_floor_shares`) for q deciding round r, drawn from round r's budget first, then
        from the later rounds'."""
        unsolved = max(self.known[q]) <= 0
        (got,) = fail_floor_shares(
            [unsolved], [int(self.issued[q])], self.cfg.fail_floor, sum(self.left[r:]), self.cfg.n_max
        )
        owed = got
        for later in range(r, len(self.left)):
            take = min(owed, self.left[later])
            self.left[later] -= take
            owed -= take
        self.floor_rollouts += got
        return got

    def back(self, q: int, rewards: Sequence[float]) -> dict[int, int]:
        """q's rewards, all k_q of them; returns {prompt: rollouts to issue now}."""
        if len(rewards) != self.issued[q]:
            raise ValueError(f"prompt {q}: {self.issued[q]} rollouts issued, {len(rewards)} rewards back")
        self.known[q] = [float(x) for x in rewards]
        out: dict[int, int] = {}

        def issue(p: int, k: int) -> None:
            if k and p != q and self.in_flight(p):
                self.deferred[p] += k
            elif k:
                out[p] = out.get(p, 0) + k
                self.issued[p] += k

        if self.deferred[q]:
            k, self.deferred[q] = int(self.deferred[q]), 0
            issue(q, k)

        while self.round_of[q] < self.cfg.rounds and not out:
            r = self.round_of[q] = self.round_of[q] + 1
            pi = float(self._priority(np.array([q]))[0])
            undecided = int(np.sum(self.round_of < r))
            room = self.cfg.n_max - int(self.issued[q])
            top = self._floor_top_up(q, r)
            k = streaming_share(pi, self.left[r], self.decided[r], undecided, room - top)
            self.decided[r].append(pi)
            self.left[r] -= k
            k += top
            issue(q, k)
            if undecided == 0:  # q closes round r
                if r < self.cfg.rounds:
                    self.left[r + 1] += self.left[r]
                elif self.left[r]:
                    qs = np.arange(self.issued.size)
                    room = np.maximum(self.cfg.n_max - self.issued - self.deferred, 0)
                    extra = allocate_by_priority(self._priority(qs), self.left[r], room)
                    for p, e in enumerate(extra):
                        issue(p, e)
                    self.per_round[r] += sum(extra)
                    self.released_at_close += int(sum(extra))
                self.left[r] = 0
            self.per_round[r] += k
        return out


# Prompt selection across steps (issue 46, ours [I]). The planner above moves rollouts inside a
# batch; a batch that is mostly all-pass or all-fail prompts has few groups to move them to. A
# step that considers C >= B candidate prompts can train the B whose groups are most likely to be
# mixed, judged from each prompt's own earlier visits. The policy moves between visits, so older
# visits weigh less. For prompt q at step t, with visit j at step t_j giving s_j successes in n_j:
#
#     a_q = a_0 + sum_j gamma^(t - t_j) s_j          discounted Beta posterior of p_q
#     b_q = b_0 + sum_j gamma^(t - t_j) (n_j - s_j)  gamma = 2^(-1 / half_life), half_life in steps
#     E[p^n]  = prod_{i<n} (a_q + i) / (a_q + b_q + i)
#     I_q(n)  = 1 - E[p^n] - E[(1 - p)^n]            P(a group of n rollouts is mixed)
#
# and the step trains the B candidates with the largest I_q(n). An unvisited prompt scores the
# prior's I, so fresh prompts compete with ones whose last group was mixed; a prompt whose last
# group was all-pass or all-fail returns to the prior as its evidence decays.


def beta_power_moment(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """E[p^n] for p ~ Beta(a, b): prod_{i<n} (a + i) / (a + b + i). a, b (Q,) > 0; returns (Q,)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("Beta parameters must be > 0")
    if int(n) != n or n < 0:
        raise ValueError(f"n = {n!r} must be an integer >= 0")
    i = np.arange(int(n), dtype=np.float64)
    return np.prod((a[..., None] + i) / (a[..., None] + b[..., None] + i), axis=-1)


def mixed_group_probability(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """I_q(n) = 1 - E[p^n] - E[(1-p)^n] under Beta(a_q, b_q): the chance a group of n is mixed. (Q,)"""
    if n < 2:
        raise ValueError(f"a group of n = {n} rollouts cannot be mixed; n must be >= 2")
    return 1.0 - beta_power_moment(a, b, n) - beta_power_moment(b, a, n)


def history_decay(half_life: float) -> float:
    """gamma = 2^(-1/half_life): the weight a visit keeps after one step; half_life in steps, > 0."""
    if not np.isfinite(half_life) or half_life <= 0:
        raise ValueError(f"half_life = {half_life!r} must be a finite number of steps > 0")
    return float(2.0 ** (-1.0 / half_life))


class PromptHistory:
    """The discounted posterior (a_q - a_0, b_q - b_0) of every prompt of a dataset (module notes).

    Two float32 arrays and one int32 array of length Q: memory is set by the dataset, not the run.
    `record` folds a visit in; `score` gives I_q(n) at step t for any prompts.
    """

    def __init__(self, num_prompts: int, *, half_life: float, prior: tuple[float, float] = (0.5, 0.5)) -> None:
        if int(num_prompts) != num_prompts or num_prompts < 1:
            raise ValueError(f"num_prompts = {num_prompts!r} must be an integer >= 1")
        if min(prior) <= 0:
            raise ValueError(f"prior = {prior!r} must be two numbers > 0")
        self.gamma = history_decay(half_life)
        self.prior = (float(prior[0]), float(prior[1]))
        self.successes = np.zeros(num_prompts, dtype=np.float32)
        self.failures = np.zeros(num_prompts, dtype=np.float32)
        self.last_step = np.zeros(num_prompts, dtype=np.int32)

    def _decayed(self, idx: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.gamma ** np.maximum(step - self.last_step[idx], 0).astype(np.float64)
        return self.successes[idx] * w, self.failures[idx] * w

    def record(self, idx: np.ndarray, successes: np.ndarray, trials: np.ndarray, step: int) -> None:
        """Fold in a visit of prompts `idx` (K,) at `step`: `successes` of `trials` (K,) each."""
        idx = np.asarray(idx, dtype=np.int64)
        successes = np.asarray(successes, dtype=np.float64)
        trials = np.asarray(trials, dtype=np.float64)
        if np.any(successes < 0) or np.any(successes > trials):
            raise ValueError("successes must lie in [0, trials]")
        if np.unique(idx).size != idx.size:
            raise ValueError("a prompt can be recorded once per call")
        s, f = self._decayed(idx, step)
        self.successes[idx] = s + successes
        self.failures[idx] = f + trials - successes
        self.last_step[idx] = step

    def posterior(self, idx: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(a_q, b_q) at `step` for prompts `idx` (K,)."""
        s, f = self._decayed(np.asarray(idx, dtype=np.int64), step)
        return self.prior[0] + s, self.prior[1] + f

    def score(self, idx: np.ndarray, step: int, n: int) -> np.ndarray:
        """I_q(n) at `step` for prompts `idx` (K,)."""
        return mixed_group_probability(*self.posterior(idx, step), n)


def select_by_signal(scores: np.ndarray, keep: int, rng: np.random.Generator) -> np.ndarray:
    """Indices (into `scores`, (C,)) of the `keep` largest scores, ties broken at random; sorted."""
    scores = np.asarray(scores, dtype=np.float64)
    if not 0 <= keep <= scores.size:
        raise ValueError(f"keep = {keep} must lie in [0, {scores.size}]")
    order = np.lexsort((rng.random(scores.size), -scores))
    return np.sort(order[:keep])
