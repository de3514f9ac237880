"""The one reward_extra_info schema, and what counts as a verified success."""

import pytest

from xrpo_verl.rewards.result import RESULT_KEYS, ScoreResult, is_success


def test_every_scorer_result_reduces_to_the_same_keys_and_types():
    for result in (1.0, 0, {"score": 0.25}, {"score": 1, "acc": True, "verdict": "AC", "passed": 4.0, "total": 4}):
        d = ScoreResult.of(result).to_dict()
        assert tuple(d) == RESULT_KEYS
        assert all(type(d[k]) is type(getattr(ScoreResult(0.0, 0.0), k)) for k in RESULT_KEYS), d


def test_acc_is_the_scorers_verdict_and_only_full_correctness_is_a_success():
    partial = ScoreResult.of({"score": 0.25, "acc": 0.0, "verdict": "WA", "passed": 1, "total": 4})
    assert partial.score == 0.25 and not is_success(partial.acc)  # partial credit is never a success
    assert is_success(ScoreResult.of({"score": 1.0, "acc": 1.0}).acc)
    assert not is_success(ScoreResult.of(0.5).acc)  # a custom float scorer: acc = score
    dapo_wrong, dapo_right = ScoreResult.of(-1.0), ScoreResult.of(1.0)  # DAPO's +-1 rewards
    assert not is_success(dapo_wrong.acc) and is_success(dapo_right.acc)
    with pytest.raises(ValueError, match="without 'score'"):
        ScoreResult.of({"acc": 1.0})
