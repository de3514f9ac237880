"""The step metrics that count what a mechanism did, from the step's own batch."""

import torch

from xrpo_verl.icl_gate import ArmCounts
from xrpo_verl.verl_adapters.batch_view import BatchView
from xrpo_verl.verl_adapters.step_metrics import (
    allocation_metrics,
    icl_gate_metrics,
    icl_metrics,
    prefix_mask_metrics,
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
