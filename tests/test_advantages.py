"""Group advantages: verl parity, loop-vs-vectorised, sharpening and novelty-bonus invariants."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xrpo_verl import advantages as A


def _random_batch(seed, n_groups=40, max_g=12, binary=True):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, max_g + 1, (n_groups,), generator=g).tolist()
    index = np.array([f"uid{q}" for q, s in enumerate(sizes) for _ in range(s)], dtype=object)
    perm = torch.randperm(len(index), generator=g).numpy()
    index = index[perm]
    b = len(index)
    scores = (torch.rand(b, generator=g) > 0.5).float() if binary else torch.rand(b, generator=g)
    return scores, index


def _loop_sharpen(adv, correct, s, index, coef, cap):
    out = adv.clone()
    for i in range(len(index)):
        members = [j for j in range(len(index)) if index[j] == index[i]]
        sbar = sum(float(s[j]) for j in members) / len(members)
        eta = math.exp(float(s[i]) - sbar)
        if correct[i]:
            out[i] += max(min(max(coef * (1 - eta), 0.0), cap * float(adv[i])), 0.0)
    return out


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("binary", [True, False])
def test_grpo_matches_verl_compute_grpo_outcome_advantage(norm, binary):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # the test may import verl

    scores, index = _random_batch(1 + binary, binary=binary)
    t = 7
    mask = torch.ones(len(index), t)
    mask[:, 5:] = torch.randint(0, 2, (len(index), 2)).float()
    token_rewards = torch.zeros(len(index), t)
    token_rewards[:, 2] = scores
    ref, _ = compute_grpo_outcome_advantage(token_rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    got = A.grpo_advantages(scores, index, norm_by_std=norm)
    assert torch.allclose(got.unsqueeze(-1) * mask, ref, rtol=1e-5, atol=1e-6)


def test_grpo_matches_verl_v1_multi_trajectory_path_on_planner_sessions():
    """The planner ablations run estimator `grpo`, i.e. verl V1's own `_compute_advantage`, which
    groups each session's final output by uid; XRPO runs ours. With planner rounds (sessions of one
    uid spread over rounds by their offsets, rows out of order) both must give the same advantages,
    or the ablation would compare two different GRPOs."""
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    scores, index = _random_batch(5)
    sessions: dict[str, int] = {}
    keys = []
    for u in index:  # one output per session, session ids 0, 1, ... per uid in submission order
        keys.append(f"{u}_{sessions.get(u, 0)}_0")
        sessions[u] = sessions.get(u, 0) + 1
    t = 6
    mask = torch.ones(len(index), t)
    mask[:, 4:] = torch.randint(0, 2, (len(index), 2), generator=torch.Generator().manual_seed(0)).float()
    rewards = torch.zeros(len(index), t)
    rewards[:, 3] = scores
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": index}
    )
    out = compute_advantage_for_multi_trajectories(data, keys, "grpo", num_repeat=8, norm_adv_by_std_in_grpo=True)
    got = A.grpo_advantages(scores, index)
    assert torch.allclose(got.unsqueeze(-1) * mask, out.batch["advantages"], rtol=1e-5, atol=1e-6)
    assert (got != 0).sum() > len(index) // 4  # mixed groups: the comparison is not of zeros


def test_grpo_hand_values_and_group_of_one():
    adv = A.grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 0.3, 0.3]), [0, 0, 0, 0, 1, 2, 2])
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    exp = [0.5 / (std + 1e-6), -0.5 / (std + 1e-6)] * 1
    assert adv[0].item() == pytest.approx(exp[0], rel=1e-6) and adv[1].item() == pytest.approx(exp[1], rel=1e-6)
    assert adv[4].item() == pytest.approx(5.0 / (1 + 1e-6))  # group of one: mean 0, std 1
    assert adv[5].item() == 0.0 and adv[6].item() == 0.0  # zero-variance group


def test_sharpening_matches_loop_version():
    scores, index = _random_batch(3)
    s = -torch.rand(len(index)) * 3
    adv = A.grpo_advantages(scores, index)
    correct = scores > 0.5
    got = A.sharpen_advantages(adv, correct, s, index, coef=2.5, cap_frac=0.5)
    assert torch.allclose(got, _loop_sharpen(adv, correct, s, index, 2.5, 0.5), atol=1e-6)


def test_sharpening_hand_value_and_all_correct_group_untouched():
    # group [correct, wrong]: A = +-0.7071; s = [-2, -1] -> sbar = -1.5, eta_0 = e^-0.5 = 0.6065
    adv = A.grpo_advantages(torch.tensor([1.0, 0.0]), ["a", "a"])
    s = torch.tensor([-2.0, -1.0])
    out = A.sharpen_advantages(adv, torch.tensor([True, False]), s, ["a", "a"])
    raw = 2.5 * (1 - math.exp(-0.5))  # 0.9837 > kappa*A = 0.3536 -> capped
    assert out[0].item() == pytest.approx(adv[0].item() + min(raw, 0.5 * adv[0].item()), rel=1e-6)
    assert out[1].item() == adv[1].item()
    all_ok = A.sharpen_advantages(
        torch.zeros(3), torch.ones(3, dtype=torch.bool), torch.tensor([-3.0, -1, -2]), [1, 1, 1]
    )
    assert torch.equal(all_ok, torch.zeros(3))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.0, 0.5, 1.0]), st.floats(-5, 0)), min_size=1, max_size=30)
)
def test_sharpening_never_lowers_and_never_touches_wrong_answers(rows):
    index = [r[0] for r in rows]
    scores = torch.tensor([r[1] for r in rows])
    s = torch.tensor([r[2] for r in rows])
    correct = scores >= 0.5  # partial credit 0.5 counts as correct: its A may be negative
    adv = A.grpo_advantages(scores, index)
    out = A.sharpen_advantages(adv, correct, s, index)
    assert torch.all(out >= adv)
    assert torch.equal(out[~correct], adv[~correct])
    assert torch.all(out - adv <= 0.5 * adv.clamp(min=0) + 1e-6)


def test_all_features_off_recovers_plain_grpo():
    scores, index = _random_batch(5)
    adv = A.grpo_advantages(scores, index)
    correct = scores > 0.5
    s = -torch.rand(len(index))
    assert torch.equal(A.sharpen_advantages(adv, correct, s, index, coef=0.0), adv)
    nov = torch.rand(len(index))
    assert torch.equal(A.add_novelty_bonus(adv, correct, nov, scale=0.0), adv)
    shaped = A.novelty_shaped_scores(scores, correct, nov, index, scale=0.0)
    assert torch.equal(A.grpo_advantages(shaped, index), adv)


def test_novelty_bonus_after_norm_and_before_norm_by_hand():
    adv = torch.tensor([0.0, 0.0, 0.0])  # all-correct group
    correct = torch.tensor([True, True, False])
    nov = torch.tensor([0.4, 0.2, 0.9])
    out = A.add_novelty_bonus(adv, correct, nov, scale=0.01)
    assert torch.allclose(out, torch.tensor([0.004, 0.002, 0.0]))
    # before-norm: nov / group max (0.9), times gate, gated on correct
    sc = A.novelty_shaped_scores(
        torch.tensor([1.0, 1.0, 0.0]), correct, nov, ["g"] * 3, scale=0.1, gate=torch.full((3,), 0.5)
    )
    assert torch.allclose(sc, torch.tensor([1 + 0.1 * 0.5 * 0.4 / 0.9, 1 + 0.1 * 0.5 * 0.2 / 0.9, 0.0]))


def test_before_norm_divides_by_the_group_max_over_all_rows_then_gates():
    """Released code: novelty is normalised by its group max over every row, correct or not, then
    gated by 1[R > 0]. Here a wrong row (0.8) holds the max, so the correct rows get 0.2/0.8 and
    0.4/0.8 (a max over correct rows only would give 0.5 and 1); group h has max 0.5."""
    r = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    correct = r > 0
    nov = torch.tensor([0.2, 0.4, 0.8, 0.0, 0.5, 0.0])  # ungated r_int
    index = ["g", "g", "g", "g", "h", "h"]
    sc = A.novelty_shaped_scores(r, correct, nov, index, scale=0.1)
    assert torch.allclose(sc, torch.tensor([1.025, 1.05, 0.0, 0.0, 1.1, 0.0]))
    adv = A.grpo_advantages(sc, index)
    g = torch.tensor([1.025, 1.05, 0.0, 0.0], dtype=torch.float64)
    assert torch.allclose(adv[:4].double(), (g - g.mean()) / (g.std() + 1e-6), atol=1e-6)
    # after-norm gates the same ungated input: the wrong row's 0.8 is never added
    out = A.add_novelty_bonus(adv, correct, nov, scale=0.1)
    assert torch.allclose(out - adv, torch.tensor([0.02, 0.04, 0.0, 0.0, 0.05, 0.0]))


def test_sequence_mean_logprob_and_entropy_use_the_mask():
    lp = torch.tensor([[-1.0, -3.0, -100.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert torch.allclose(A.sequence_mean_logprob(lp, mask), torch.tensor([-2.0, 0.0]))


def test_novelty_ratio_is_one_at_the_group_mean():
    eta = A.novelty_ratio(torch.tensor([-1.0, -3.0, -2.0, -0.5]), ["a", "a", "a", "b"])
    assert torch.allclose(eta, torch.tensor([math.e, math.exp(-1), 1.0, 1.0]))


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: A.grpo_advantages(torch.ones(3), [0, 0]), "shape"),
        (lambda: A.grpo_advantages(torch.tensor([1.0, float("nan")]), [0, 0]), "NaN"),
        (lambda: A.grpo_advantages(torch.ones(0), []), "empty"),
        (lambda: A.sharpen_advantages(torch.ones(2), torch.ones(2), torch.ones(2), [0, 0]), "bool"),
        (
            lambda: A.sharpen_advantages(
                torch.ones(2), torch.ones(2, dtype=torch.bool), torch.ones(2), [0, 0], coef=-1
            ),
            "coef",
        ),
        (
            lambda: A.add_novelty_bonus(torch.ones(2), torch.ones(2, dtype=torch.bool), -torch.ones(2), scale=1),
            "novelty",
        ),
        (lambda: A.sequence_mean_logprob(torch.ones(2, 3), torch.ones(2, 4)), "match"),
    ],
)
def test_bad_input_raises(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def test_bonus_effect_by_hand():
    """The trainer's per-signal diagnostics: |delta| share over correct rows and ranking changes."""
    idx = np.array(["a", "a", "a", "b", "b"], dtype=object)
    without = torch.tensor([1.0, 1.0, -2.0, 0.5, -0.5])
    with_ = torch.tensor([1.2, 1.0, -2.0, 0.5, -0.5])  # breaks the tie between a's correct rows
    correct = torch.tensor([True, True, False, True, False])
    eff = A.bonus_effect(with_, without, correct, idx)
    assert eff["rows"] == 1.0
    assert eff["abs_mean"] == pytest.approx(0.2 / 3)
    assert eff["share"] == pytest.approx(0.2 / (1.2 + 1.0 + 0.5))
    assert eff["rank_changed"] == 1.0  # group a (2 correct) reordered; group b has 1 correct: not counted
    assert A.bonus_effect(without, without, correct, idx) == {
        "rows": 0.0,
        "abs_mean": 0.0,
        "share": 0.0,
        "rank_changed": 0.0,
    }


# ---------------------------------------------------------------- advantage_parts, the one pass
FEATURES = {
    "grpo": frozenset(),
    "xrpo": frozenset({"sharpening"}),
    "extra": frozenset({"novelty"}),
    "xrpo_extra": frozenset({"sharpening", "novelty"}),
}


def _old_sequence_advantages(scores, index, inputs, *, features, xrpo_cfg, extra_cfg, norm_adv_by_std):
    """The composition the estimators ran before `advantage_parts` (verl_adapters/estimators.py,
    `sequence_advantages`, at 729aaa7), verbatim but for its config parsing: the reference."""
    novelty_cfg = extra_cfg.novelty
    use_novelty = "novelty" in features
    if use_novelty and novelty_cfg.placement == "before_norm":
        scores = A.novelty_shaped_scores(
            scores, inputs["correct"], inputs["novelty"], index, scale=novelty_cfg.scale, gate=inputs["gate"]
        )
    adv = A.grpo_advantages(scores, index, norm_by_std=norm_adv_by_std)
    if "sharpening" in features:
        sharp = xrpo_cfg.sharpening
        adv = A.sharpen_advantages(
            adv, inputs["correct"], inputs["seq_logp_mean"], index, coef=sharp.coef, cap_frac=sharp.cap_frac
        )
    if use_novelty and novelty_cfg.placement == "after_norm":
        adv = A.add_novelty_bonus(adv, inputs["correct"], inputs["novelty"], scale=novelty_cfg.scale)
    return adv


def _parts_batch(seed):
    """A random step: groups of 1 to 12 in shuffled order, partial-credit rewards, likelihoods,
    novelty (some zero) and a gate."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 13, (30,), generator=g).tolist()
    index = np.array([f"uid{q}" for q, s in enumerate(sizes) for _ in range(s)], dtype=object)
    index = index[torch.randperm(len(index), generator=g).numpy()]
    b = len(index)
    scores = torch.tensor([0.0, 0.25, 1.0])[torch.randint(0, 3, (b,), generator=g)]
    novelty = torch.rand(b, generator=g) * (torch.rand(b, generator=g) > 0.3)
    return index, {
        "scores": scores,
        "correct": scores >= 1.0,
        "seq_logp_mean": -torch.rand(b, generator=g) * 3,
        "novelty": novelty,
        "gate": torch.rand(b, generator=g),
    }


@pytest.mark.parametrize("estimator", sorted(FEATURES))
@pytest.mark.parametrize("placement", ["before_norm", "after_norm"])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_advantage_parts_give_exactly_the_old_advantages_and_stages(estimator, placement, norm, seed):
    """Bit for bit: the final advantages are the old estimator's, and each stage is the old
    estimator run without the later features (what the step metrics used to recompute)."""
    from xrpo_verl.config import ExTraConfig, XRPOConfig

    xrpo_cfg = XRPOConfig.from_dict({"sharpening": {"coef": 1.7, "cap_frac": 0.4}})
    extra_cfg = ExTraConfig.from_dict({"novelty": {"scale": 0.3, "placement": placement}})
    index, x = _parts_batch(seed)
    features = FEATURES[estimator]
    parts = A.advantage_parts(
        x["scores"],
        index,
        correct=x["correct"],
        seq_logp_mean=x["seq_logp_mean"],
        novelty=x["novelty"],
        gate=x["gate"],
        sharpening=xrpo_cfg.sharpening if "sharpening" in features else None,
        novelty_bonus=extra_cfg.novelty if "novelty" in features else None,
        norm_by_std=norm,
    )

    def old(feats):
        return _old_sequence_advantages(
            x["scores"],
            index,
            x,
            features=frozenset(feats),
            xrpo_cfg=xrpo_cfg,
            extra_cfg=extra_cfg,
            norm_adv_by_std=norm,
        )

    assert torch.equal(parts.advantages, old(features))
    assert torch.equal(parts.grpo, old(()))
    assert torch.equal(parts.sharpened, old(features & {"sharpening"}))
    if "sharpening" in features:
        assert torch.equal(parts.eta, A.novelty_ratio(x["seq_logp_mean"], index))
    else:
        assert parts.eta is None
    assert (parts.novelty is not None) == ("novelty" in features)
    if "sharpening" not in features:
        assert torch.equal(parts.sharpening_bonus, torch.zeros_like(parts.grpo))
    if "novelty" not in features:
        assert torch.equal(parts.novelty_bonus, torch.zeros_like(parts.grpo))
    torch.testing.assert_close(parts.grpo + parts.sharpening_bonus + parts.novelty_bonus, parts.advantages)


def test_token_advantages_spread_over_the_mask():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    got = A.token_advantages(torch.tensor([2.0, -1.0], dtype=torch.float64), mask, torch.float32)
    assert got.dtype == torch.float32
    assert got.tolist() == [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]]
