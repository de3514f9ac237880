"""The `xrpo`, `extra`, `xrpo_extra` estimators in verl's real registry and advantage path."""

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage

import xrpo_verl.verl_adapters.estimators  # noqa: F401  (registers; the plugin test covers `import verl` alone)
from xrpo_verl.verl_adapters.estimators import XrpoAdvantageInputs

NAMES = ("xrpo", "extra", "xrpo_extra")


def _algo(**over):
    base = {"norm_adv_by_std_in_grpo": True, "extra": {"novelty": {"scale": 0.01}}}
    base.update(over)
    return OmegaConf.create(base)


def _batch():
    # group "a": rewards [1, 0]; group "b": rewards [1, 1, 0]; one token of reward on the last position.
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    tlr = torch.zeros(5, 3)
    tlr[:, -1] = rewards
    mask = torch.ones(5, 3)
    mask[4, 2] = 0.0  # a shorter response: its last position must stay 0
    index = np.array(["a", "a", "b", "b", "b"], dtype=object)
    return tlr, mask, index


def test_names_are_in_verls_registry():
    for name in NAMES:
        assert core_algos.get_adv_estimator_fn(name) is core_algos.ADV_ESTIMATOR_REGISTRY[name]


@pytest.mark.parametrize("name", NAMES)
def test_verls_own_compute_advantage_refuses_without_trainer_inputs(name):
    tlr, mask, index = _batch()
    data = DataProto.from_dict(tensors={"token_level_rewards": tlr, "response_mask": mask}, non_tensors={"uid": index})
    with pytest.raises(ValueError, match="trainer_mode='xrpo'"):
        compute_advantage(data, adv_estimator=name, config=_algo())


def test_xrpo_sharpening_matches_hand_computation():
    tlr, mask, index = _batch()
    seq = torch.tensor([-1.0, -0.5, -0.2, -0.2, -0.2])
    inputs = XrpoAdvantageInputs(seq_logp_mean=seq, correct=tlr.sum(-1) > 0, novelty=torch.zeros(5))
    adv, ret = core_algos.get_adv_estimator_fn("xrpo")(
        token_level_rewards=tlr, response_mask=mask, index=index, config=_algo(), xrpo_inputs=inputs
    )
    # group a: GRPO ±1/sqrt(2); η_0 = exp(-1 + 0.75) ; bonus = min(2.5 (1-η_0), 0.5 A_0)
    a0 = 1 / math.sqrt(2)
    bonus = min(2.5 * (1 - math.exp(-0.25)), 0.5 * a0)
    assert adv[0, 0].item() == pytest.approx(a0 + bonus, abs=1e-5)
    assert adv[1, 0].item() == pytest.approx(-a0, abs=1e-5)
    # group b: equal likelihoods → η = 1 → no bonus; GRPO of [1,1,0]: mean 2/3, std 0.57735
    assert adv[2, 0].item() == pytest.approx((1 - 2 / 3) / 0.57735027, abs=1e-4)
    assert adv[4, 2].item() == 0.0  # masked position
    assert torch.equal(adv, ret)


def test_extra_adds_scaled_novelty_to_correct_rows_only():
    tlr, mask, index = _batch()
    nov = torch.tensor([0.5, 0.9, 0.0, 0.3, 0.7])  # row 1 and 4 are incorrect: must get nothing
    inputs = XrpoAdvantageInputs(seq_logp_mean=torch.zeros(5), correct=tlr.sum(-1) > 0, novelty=nov)
    algo = _algo(extra={"novelty": {"scale": 0.01, "placement": "after_norm"}})
    adv, _ = core_algos.get_adv_estimator_fn("extra")(
        token_level_rewards=tlr, response_mask=mask, index=index, config=algo, xrpo_inputs=inputs
    )
    grpo, _ = core_algos.compute_grpo_outcome_advantage(tlr, mask, index)
    diff = (adv - grpo)[:, 0]
    assert diff.tolist() == pytest.approx([0.005, 0.0, 0.0, 0.003, 0.0], abs=1e-6)


@pytest.mark.parametrize("norm", [True, False])
def test_all_features_neutral_equals_verl_grpo_on_varying_group_sizes(norm):
    """Sharpening with equal likelihoods and zero novelty is exactly verl's GRPO / Dr.GRPO."""
    g = torch.Generator().manual_seed(0)
    sizes = [2, 4, 1, 7]
    index = np.array([f"u{i}" for i, n in enumerate(sizes) for _ in range(n)], dtype=object)
    b = len(index)
    tlr = torch.zeros(b, 6)
    tlr[:, -1] = torch.randint(0, 2, (b,), generator=g).float()
    mask = torch.ones(b, 6)
    inputs = XrpoAdvantageInputs(seq_logp_mean=torch.full((b,), -0.3), correct=tlr.sum(-1) > 0, novelty=torch.zeros(b))
    adv, _ = core_algos.get_adv_estimator_fn("xrpo_extra")(
        token_level_rewards=tlr,
        response_mask=mask,
        index=index,
        config=_algo(norm_adv_by_std_in_grpo=norm),
        xrpo_inputs=inputs,
    )
    ref, _ = core_algos.compute_grpo_outcome_advantage(tlr, mask, index, norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(adv, ref, rtol=1e-5, atol=1e-6)


def test_bad_inputs_name_the_problem():
    tlr, mask, index = _batch()
    bad = XrpoAdvantageInputs(
        seq_logp_mean=torch.zeros(4), correct=torch.ones(5, dtype=torch.bool), novelty=torch.zeros(5)
    )
    with pytest.raises(ValueError, match="seq_logp_mean"):
        core_algos.get_adv_estimator_fn("xrpo")(
            token_level_rewards=tlr, response_mask=mask, index=index, config=_algo(), xrpo_inputs=bad
        )
    with pytest.raises(ValueError, match="unknown key"):
        core_algos.get_adv_estimator_fn("xrpo")(
            token_level_rewards=tlr,
            response_mask=mask,
            index=index,
            config=_algo(xrpo={"sharpen": {}}),
            xrpo_inputs=XrpoAdvantageInputs(torch.zeros(5), torch.ones(5, dtype=torch.bool), torch.zeros(5)),
        )


def test_default_novelty_bonus_measurably_changes_the_advantages_of_correct_responses():
    """Pins issue 11 point 1 (scale): alpha = 0.01 was tuned by the released script for the bonus added
    before group normalisation, where 1/sigma scales it up. Our old default added it after
    normalisation, where it moved |A| by <= 1%. The default is now that placement, so in an
    all-correct group (GRPO: A = 0) novelty alone ranks the correct responses at full scale."""
    tlr = torch.zeros(6, 2)
    tlr[:, -1] = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    mask = torch.ones(6, 2)
    index = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    correct = tlr.sum(-1) > 0
    nov = torch.tensor([0.1, 0.3, 0.2, 0.05, 0.0, 0.15])
    inputs = XrpoAdvantageInputs(seq_logp_mean=torch.zeros(6), correct=correct, novelty=nov)
    fn = core_algos.get_adv_estimator_fn("extra")
    grpo, _ = core_algos.compute_grpo_outcome_advantage(tlr, mask, index)
    default, _ = fn(
        token_level_rewards=tlr, response_mask=mask, index=index, config=_algo(extra={}), xrpo_inputs=inputs
    )
    old = _algo(extra={"novelty": {"scale": 0.01, "placement": "after_norm", "warmup": 8}})
    before, _ = fn(token_level_rewards=tlr, response_mask=mask, index=index, config=old, xrpo_inputs=inputs)
    share = lambda a: float((a - grpo)[correct, 0].abs().sum() / a[correct, 0].abs().sum())  # noqa: E731
    assert share(default) > 0.5 and share(before) < 0.02
    assert default[0:3, 0].argsort().tolist() == [0, 2, 1]  # group a ranked by novelty, at |A| ~ 1
    assert default[1, 0].item() > 0.9
