"""The code reward's per-step sandbox metrics, from the rows' results (no sandbox needed)."""

import pytest

from xrpo_verl.rewards.code import VERDICTS
from xrpo_verl.rewards.sandbox_metrics import busy_seconds, exclusive_seconds, step_metrics


def test_busy_seconds_is_the_union_of_intervals():
    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0.0, 2.0)]) == 2.0
    # [0,2] and [1,3] overlap -> [0,3]; [5,6] apart; [5.2,5.5] inside: 3 + 1 = 4
    assert busy_seconds([(5.0, 6.0), (1.0, 3.0), (0.0, 2.0), (5.2, 5.5)]) == pytest.approx(4.0)


def test_step_metrics_counts_verdicts_runs_and_share():
    infos = [
        {"verdict": "AC", "attempts": 1, "sandbox_s": 0.5, "sandbox_start": 10.0, "sandbox_end": 10.5},
        {"verdict": "WA", "attempts": 2, "sandbox_s": 1.0, "sandbox_start": 10.25, "sandbox_end": 12.0},
        {"verdict": "no_code", "attempts": 0, "sandbox_s": 0.0, "sandbox_start": 0.0, "sandbox_end": 0.0},
        {"verdict": "", "attempts": 0, "sandbox_s": 0.0, "sandbox_start": 0.0, "sandbox_end": 0.0},  # a math row
        {"verdict": "AC", "attempts": 1, "sandbox_s": 0.25, "sandbox_start": 20.0, "sandbox_end": 20.5},
    ]
    m = step_metrics(infos, step_s=10.0)
    assert {k for k in m if k.startswith("reward/verdict/")} == {f"reward/verdict/{v}" for v in VERDICTS}
    assert (m["reward/verdict/AC"], m["reward/verdict/WA"], m["reward/verdict/no_code"]) == (2, 1, 1)
    assert m["reward/verdict/SE"] == 0 and m["reward/verdict/TLE"] == 0
    assert m["reward/sandbox/runs"] == 4 and m["reward/sandbox/retries"] == 1
    assert m["reward/sandbox/memo_hits"] == 0
    assert step_metrics([*infos, {"verdict": "AC", "attempts": 0, "memo_hit": 1.0}])["reward/sandbox/memo_hits"] == 1
    assert m["reward/sandbox/judge_s"] == pytest.approx(1.75)
    # union: [10, 12] and [20, 20.5] = 2.5 s of a 10 s step
    assert m["reward/sandbox/busy_s"] == pytest.approx(2.5)
    assert m["reward/sandbox/share"] == pytest.approx(0.25)
    assert step_metrics(infos)["reward/sandbox/share"] == 0.0
    assert "reward/sandbox/exclusive_s" not in m  # no generation times: nothing to take the overlap from


def test_exclusive_seconds_is_busy_time_outside_the_other_intervals():
    assert exclusive_seconds([(0.0, 2.0)], []) == 2.0
    assert exclusive_seconds([(0.0, 2.0)], [(0.0, 2.0)]) == 0.0
    # busy [0,3] u [5,6]; others [1,2] u [1.5,2.5] u [5.5,7]: 3 - 1.5 + 1 - 0.5 = 2
    assert exclusive_seconds(
        [(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)], [(1.5, 2.5), (1.0, 2.0), (5.5, 7.0)]
    ) == pytest.approx(2.0)


def test_step_metrics_exclusive_share_leaves_out_judging_that_overlaps_generation():
    # Row 1 was generated over [0, 4] and judged over [4, 5] while row 2 still generated (to 6);
    # row 2 was judged over [6, 7.5]: only [6, 7.5] had the sandbox alone.
    infos = [
        {
            "verdict": "AC",
            "attempts": 1,
            "sandbox_start": 4.0,
            "sandbox_end": 5.0,
            "received_at": 4.0,
            "generate_s": 4.0,
        },
        {
            "verdict": "WA",
            "attempts": 1,
            "sandbox_start": 6.0,
            "sandbox_end": 7.5,
            "received_at": 6.0,
            "generate_s": 6.0,
        },
    ]
    m = step_metrics(infos, step_s=10.0)
    assert m["reward/sandbox/busy_s"] == pytest.approx(2.5)
    assert m["reward/sandbox/exclusive_s"] == pytest.approx(1.5)
    assert m["reward/sandbox/exclusive_share"] == pytest.approx(0.15)
