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
