"""Inputs of our estimators that the trainer computes from the batch."""

import torch
from omegaconf import OmegaConf

from xrpo_verl.verl_adapters.advantage_inputs import rollout_correction


def test_rollout_correction_weights_for_our_estimators_are_verls():
    """Our estimators replace verl's `_compute_advantage`, which is where verl computes the
    rollout-correction IS weights and rejection mask, so the trainer runs the same verl function:
    token IS weights are exp(old - rollout) truncated at the threshold, 0 outside the mask."""
    cfg = OmegaConf.create({"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": None})
    old = torch.tensor([[-1.0, -2.0, -1.0], [-0.5, -0.5, -3.0]])
    rollout = torch.tensor([[-1.5, -1.0, -1.0], [-0.5, -2.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w, new_mask, metrics = rollout_correction(cfg, old, rollout, mask)
    want = torch.clamp(torch.exp(old - rollout), max=2.0) * mask
    assert torch.allclose(w * mask, want, atol=1e-6)
    assert torch.equal(new_mask, mask) and "rollout_corr/rollout_is_mean" in metrics
    off, _, _ = rollout_correction(OmegaConf.create({"rollout_is": None}), old, rollout, mask)
    assert off is None  # verl's default: metrics only, no weights
