"""The step metrics that count what a mechanism did, from the step's own batch."""

import numpy as np
import pytest
import torch

from xrpo_verl.icl_gate import ArmCounts
from xrpo_verl.verl_adapters.advantage_inputs import view_advantage_parts
from xrpo_verl.verl_adapters.batch_view import BatchView
from xrpo_verl.verl_adapters.step_metrics import (
    allocation_metrics,
    group_signal_metrics,
    icl_gate_metrics,
    icl_metrics,
    icl_reliance_metrics,
    prefix_mask_metrics,
    selection_metrics,
    signal_metrics,
)


def _view(resp_lens, masks, kinds, scores=None):
    T = max(resp_lens)
    mask = torch.zeros(len(resp_lens), T)
    for i, m in enumerate(masks):
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    B = len(resp_lens)
    rm = torch.zeros(B, T)
    if scores is not None:
        rm[:, 0] = torch.tensor(scores, dtype=torch.float32)
    return BatchView(
        uids=[str(i) for i in range(B)],
        keys=["k"] * B,
        kinds=kinds,
        raw_prompts=[None] * B,
        responses=[torch.arange(n) for n in resp_lens],
        prompts=None,
        entropy=None,
        mask=mask,
        rm_scores=rm,
        old_log_probs=torch.zeros(B, T),
        valid=torch.tensor([True, True, True, False]),
        acc=rm[:, 0].clone(),
    )


def test_prefix_mask_metrics_count_masked_response_tokens_per_kind():
    view = _view(
        [5, 4, 6, 3],
        [[0, 0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0]],
        ["guided", "base", "guided", "guided"],
        scores=[1.0, 0.0, 0.0, 1.0],
    )  # the last row is verl padding: ignored
    assert prefix_mask_metrics(view) == {
        "xrpo/prefix/guided_rows": 2.0,
        "xrpo/prefix/guided_rows_masked": 2.0,
        "xrpo/prefix/masked_prefix_tokens": 5.0,
        "xrpo/prefix/masked_tokens_other_rows": 0.0,
        "xrpo/guided/rollouts": 2.0,
        "xrpo/guided/success_rate": 0.5,  # one of the two valid guided rows is correct
    }
    unmasked = _view([5, 4, 6, 3], [[1] * 5, [1, 1, 1, 0], [1] * 6, [1] * 3], ["guided", "base", "guided", "base"])
    m = prefix_mask_metrics(unmasked)
    assert m["xrpo/prefix/guided_rows_masked"] == 0.0 and m["xrpo/prefix/masked_tokens_other_rows"] == 1.0


def test_switched_off_mechanisms_log_exact_zeros_under_every_key():
    off = signal_metrics(None)
    assert off and set(off.values()) == {0.0}
    assert set(icl_metrics([], 0, 0, 0).values()) == {0.0}
    assert set(icl_gate_metrics(0.0, ArmCounts(), ArmCounts(), 0).values()) == {0.0}


def test_icl_gate_metrics_compare_the_arms_at_equal_prompts():
    m = icl_gate_metrics(0.25, ArmCounts(8, 2), ArmCounts(12, 0), 0)
    assert m["xrpo/icl/icl_success_rate"] == 0.25 and m["xrpo/icl/zero_shot_success_rate"] == 0.0
    assert m["xrpo/icl/gate_share"] == 0.25 and m["xrpo/icl/zero_shot_rollouts"] == 12.0


def test_allocation_metrics_are_over_the_groups_given():
    assert allocation_metrics([4, 2, 6]) == {
        "xrpo/alloc/n_q/mean": 4.0,
        "xrpo/alloc/n_q/min": 2.0,
        "xrpo/alloc/n_q/max": 6.0,
    }


def _view_of(uids, kinds, correct, old_lp, valid=None):
    """One token per response unless old_lp rows are longer; mask 1 on every token."""
    old = torch.tensor(old_lp, dtype=torch.float32)
    B, T = old.shape
    acc = torch.tensor([1.0 if c else 0.0 for c in correct])
    rm = torch.zeros(B, T)
    rm[:, 0] = acc
    return BatchView(
        uids=uids,
        keys=uids,
        kinds=kinds,
        raw_prompts=[None] * B,
        responses=[torch.arange(T) for _ in range(B)],
        prompts=None,
        entropy=None,
        mask=torch.ones(B, T),
        rm_scores=rm,
        old_log_probs=old,
        valid=torch.tensor(valid if valid is not None else [True] * B),
        acc=acc,
    )


def test_group_signal_metrics_count_mixed_bare_groups_and_their_rollouts():
    view = _view_of(
        ["a", "a", "a", "b", "b", "c", "c"],
        ["base", "base", "icl", "base", "round", "base", "base"],
        [True, False, True, True, True, False, True],
        [[0.0]] * 7,
        valid=[True, True, True, True, True, True, False],  # c's second row is padding
    )
    # a: base rows mixed (the ICL row does not count); b: all correct; c: one valid row
    assert group_signal_metrics(view) == {"xrpo/groups/mixed": 1.0, "xrpo/groups/mixed_rollout_share": 2 / 5}


def test_selection_metrics_compare_the_trained_with_the_passed_over():
    m = selection_metrics(np.array([0.9, 0.2, 0.6, 0.4]), np.array([0, 2]), np.array([True, True, False, False]), 7)
    assert m["xrpo/select/candidates"] == 4 and m["xrpo/select/prompts_tracked"] == 7
    assert m["xrpo/select/score_trained"] == pytest.approx(0.75)
    assert m["xrpo/select/score_passed_over"] == pytest.approx(0.3)
    assert m["xrpo/select/trained_with_record"] == 1


def test_icl_reliance_is_the_log_likelihood_the_examples_add_to_a_correct_hinted_response():
    # row 0: a correct ICL row, 2 tokens; under the examples (rollout) log p = -1 per token, bare -3
    view = _view_of(
        ["a", "a", "b"], ["icl", "icl", "base"], [True, False, True], [[-3.0, -3.0], [-5.0, -5.0], [-2.0, -2.0]]
    )
    rollout = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-2.0, -1.9]])
    m = icl_reliance_metrics(view, rollout, "strip_icl")
    assert m["xrpo/icl/reliance_rows"] == 1  # the wrong ICL row is no success
    assert m["xrpo/icl/reliance_seq"] == pytest.approx(4.0)
    assert m["xrpo/icl/reliance_token"] == pytest.approx(2.0)
    assert m["xrpo/icl/reliance_floor_token"] == pytest.approx(0.05)  # the engine-trainer mismatch
    # with_icl never scores y under the bare prompt, and no log-probs mean nothing to measure: zero
    assert set(icl_reliance_metrics(view, rollout, "with_icl").values()) == {0.0}
    assert set(icl_reliance_metrics(view, None, "strip_icl").values()) == {0.0}


def _old_signal_metrics(view, novelty, features, xrpo_cfg, extra_cfg, norm):
    """`signal_metrics` as it was before the advantage parts (at 729aaa7): each feature's effect by
    rerunning the estimator's composition without it, on the valid rows. The reference."""
    from xrpo_verl import advantages as A

    out = {
        f"xrpo/{f}/bonus_{n}": 0.0
        for f in ("sharpening", "novelty")
        for n in ("rows", "abs_mean", "share", "rank_changed")
    }
    out["xrpo/novelty/positive_correct"] = 0.0
    out["xrpo/novelty/mean_correct"] = 0.0
    out["xrpo/sharpening/eligible_rows"] = 0.0
    out["xrpo/sharpening/seq_logp_spread"] = 0.0
    valid = view.valid
    index = list(np.array(view.uids, dtype=object)[valid.numpy()])
    correct, seq, nov = view.correct[valid], view.seq_logp_mean[valid], novelty[valid]

    def seq_adv(feats):
        scores = view.scores[valid]
        if "novelty" in feats and extra_cfg.novelty.placement == "before_norm":
            scores = A.novelty_shaped_scores(scores, correct, nov, index, scale=extra_cfg.novelty.scale, gate=None)
        adv = A.grpo_advantages(scores, index, norm_by_std=norm)
        if "sharpening" in feats:
            s = xrpo_cfg.sharpening
            adv = A.sharpen_advantages(adv, correct, seq, index, coef=s.coef, cap_frac=s.cap_frac)
        if "novelty" in feats and extra_cfg.novelty.placement == "after_norm":
            adv = A.add_novelty_bonus(adv, correct, nov, scale=extra_cfg.novelty.scale)
        return adv

    if "sharpening" in features:
        plain = seq_adv(())
        effect = A.bonus_effect(seq_adv({"sharpening"}), plain, correct, index)
        out.update({f"xrpo/sharpening/bonus_{n}": v for n, v in effect.items()})
        log_eta = torch.log(A.novelty_ratio(seq, index).double())
        out["xrpo/sharpening/eligible_rows"] = float((correct & (plain > 0) & (log_eta < -1e-4)).sum())
        out["xrpo/sharpening/seq_logp_spread"] = float(log_eta.abs().mean()) if len(log_eta) else 0.0
    if "novelty" in features:
        effect = A.bonus_effect(seq_adv(features), seq_adv(features - {"novelty"}), correct, index)
        out.update({f"xrpo/novelty/bonus_{n}": v for n, v in effect.items()})
        gated = nov * correct
        out["xrpo/novelty/positive_correct"] = float((gated > 0).sum())
        out["xrpo/novelty/mean_correct"] = float(gated[correct].mean()) if correct.any() else 0.0
    return out


@pytest.mark.parametrize("estimator", ["grpo", "xrpo", "extra", "xrpo_extra"])
@pytest.mark.parametrize("placement", ["before_norm", "after_norm"])
@pytest.mark.parametrize("norm", [True, False])
def test_signal_metrics_from_the_parts_equal_the_old_recomputation(estimator, placement, norm):
    """The metrics read the advantage parts the trainer trained on; their values are exactly what
    rerunning the estimator without each feature gave, verl's padding rows (their own uid) apart."""
    from xrpo_verl.config import ExTraConfig, XRPOConfig
    from xrpo_verl.verl_adapters.config import ESTIMATOR_FEATURES, PluginSettings

    g = torch.Generator().manual_seed(7)
    sizes = torch.randint(1, 9, (25,), generator=g).tolist()
    uids = [f"u{q}" for q, n in enumerate(sizes) for _ in range(n)] + ["pad"] * 3
    b, t = len(uids), 4
    acc = torch.tensor([0.0, 0.25, 1.0])[torch.randint(0, 3, (b,), generator=g)]
    valid = torch.tensor([u != "pad" for u in uids])
    rm = torch.zeros(b, t)
    rm[:, -1] = acc * valid
    view = BatchView(
        uids=uids,
        keys=uids,
        kinds=["base"] * b,
        raw_prompts=[None] * b,
        responses=[torch.arange(t) for _ in range(b)],
        prompts=None,
        entropy=None,
        mask=torch.ones(b, t),
        rm_scores=rm,
        old_log_probs=-torch.rand(b, t, generator=g) * 2,
        valid=valid,
        acc=acc * valid,
    )
    novelty = torch.rand(b, generator=g) * (torch.rand(b, generator=g) > 0.3) * valid
    settings = PluginSettings(
        xrpo=XRPOConfig.from_dict({}),
        extra=ExTraConfig.from_dict({"novelty": {"scale": 0.5, "placement": placement}}),
        adv_estimator=estimator,
        norm_adv_by_std=norm,
        rollout_n=8,
    )
    parts = view_advantage_parts(view, novelty, None, settings)  # the trainer's one pass
    want = _old_signal_metrics(view, novelty, ESTIMATOR_FEATURES[estimator], settings.xrpo, settings.extra, norm)
    got = signal_metrics(view, parts)
    assert {k: v for k, v in got.items() if k in want} == want
    assert set(got) - set(want) == {"xrpo/novelty/mean_all", "xrpo/novelty/correct_distinct"}  # zeros here
    if estimator != "grpo":
        assert any(v != 0 for v in want.values())  # the comparison is not of zeros alone
