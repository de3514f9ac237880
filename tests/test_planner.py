"""Rollout planner (XRPO §2.2): values against scipy by hand, allocation against a brute-force
re-implementation of the definition, and hypothesis invariants."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import t as student_t

from xrpo_verl import planner as P
from xrpo_verl.config import PlannerConfig


def _cfg(**kw) -> PlannerConfig:
    """A planner config whose n_base/n_avg leave every test group under n_max."""
    return PlannerConfig(**{"n_base": 1, "n_avg": 1, "rounds": 2, **kw})


def _alloc(groups, budget, **kw) -> list[int]:
    return P.plan_round(groups, budget, _cfg(**kw)).extra


def _h(s, n, alpha):  # h_q(n) = t_{1-a/2,n-1} s / sqrt(n), straight from the definition
    return student_t.ppf(1 - alpha / 2, n - 1) * s / math.sqrt(n)


def _brute_priority(r, T, alpha, lam, form, k=1):
    n = len(r)
    s = float(np.std(r, ddof=1)) if n >= 2 else 0.0
    delta = _h(s, n, alpha) - _h(s, n + k, alpha) if n >= 2 else 0.0
    phi = lam * (math.sqrt(math.log(1 + T) / n) if form == "sqrt" else math.log(1 + T) / n)
    return delta + phi


def _brute_allocate(pis, budget, room):
    """Largest remainder on budget*Pi/sum(Pi), ties (higher Pi, lower index); cap; greedy refill."""
    q = len(pis)
    w = pis if sum(pis) > 0 else [1.0] * q
    quota = [budget * x / sum(w) for x in w]
    share = [math.floor(x) for x in quota]
    order = sorted(range(q), key=lambda i: (-(quota[i] - share[i]), -pis[i], i))
    for i in order[: budget - sum(share)]:
        share[i] += 1
    out = [min(a, b) for a, b in zip(share, room)]
    over = sum(share) - sum(out)
    for i in sorted(range(q), key=lambda i: (-pis[i], i)):
        give = min(over, room[i] - out[i])
        out[i] += give
        over -= give
    return out


def test_half_width_and_shrink_match_scipy_by_hand():
    # s = 0.5, n = 4: t_{0.975,3} = 3.18245, h = 3.18245*0.5/2 = 0.79561
    assert P.ci_half_width(0.5, 4, 0.05) == pytest.approx(0.795612, rel=1e-5)
    # Delta(4) = h(4) - h(5) = 0.795612 - 2.776445*0.5/sqrt(5) = 0.174780 (spec's scale table: 0.175)
    assert P.expected_ci_shrink(0.5, 4, 0.05) == pytest.approx(0.174780, rel=1e-4)
    assert P.expected_ci_shrink(0.35, 16, 0.05) == pytest.approx(0.0065, abs=5e-5)
    # k-step variant: h(8) - h(11)
    assert P.expected_ci_shrink(0.3, 8, 0.1, k=3) == pytest.approx(_h(0.3, 8, 0.1) - _h(0.3, 11, 0.1))


def test_half_width_is_zero_for_zero_variance_and_non_increasing_in_n():
    assert P.ci_half_width(0.0, 5, 0.05) == 0.0
    h = P.ci_half_width(0.4, np.arange(2, 200), 0.05)
    assert np.all(np.diff(h) < 0)
    d = P.expected_ci_shrink(0.4, np.arange(2, 200), 0.05)
    assert np.all(d > 0) and np.all(np.diff(d) < 0)


def test_exploration_bonus_forms():
    assert P.exploration_bonus(100, 4, 0.1, "sqrt") == pytest.approx(0.1 * math.sqrt(math.log(101) / 4))
    assert P.exploration_bonus(100, 4, 0.1, "inverse") == pytest.approx(0.1 * math.log(101) / 4)
    assert P.exploration_bonus(0, 4, 0.1) == 0.0


@pytest.mark.parametrize("form", ["sqrt", "inverse"])
def test_priority_matches_brute_force(form):
    rng = np.random.default_rng(0)
    for _ in range(20):
        r = rng.random(int(rng.integers(1, 20))).round(2).tolist()  # continuous partial credit
        got = P.priority_diagnostics([r], step=37, alpha=0.1, lam=0.05, bonus=form).priority[0]
        assert got == pytest.approx(_brute_priority(r, 37, 0.1, 0.05, form), rel=1e-12, abs=1e-15)


def test_zero_variance_and_single_rollout_groups_get_phi_only():
    d = P.priority_diagnostics([[0, 0, 0, 0], [1, 1, 1, 1], [0.7], [0, 1, 0, 1]], step=9, lam=0.03)
    phi4 = 0.03 * math.sqrt(math.log(10) / 4)
    assert d.priority[0] == pytest.approx(phi4) and d.priority[1] == pytest.approx(phi4)
    assert d.delta[2] == 0.0 and d.priority[2] == pytest.approx(0.03 * math.sqrt(math.log(10)))
    assert d.delta[3] > 0


def test_smoothed_std_separates_all_fail_from_all_pass_only_by_its_formula():
    d = P.priority_diagnostics([[0] * 4, [1] * 4], step=1, smoothed_std=True)
    p = 0.5 / 5  # (0 + 0.5)/(4 + 1)
    assert d.std[0] == pytest.approx(math.sqrt(p * (1 - p))) == pytest.approx(d.std[1])


def test_allocate_worked_example():
    rewards = [[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0], [1]]
    pis = [_brute_priority(r, 13, 0.05, 0.03, "sqrt") for r in rewards]  # T = 13 rollouts so far
    got = _alloc(rewards, 20, n_max=8)
    assert _alloc(rewards, 9, n_max=8) == _brute_allocate(pis, 9, [4, 4, 4, 7])
    assert got == _brute_allocate(pis, 20, [8 - len(r) for r in rewards])
    assert got == [4, 4, 4, 7]  # headroom 19 < budget 20: everyone is filled to n_max


def test_cap_overflow_goes_to_highest_priority_uncapped_prompt():
    # quotas: 9, 0.9, 0.1 -> shares 9, 1, 0; prompt 0 capped at 2 -> 7 overflow to prompt 1 (next Pi)
    assert P.allocate_by_priority([0.9, 0.09, 0.01], 10, [2, 20, 20]) == [2, 8, 0]
    # total headroom below budget: everyone fills up
    assert P.allocate_by_priority([1.0, 2.0], 10, [3, 4]) == [3, 4]


def test_remainder_ties_go_to_higher_priority_then_lower_index():
    assert P.allocate_by_priority([1.0, 1.0, 1.0], 4, [9, 9, 9]) == [2, 1, 1]
    # remainders 0.5/0.5: Pi 3 vs 1 -> quotas 3, 1 ... use budget 2 over (3,1): 1.5/0.5 -> 2, 0
    assert P.allocate_by_priority([3.0, 1.0], 2, [9, 9]) == [2, 0]


@settings(max_examples=150, deadline=None)
@given(
    groups=st.lists(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=10), min_size=1, max_size=12),
    budget=st.integers(0, 80),
    n_max=st.integers(10, 20),
    form=st.sampled_from(["sqrt", "inverse"]),
)
def test_allocation_invariants_and_brute_force(groups, budget, n_max, form):
    got = _alloc(groups, budget, n_max=n_max, bonus_form=form)
    room = [n_max - len(g) for g in groups]
    assert sum(got) == min(budget, sum(room))
    assert all(0 <= k <= r for k, r in zip(got, room))
    step = sum(len(g) for g in groups)
    pis = [_brute_priority(g, step, 0.05, 0.03, form) for g in groups]
    assert got == _brute_allocate(pis, budget, room)


@settings(max_examples=50, deadline=None)
@given(q=st.integers(1, 20), per=st.integers(0, 5), extra=st.integers(0, 19))
def test_equal_priorities_give_a_uniform_split(q, per, extra):
    extra = extra % q
    got = _alloc([[0, 1, 1]] * q, q * per + extra, n_max=100)
    assert got == [per + 1] * extra + [per] * (q - extra)


def test_round_budgets_phased_plan():
    assert P.round_budgets(10, 16, 8, 2) == [80, 40, 40]
    assert P.round_budgets(3, 5, 2, 2) == [6, 5, 4]
    assert sum(P.round_budgets(7, 13, 4, 3)) == 7 * 13
    assert P.round_budgets(4, 8, 8, 0) == [32]


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: _alloc([[0, 1], []], 4), "empty"),
        (lambda: _alloc([[0, float("nan")]], 4), "non-finite"),
        (lambda: _alloc([], 4), "empty"),
        (lambda: P.priority_diagnostics([[0, 1]], step=1, bonus="log"), "bonus form"),
        (lambda: _alloc([[0, 1]], -1), "budget"),
        (lambda: _alloc([[0, 1] * 20], 4, n_max=32), "n_max"),
        (lambda: P.priority_diagnostics([[0, 1]], step=1, alpha=0.0), "alpha"),
        (lambda: P.priority_diagnostics([[0, 1]], step=1, k=0), "k"),
        (lambda: P.allocate_by_priority([1.0, 2.0], 4, [1]), "headroom"),
        (lambda: P.ci_half_width(0.5, 1, 0.05), "n >= 2"),
        (lambda: P.round_budgets(4, 6, 8, 2), "n_avg"),
        (lambda: P.round_budgets(4, 10, 8, 0), "rounds"),
    ],
)
def test_bad_input_raises_value_error_naming_the_problem(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def test_bonus_counts_this_steps_rollouts_so_it_does_not_grow_over_training():
    """Pins issue 11 point 6: phi_q uses T = rollouts generated so far this step and n_q = this step's
    rollouts of q (UCB1 within the step). The same groups planned at step 1 or step 300 of training
    get the same phi; the old T = global step made it grow ~3x from step 1 to 300."""
    groups = [[0, 0, 0, 0], [1, 1, 1, 1], [0, 1], [1]]
    plan = P.plan_round(groups, 6, _cfg(n_max=8, lam=0.1))
    t = 4 + 4 + 2 + 1
    assert plan.step_rollouts == t
    want = [0.1 * math.sqrt(math.log(1 + t) / n) for n in (4, 4, 2, 1)]
    assert plan.diagnostics.phi.tolist() == pytest.approx(want)
    # a prompt sampled again in a later epoch: only this step's counts enter, so phi cannot grow
    again = P.plan_round(groups, 6, _cfg(n_max=8, lam=0.1))
    assert again.diagnostics.phi.tolist() == plan.diagnostics.phi.tolist()
    assert plan.all_fail == [True, False, False, False]


def test_uniform_allocation_splits_each_round_evenly_whatever_the_priority():
    groups = [[0, 0], [0, 1], [1, 1], [0, 1]]
    assert P.plan_round(groups, 8, _cfg(n_max=8, allocation="uniform")).extra == [2, 2, 2, 2]
    assert P.plan_round(groups, 8, _cfg(n_max=8)).extra != [2, 2, 2, 2]  # priority puts more on mixed groups


# ---------------------------------------------------------------- streaming allocation


def test_in_flight_priority_equals_the_phased_one_when_every_rollout_is_back():
    groups = [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]]
    cfg = _cfg(alpha=0.05, lam=0.03)
    d = P.in_flight_priority(groups, [4, 4, 4], step=12, cfg=cfg)
    phased = P.plan_round(groups, 0, cfg).diagnostics
    np.testing.assert_allclose(d.priority, phased.priority, rtol=1e-12)


def test_in_flight_priority_counts_issued_rollouts_not_known_ones():
    """Two rewards known of six issued: s from the two, n_q = 6 in Delta and phi (docstring)."""
    d = P.in_flight_priority([[1.0, 0.0]], [6], step=10, cfg=_cfg(alpha=0.05, lam=0.1))
    s = float(np.std([1.0, 0.0], ddof=1))
    assert d.priority[0] == pytest.approx(_h(s, 6, 0.05) - _h(s, 7, 0.05) + 0.1 * math.sqrt(math.log(11) / 6))
    with pytest.raises(ValueError, match="more known rewards than issued"):
        P.in_flight_priority([[1.0, 0.0, 1.0]], [2], step=3, cfg=_cfg())


def test_streaming_share_by_hand():
    # decided Pi 0.2 and 0.4, q's 0.3: mean 0.3, so q counts as one of 1 + 2 equal shares of 9
    assert P.streaming_share(0.3, 9, [0.2, 0.4], undecided=2, headroom=8) == 3
    assert P.streaming_share(0.3, 9, [0.2, 0.4], undecided=2, headroom=2) == 2  # capped at n_max - k_q
    assert P.streaming_share(0.1, 7, [0.4], undecided=0, headroom=8) == 7  # the last takes what is left
    assert P.streaming_share(0.0, 6, [0.0, 0.0], undecided=2, headroom=8) == 2  # all zero: even split
    with pytest.raises(ValueError, match="finite and >= 0"):
        P.streaming_share(float("nan"), 4, [], undecided=1, headroom=4)


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, deadline=None)
def test_streaming_rounds_spend_the_budget_within_n_max_in_any_order(pass_rates, rounds, seed):
    """Whatever order prompts come back in, the step issues min(B * n_avg, B * n_max) rollouts,
    no prompt more than n_max, and `back` is only ever asked about a prompt with none in flight."""
    cfg = PlannerConfig(n_base=2, n_avg=4, rounds=rounds, n_max=6)
    rng = np.random.default_rng(seed)
    plan = P.StreamingRounds(len(pass_rates), cfg)
    known = [list((rng.random(2) < p).astype(float)) for p in pass_rates]
    ready = list(range(len(pass_rates)))  # prompts whose issued rollouts are all back
    waiting: dict[int, int] = {}
    while ready or waiting:
        if not ready:  # the in-flight prompt that finishes next
            q = int(rng.choice(sorted(waiting)))
            known[q] += list((rng.random(waiting.pop(q)) < pass_rates[q]).astype(float))
            ready.append(q)
        q = ready.pop(int(rng.integers(len(ready))))
        for p, k in plan.back(q, known[q]).items():
            assert p not in waiting  # one submission in flight per prompt (one uid, one status)
            if p in ready:
                ready.remove(p)
            waiting[p] = k
    assert plan.done
    assert int(plan.issued.sum()) == len(pass_rates) * cfg.n_avg
    assert plan.issued.max() <= cfg.n_max
    assert [len(k) for k in known] == plan.issued.tolist()


# ---------------------------------------------------------------- prompt selection (issue 46)


def test_beta_power_moment_by_hand_and_by_sampling():
    # Beta(1, 1): E[p^n] = 1 / (n + 1); Beta(2, 1): E[p] = 2/3, E[p^2] = 2/3 * 3/4 = 1/2
    assert P.beta_power_moment(np.array([1.0]), np.array([1.0]), 3)[0] == pytest.approx(0.25)
    assert P.beta_power_moment(np.array([2.0]), np.array([1.0]), 2)[0] == pytest.approx(0.5)
    assert P.beta_power_moment(np.array([2.0]), np.array([1.0]), 0)[0] == 1.0
    p = np.random.default_rng(0).beta(0.5, 8.5, 400_000)
    exact = P.mixed_group_probability(np.array([0.5]), np.array([8.5]), 8)[0]
    assert exact == pytest.approx(1 - np.mean(p**8 + (1 - p) ** 8), abs=0.003)


def test_mixed_probability_ranks_a_mixed_history_above_an_unseen_prompt_above_an_agreeing_one():
    h = P.PromptHistory(4, half_life=10.0)
    h.record(np.array([0, 1, 2]), np.array([4, 0, 8]), np.array([8, 8, 8]), step=0)
    mixed, fail, pass_, unseen = h.score(np.arange(4), step=0, n=8)
    assert mixed > unseen > max(fail, pass_)
    assert fail == pytest.approx(pass_)  # the prior is symmetric


def test_history_decays_back_to_the_prior_at_its_half_life():
    h = P.PromptHistory(2, half_life=5.0, prior=(0.5, 0.5))
    h.record(np.array([0]), np.array([0]), np.array([8]), step=0)
    a, b = h.posterior(np.array([0, 1]), step=5)
    assert (a[0], b[0]) == pytest.approx((0.5, 0.5 + 4.0))  # half the 8 failures are left after 5 steps
    assert (a[1], b[1]) == (0.5, 0.5)
    h.record(np.array([0]), np.array([2]), np.array([4]), step=5)  # the new visit adds to the decayed one
    a, b = h.posterior(np.array([0]), step=5)
    assert (a[0], b[0]) == pytest.approx((2.5, 0.5 + 4.0 + 2.0))
    late = h.score(np.array([0, 1]), step=500, n=8)
    assert late[0] == pytest.approx(late[1], abs=1e-6)


def test_history_memory_is_set_by_the_dataset():
    h = P.PromptHistory(17_000, half_life=33.0)
    nbytes = h.successes.nbytes + h.failures.nbytes + h.last_step.nbytes
    assert nbytes == 17_000 * 12
    for step in range(50):
        h.record(np.arange(step * 10, step * 10 + 10), np.zeros(10), np.full(10, 16), step)
    assert h.successes.nbytes + h.failures.nbytes + h.last_step.nbytes == nbytes


def test_select_by_signal_keeps_the_largest_and_breaks_ties_at_random():
    rng = np.random.default_rng(0)
    assert P.select_by_signal(np.array([0.1, 0.9, 0.5, 0.7]), 2, rng).tolist() == [1, 3]
    picks = {tuple(P.select_by_signal(np.array([0.5, 0.5, 0.5, 0.9]), 2, rng)) for _ in range(50)}
    assert all(3 in p for p in picks) and len(picks) == 3  # the tie among the rest goes every way


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: P.mixed_group_probability(np.ones(1), np.ones(1), 1), "n must be >= 2"),
        (lambda: P.beta_power_moment(np.zeros(1), np.ones(1), 2), "must be > 0"),
        (lambda: P.history_decay(0.0), "half_life"),
        (lambda: P.PromptHistory(3, half_life=1.0).record([0], [5], [4], 0), r"\[0, trials\]"),
        (lambda: P.PromptHistory(3, half_life=1.0).record([0, 0], [1, 1], [4, 4], 0), "once per call"),
        (lambda: P.select_by_signal(np.ones(3), 4, np.random.default_rng(0)), "keep = 4"),
    ],
)
def test_selection_rejects_bad_input(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def test_streaming_counts_what_the_last_decision_of_the_round_hands_out():
    """q0 (mixed) takes 2 of the round's 6, q1 (all pass) none, and q2, the last, only its headroom
    n_max - n_base = 3: the 1 left goes by Pi to a prompt with room when q2 decides, the one release
    that waits for the slowest prompt of the step (`released_at_close`)."""
    cfg = PlannerConfig(n_base=2, n_avg=4, n_max=5, rounds=1)
    plan = P.StreamingRounds(3, cfg)
    assert plan.back(0, [1.0, 0.0]) == {0: 2} and plan.back(1, [1.0, 1.0]) == {}
    assert plan.back(2, [0.0, 0.0]) == {2: 3}
    assert plan.released_at_close == 1 and plan.deferred.tolist() == [1, 0, 0]  # q0 gets it when back
    even = P.StreamingRounds(3, cfg)
    for q, rewards in ((1, [1.0, 1.0]), (2, [0.0, 0.0]), (0, [1.0, 0.0])):
        even.back(q, rewards)
    assert even.released_at_close == 0 and even.issued.tolist() == [4, 4, 4]


# ---------------------------------------------------------------- the fail floor (issue 46)


def test_fail_floor_tops_unsolved_prompts_up_to_f_before_pi_splits_the_rest():
    """B = 3 at n_base = 4, N_1 = 12: the all-fail q1 first gets f - 4 = 4, and the 8 left go by Pi
    to the mixed q0 (the all-pass q2 has Pi = phi only); without the floor q1 gets phi's share only."""
    rewards = [[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    off = P.plan_round(rewards, 12, PlannerConfig(n_base=4, n_avg=8, n_max=16, rounds=1))
    on = P.plan_round(rewards, 12, PlannerConfig(n_base=4, n_avg=8, n_max=16, rounds=1, fail_floor=8))
    assert off.floor == [0, 0, 0] and off.extra[1] < 4
    assert on.floor == [0, 4, 0] and on.extra[1] >= 4
    rest = P.allocate_by_priority(on.diagnostics.priority, 8, [12, 4, 12])
    assert on.extra == [rest[0], 4 + rest[1], rest[2]]
    assert sum(on.extra) == sum(off.extra) == 12


def test_fail_floor_cut_evenly_when_the_round_cannot_pay_it_and_capped_by_n_max():
    assert P.fail_floor_shares([True, True, False], [2, 2, 2], 8, 7, n_max=16) == [4, 3, 0]
    assert P.fail_floor_shares([True, True], [2, 5], 8, 100, n_max=6) == [4, 1]
    assert P.fail_floor_shares([True, False], [2, 2], 0, 100, n_max=6) == [0, 0]
    with pytest.raises(ValueError, match="fail_floor"):
        PlannerConfig(n_base=2, n_avg=4, n_max=6, fail_floor=7)


def test_streaming_fail_floor_gives_an_unsolved_prompt_its_top_up_whatever_comes_back_first():
    """The mixed q0 comes back first and would take most of the round; the all-fail q1, back second,
    still gets its f - n_base = 2 from the round's budget, and the step spends B * n_avg."""
    cfg = PlannerConfig(n_base=2, n_avg=4, n_max=8, rounds=1, fail_floor=4)
    plan = P.StreamingRounds(3, cfg)
    first = plan.back(0, [1.0, 0.0])
    assert plan.back(1, [0.0, 0.0])[1] >= 2
    plan.back(2, [1.0, 1.0])
    assert plan.floor_rollouts == 2 and first[0] >= 2
    assert int(plan.issued.sum() + plan.deferred.sum()) == 3 * cfg.n_avg
    plain = P.StreamingRounds(3, PlannerConfig(n_base=2, n_avg=4, n_max=8, rounds=1))
    plain.back(0, [1.0, 0.0])
    assert plain.back(1, [0.0, 0.0]).get(1, 0) < 2 and plain.floor_rollouts == 0
