"""Advantage estimators `xrpo`, `extra` and `xrpo_extra`, registered with verl's `register_adv_est`.

Each is GRPO (or Dr.GRPO with `algorithm.norm_adv_by_std_in_grpo=false`) plus:
- `xrpo`: novelty-guided sharpening of correct responses (XRPO §2.4);
- `extra`: the correctness-gated embedding novelty bonus (ExTra §3.1);
- `xrpo_extra`: both, sharpening first.

Each is a thin wrapper over `advantages.advantage_parts`, the function our trainer calls itself
(it holds the parsed settings and needs the parts for its metrics, so it does not go through
verl's registry). They are registered so that verl knows the names: verl calls a registered
estimator with `token_level_rewards, response_mask, index, config` only
(`ray_trainer.compute_advantage`), and ours also need the sequence log-likelihoods and novelty
scores (`xrpo_inputs`); without them the estimator raises instead of silently falling back to GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from xrpo_verl import advantages as adv_lib
from xrpo_verl.verl_adapters.config import TRAINER_MODE, feature_configs, read_method_configs


@dataclass(frozen=True)
class XrpoAdvantageInputs:
    """Per-response inputs that only the xrpo trainer can compute.

    Attributes:
        seq_logp_mean: (B,) float, s(y_i) = mean old log-prob over generated tokens (prefix tokens excluded).
        correct: (B,) bool, verified correct (reward > 0); False on padding rows.
        novelty: (B,) float, ExTra r_int(x, y_i) from the novelty memory, ungated (the estimator gates by
            correctness); 0 on padding.
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


def _make_estimator(name: str):
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
        parts = adv_lib.advantage_parts(
            token_level_rewards.sum(dim=-1),
            index,
            correct=xrpo_inputs.correct,
            seq_logp_mean=xrpo_inputs.seq_logp_mean,
            novelty=xrpo_inputs.novelty,
            gate=xrpo_inputs.gate,
            norm_by_std=bool(config.get("norm_adv_by_std_in_grpo", True)),
            **feature_configs(name, *read_method_configs(config)),
        )
        adv = adv_lib.token_advantages(parts.advantages, response_mask, token_level_rewards.dtype)
        return adv, adv

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    return estimator


compute_xrpo_advantage = register_adv_est("xrpo")(_make_estimator("xrpo"))
compute_extra_advantage = register_adv_est("extra")(_make_estimator("extra"))
compute_xrpo_extra_advantage = register_adv_est("xrpo_extra")(_make_estimator("xrpo_extra"))
