"""Advantage estimators `xrpo`, `extra` and `xrpo_extra`, registered with verl's `register_adv_est`.

Each is GRPO (or Dr.GRPO with `algorithm.norm_adv_by_std_in_grpo=false`) plus:
- `xrpo`: novelty-guided sharpening of correct responses (XRPO §2.4);
- `extra`: the correctness-gated embedding novelty bonus (ExTra §3.1);
- `xrpo_extra`: both, sharpening first.

verl calls registered estimators with `token_level_rewards, response_mask, index, config` only
(`ray_trainer.compute_advantage`). The sequence log-likelihoods and novelty scores come from our
trainer (`trainer.v1.trainer_mode=xrpo`) as `xrpo_inputs`; without them the estimator raises
instead of silently falling back to GRPO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from xrpo_verl import advantages as adv_lib
from xrpo_verl.verl_adapters.config import ESTIMATOR_FEATURES, TRAINER_MODE, read_method_configs


@dataclass(frozen=True)
class XrpoAdvantageInputs:
    """Per-response inputs that only the xrpo trainer can compute.

    Attributes:
        seq_logp_mean: (B,) float, s(y_i) = mean old log-prob over generated tokens (prefix tokens excluded).
        correct: (B,) bool, verified correct (reward > 0); False on padding rows.
        novelty: (B,) float, ExTra r_int(x, y_i) from the novelty memory (already 0 when incorrect); 0 on padding.
        gate: (B,) float or None, g(x) = exp(-λ EMA Var[R(x)]) for `placement=before_norm`; None means g = 1.
    """

    seq_logp_mean: torch.Tensor
    correct: torch.Tensor
    novelty: torch.Tensor
    gate: torch.Tensor | None = None

    def check(self, batch_size: int) -> None:
        for name in ("seq_logp_mean", "correct", "novelty"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (batch_size,):
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"xrpo_inputs.{name} must be a tensor of shape ({batch_size},), got {shape}")
        if self.correct.dtype != torch.bool:
            raise ValueError(f"xrpo_inputs.correct must be a bool tensor, got {self.correct.dtype}")


def sequence_advantages(
    scores: torch.Tensor,
    index: Sequence,
    inputs: XrpoAdvantageInputs,
    *,
    features: frozenset[str],
    algorithm_config,
    norm_adv_by_std: bool,
) -> torch.Tensor:
    """One advantage per response: GRPO, then the selected features. Returns (B,) float."""
    xrpo_cfg, extra_cfg = read_method_configs(algorithm_config)
    novelty_cfg = extra_cfg.novelty
    use_novelty = "novelty" in features
    if use_novelty and novelty_cfg.placement == "before_norm":
        # ExTra Option A: novelty shapes the score, then the group normalisation runs.
        scores = adv_lib.novelty_shaped_scores(
            scores, inputs.correct, inputs.novelty, index, scale=novelty_cfg.scale, gate=inputs.gate
        )
    adv = adv_lib.grpo_advantages(scores, index, norm_by_std=norm_adv_by_std)
    if "sharpening" in features:
        # A+_i = A_i + min(max(λ_nov (1 − η_i), 0), κ A_i) for correct i   (XRPO §2.4)
        sharp = xrpo_cfg.sharpening
        adv = adv_lib.sharpen_advantages(
            adv, inputs.correct, inputs.seq_logp_mean, index, coef=sharp.coef, cap_frac=sharp.cap_frac
        )
    if use_novelty and novelty_cfg.placement == "after_norm":
        # A_i = GRPO(R)_i + α · r_int(x, y_i)   (ExTra §3.1, paper form)
        adv = adv_lib.add_novelty_bonus(adv, inputs.correct, inputs.novelty, scale=novelty_cfg.scale)
    return adv


def _make_estimator(name: str):
    features = ESTIMATOR_FEATURES[name]

    def estimator(token_level_rewards, response_mask, index=None, config=None, xrpo_inputs=None, **verl_kwargs):
        """Args: token_level_rewards (B, T), response_mask (B, T), index (B,) uids, config = `algorithm`.

        Returns: (advantages, returns), both (B, T) and 0 where `response_mask` is 0.
        """
        if xrpo_inputs is None:
            raise ValueError(
                f"advantage estimator {name!r} needs sequence log-likelihoods and novelty scores that verl does not "
                f"pass; run it with trainer.v1.trainer_mode={TRAINER_MODE!r} (it never falls back to GRPO)."
            )
        if index is None or config is None:
            raise ValueError(f"advantage estimator {name!r} needs `index` (uids) and `config` (algorithm config)")
        batch_size = token_level_rewards.shape[0]
        xrpo_inputs.check(batch_size)
        index = list(np.asarray(index, dtype=object))
        scores = token_level_rewards.sum(dim=-1)
        adv = sequence_advantages(
            scores,
            index,
            xrpo_inputs,
            features=features,
            algorithm_config=config,
            norm_adv_by_std=bool(config.get("norm_adv_by_std_in_grpo", True)),
        )
        adv = adv.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
        return adv, adv

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    return estimator


compute_xrpo_advantage = register_adv_est("xrpo")(_make_estimator("xrpo"))
compute_extra_advantage = register_adv_est("extra")(_make_estimator("extra"))
compute_xrpo_extra_advantage = register_adv_est("xrpo_extra")(_make_estimator("xrpo_extra"))
