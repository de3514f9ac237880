"""The planner simulation at a small size: budgets, the analytic uniform share, XRPO's gain, and
the generation-time model (phased rounds against streaming)."""

from dataclasses import replace

import numpy as np
import pytest

from xrpo_verl.config import PlannerConfig
from xrpo_verl.eval.planner_sim import (
    EngineConfig,
    PoolConfig,
    SimConfig,
    compare,
    expected_informative_share,
    gain_kept,
    lambda_sweep,
    makespan,
    sample_pool,
    simulate,
)

# 256 prompts x 32 steps: ~8k pass-rate estimates per strategy, enough that the ~6% RMSE gain is
# well outside the seed-to-seed spread (0.93-0.95 over seeds 0-4), in under a second.
SMALL = SimConfig(batch_prompts=256, steps=32, seed=3)
POOL = PoolConfig(num_prompts=2048)


@pytest.fixture(scope="module")
def results():
    return compare(SMALL, POOL)


def test_uniform_and_xrpo_spend_exactly_the_budget_and_dapo_spends_more(results):
    budget = SMALL.batch_prompts * SMALL.n_avg
    assert results["uniform"]["rollouts_per_step"] == budget
    assert results["xrpo"]["rollouts_per_step"] == budget
    assert results["dapo"]["rollouts_per_step"] >= budget
    assert results["dapo"]["rollouts_per_step"] * SMALL.steps % budget == 0  # whole generation batches


def test_uniform_share_matches_the_closed_form():
    """Share of mixed groups under uniform n = 16 is 1 - E[p^n + (1-p)^n]."""
    pool = sample_pool(POOL, np.random.default_rng(SMALL.seed))
    assert simulate("uniform", SMALL, POOL)["informative_share"] == pytest.approx(
        expected_informative_share(pool, 16), abs=0.02
    )


def test_xrpo_puts_more_rollouts_into_mixed_groups_and_estimates_better(results):
    assert results["xrpo"]["share_ratio_vs_uniform"] > 1.05
    assert results["xrpo"]["rmse_ratio_vs_uniform"] < 0.98


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="unknown strategy 'greedy'"):
        simulate("greedy", SMALL, POOL)
    with pytest.raises(ValueError, match="n_base <= n_avg"):
        SimConfig(planner=PlannerConfig(n_base=20))
    with pytest.raises(ValueError, match="exceeds the pool"):
        simulate("uniform", SimConfig(batch_prompts=4096), POOL)


def test_lambda_sweep_runs_the_trainers_planner_config():
    """SimConfig embeds the trainer's PlannerConfig: a lambda set there reaches the simulated planner."""
    sweep = lambda_sweep((0.003, 1.0), SimConfig(batch_prompts=128, steps=4, seed=1), POOL)
    # a huge lambda makes phi swamp Delta: the split tends to uniform, so the gain over uniform shrinks
    assert sweep[0.003]["share_ratio_vs_uniform"] > sweep[1.0]["share_ratio_vs_uniform"]


def test_makespan_by_hand():
    # C = 2: 3 and 1 start at 0; the slot free at 1 runs the next 1 (done at 2), then the 2 (done at 4)
    assert makespan([3, 1, 1, 2], 2) == 4.0
    assert makespan([3, 1, 1, 2], 4) == 3.0
    assert makespan([1] * 6, 2) == 3.0
    assert makespan([], 4) == 0.0


def test_streaming_spends_the_budget_without_the_phased_barriers(results):
    """An engine that holds a fraction of the step's rollouts: the phased rounds wait for their
    slowest rollout, streaming keeps the engine full and lasts about as long as uniform."""
    assert SMALL.engine.concurrency * 8 <= SMALL.batch_prompts * SMALL.n_avg
    assert results["xrpo_streaming"]["rollouts_per_step"] == SMALL.batch_prompts * SMALL.n_avg
    assert results["xrpo_streaming"]["gen_time_ratio_vs_uniform"] < 1.02
    assert results["xrpo"]["gen_time_ratio_vs_uniform"] > 1.05


def test_the_release_that_waits_for_the_last_prompt_costs_no_generation_time():
    """What caps leave of the round goes out when the step's last prompt decides. With n_max = n_avg
    + 1 that release is large, yet while the engine's queue holds many times its slots it ends with
    the rest; with the default headroom it does not happen."""
    tight = replace(SMALL, steps=8, planner=replace(SMALL.planner, n_max=SMALL.n_avg + 1))
    stream, uni = simulate("xrpo_streaming", tight, POOL), simulate("uniform", tight, POOL)
    assert stream["released_at_close_per_step"] > 0.05 * tight.batch_prompts
    assert stream["rollouts_per_step"] == tight.batch_prompts * tight.n_avg
    assert stream["gen_time_per_step"] < 1.02 * uni["gen_time_per_step"]
    assert simulate("xrpo_streaming", replace(SMALL, steps=8), POOL)["released_at_close_per_step"] == 0
    assert uni["released_at_close_per_step"] == 0


def test_streaming_with_one_round_keeps_the_phased_planners_gain():
    """The issue's bar: streaming keeps >= 95% of the phased planner's (R = 2) gain over uniform in
    the share of rollouts in mixed groups, at uniform's generation time. The RMSE gain is a few
    percent and its share kept swings from 0.9 to 2.5 over seeds at this size (RESULTS.md has the
    5-seed full-size figure), so here streaming's RMSE must beat uniform's by the phased bar."""
    out = compare(replace(SMALL, streaming_rounds=1), POOL)
    assert gain_kept(out, "xrpo_streaming", "informative_share") >= 0.95
    assert out["xrpo_streaming"]["rmse_ratio_vs_uniform"] < 0.98
    assert out["xrpo_streaming"]["gen_time_ratio_vs_uniform"] < 1.02


def test_an_engine_that_holds_the_whole_step_cannot_hide_a_round():
    """C >= B * n_avg: every rollout runs at once, so a round after the base costs a second pass
    whatever the schedule; streaming cannot beat phased R = 1 there."""
    big = replace(SMALL, steps=4, engine=EngineConfig(concurrency=SMALL.batch_prompts * SMALL.n_avg))
    stream = simulate("xrpo_streaming", replace(big, streaming_rounds=1), POOL)
    uni = simulate("uniform", big, POOL)
    assert stream["gen_time_per_step"] > 1.5 * uni["gen_time_per_step"]


# ------------------------------------------------ which prompts a step trains (issue 46)

from xrpo_verl.eval.planner_sim import (  # noqa: E402
    PROTOCOLS,
    SELECTION_STRATEGIES,
    SelectionConfig,
    compare_selection,
    simulate_selection,
)

# Four epochs of 96 prompts at 8 x 8, the testbed's pass-rate mix: a few seconds for all strategies.
EPOCHS, EPOCH_POOL = (
    replace(PROTOCOLS["testbed_epochs"][0], dataset_prompts=96, steps=48),
    PROTOCOLS["testbed_epochs"][1],
)


@pytest.fixture(scope="module")
def selection():
    return [compare_selection(replace(EPOCHS, seed=s), EPOCH_POOL) for s in range(3)]


def _mean(runs, strategy, key):
    return float(np.mean([r[strategy][key] for r in runs]))


def test_every_fixed_budget_strategy_spends_exactly_b_times_n(selection):
    budget = EPOCHS.batch_prompts * EPOCHS.rollouts
    for s in SELECTION_STRATEGIES:
        if s == "pilot_commit":
            continue
        assert max(r[s]["rollouts_per_step"] for r in selection) <= budget, s
    for s in ("uniform", "xrpo", "xrpo_floor", "skip", "history", "history_xrpo", "oracle"):
        assert all(r[s]["rollouts_per_step"] == budget for r in selection), s


def test_history_puts_more_rollouts_in_mixed_groups_when_prompts_come_back(selection):
    """Revisited prompts: the history choice beats uniform, GRESO's skip rule and the in-step pilot,
    and stays below the oracle that knows every pass rate."""
    hist = _mean(selection, "history", "share_ratio_vs_uniform")
    assert hist > 1.25
    assert hist > _mean(selection, "skip", "share_ratio_vs_uniform")
    assert hist > _mean(selection, "pilot", "share_ratio_vs_uniform")
    assert hist < _mean(selection, "oracle", "share_ratio_vs_uniform")


def test_history_is_no_better_than_uniform_when_no_prompt_comes_back():
    """The testbed as set C runs it sees each prompt about once: history has nothing to go on."""
    cfg, pool = PROTOCOLS["testbed"]
    runs = [compare_selection(replace(cfg, seed=s), pool, ("uniform", "history")) for s in range(3)]
    assert abs(_mean(runs, "history", "share_ratio_vs_uniform") - 1.0) < 0.08


def test_pilot_commit_trains_only_groups_its_pilot_found_mixed_but_pays_for_the_pilots(selection):
    """Pilot-Commit's filter at k_e = 2 keeps one-of-two pilots, so every trained group is mixed;
    the discarded pilots make it generate more than B * n a step."""
    assert all(r["pilot_commit"]["mixed_groups_per_step"] == EPOCHS.batch_prompts for r in selection)
    assert _mean(selection, "pilot_commit", "rollouts_per_step") > 1.3 * EPOCHS.batch_prompts * EPOCHS.rollouts


def test_the_fail_floor_gives_hard_prompts_back_the_lucky_solves_the_planner_takes(selection):
    """XRPO's planner moves rollouts off all-fail prompts, so hard prompts are solved by luck less
    often than under uniform; the fail floor gives them back at most of the planner's gain in mixed
    share (it stays within 5% of uniform's), and selection by history, which defers them, has the
    fewest."""
    rare = {s: _mean(selection, s, "rare_successes_per_step") for s in ("uniform", "xrpo", "xrpo_floor", "history")}
    assert rare["xrpo"] < rare["uniform"] <= rare["xrpo_floor"]
    assert rare["history"] < rare["xrpo"]
    floor_share = _mean(selection, "xrpo_floor", "share_ratio_vs_uniform")
    assert 0.95 < floor_share < _mean(selection, "xrpo", "share_ratio_vs_uniform")


def test_a_strategy_sees_the_same_pass_rates_and_drift_on_every_call():
    a = simulate_selection("history", replace(EPOCHS, steps=12))
    b = simulate_selection("history", replace(EPOCHS, steps=12))
    assert a == b
    still = simulate_selection("uniform", replace(EPOCHS, steps=12, drift_mean=0.0, drift_sd=0.0))
    assert still != simulate_selection("uniform", replace(EPOCHS, steps=12))


def test_selection_settings_are_checked():
    with pytest.raises(ValueError, match="unknown strategy"):
        simulate_selection("greedy", EPOCHS)
    with pytest.raises(ValueError, match="exceeds"):
        SelectionConfig(dataset_prompts=16, batch_prompts=8, candidates=3)
    with pytest.raises(ValueError, match="pilot alone"):
        SelectionConfig(pilot_prompts=4, pilot_rollouts=4)
