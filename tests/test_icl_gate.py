"""ICL's earned share (xrpo_verl/icl_gate.py): the integral by hand, the share's bounds, and the gate
following whichever arm wins on simulated all-fail prompts."""

import numpy as np
import pytest

from xrpo_verl.icl_gate import ArmCounts, ICLGate, icl_share, p_icl_better


def test_p_icl_better_by_hand():
    # Beta(1, 1) against Beta(1, 1): 1/2; Beta(2, 1) (pdf 2x) against a uniform (cdf x): int 2x^2 = 2/3;
    # Beta(1, 2) (pdf 2(1 - x)) against a uniform: int 2x(1 - x) = 1/3
    assert p_icl_better(0, 0, 0, 0) == pytest.approx(0.5, abs=1e-6)
    assert p_icl_better(1, 0, 0, 0) == pytest.approx(2 / 3, abs=1e-6)
    assert p_icl_better(0, 1, 0, 0) == pytest.approx(1 / 3, abs=1e-6)
    # symmetric: swapping the arms gives 1 - p
    assert p_icl_better(3, 20, 1, 30) == pytest.approx(1 - p_icl_better(1, 30, 3, 20), abs=1e-6)
    with pytest.raises(ValueError, match=">= 0"):
        p_icl_better(-1, 0, 0, 0)


def test_icl_share_keeps_both_arms_at_least_min_share():
    assert icl_share(0.0, 0.1) == pytest.approx(0.1)
    assert icl_share(1.0, 0.1) == pytest.approx(0.9)
    assert icl_share(0.5, 0.1) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="min_share"):
        icl_share(0.5, 0.6)


def test_update_decays_then_adds():
    gate = ICLGate("earned", decay=0.5)
    gate.update(ArmCounts(8, 2), ArmCounts(4, 0))
    gate.update(ArmCounts(2, 1), ArmCounts(0, 0))
    assert (gate.icl.rollouts, gate.icl.successes) == (0.5 * 8 + 2, 0.5 * 2 + 1)
    assert (gate.zero_shot.rollouts, gate.zero_shot.successes) == (2.0, 0.0)
    with pytest.raises(ValueError, match="successes"):
        gate.update(ArmCounts(1, 2), ArmCounts())


def test_draws_are_seeded_by_step_and_prompt_and_follow_the_share():
    gate = ICLGate("earned")
    assert gate.use_icl(0.3, 5, "p1") == gate.use_icl(0.3, 5, "p1")
    drawn = np.mean([gate.use_icl(0.3, 5, f"p{i}") for i in range(4000)])
    assert drawn == pytest.approx(0.3, abs=0.03)
    assert ICLGate("always").share() == 1.0 and ICLGate("always").use_icl(1.0, 1, "p")


@pytest.mark.parametrize(("p_icl", "p_zero_shot", "low", "high"), [(0.0, 0.1, 0.1, 0.2), (0.3, 0.05, 0.8, 0.9)])
def test_the_gate_follows_the_arm_that_wins(p_icl, p_zero_shot, low, high):
    """All-fail prompts for 15 steps: each draw sends a prompt's 4 rollouts to ICL or zero-shot, at the
    arm's true success rate. A model that does not learn in context loses its ICL share to the floor;
    one that does keeps most of it. An inert gate (share fixed at 1/2) fails both."""
    gate, rng = ICLGate("earned", min_share=0.1, decay=0.9), np.random.default_rng(0)
    for step in range(15):
        share, icl, zs = gate.share(), ArmCounts(), ArmCounts()
        for q in range(8):
            arm, p = (icl, p_icl) if gate.use_icl(share, step, f"q{q}") else (zs, p_zero_shot)
            arm.rollouts += 4
            arm.successes += float((rng.random(4) < p).sum())
        gate.update(icl, zs)
    assert low <= gate.share() <= high


def test_state_round_trips():
    gate = ICLGate("earned")
    gate.update(ArmCounts(10, 3), ArmCounts(6, 1))
    other = ICLGate("earned")
    other.load_state_dict(gate.state_dict())
    assert other.share() == gate.share() and vars(other.icl) == vars(gate.icl)


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="'sometimes'"):
        ICLGate("sometimes")
    with pytest.raises(ValueError, match="decay"):
        ICLGate("earned", decay=0.0)
