"""ICL's earned share (ours [I]): seed an all-fail prompt with ICL only as often as ICL has beaten
zero-shot resampling on all-fail prompts. Pure numpy/scipy; never imports verl.

XRPO §2.3 gives every all-fail prompt's round rollouts an ICL prompt. That assumes a model that
learns from examples in its context; one that does not spends those rollouts worse than fresh
zero-shot samples would. The gate measures both arms on the same kind of prompt and splits by
what each earned. Over the all-fail prompts of past planner rounds, for arm a in {icl, zs}:

    S_a, F_a  = verified successes and failures among arm a's rollouts, every step's counts
                decayed by gamma before the new ones are added (the model changes)
    theta_a   ~ Beta(1 + S_a, 1 + F_a)                     posterior of arm a's success rate
    p_better  = P(theta_icl > theta_zs)                    `p_icl_better`
    share     = m + (1 - 2m) * p_better                    `icl_share`, m = min_share

Each all-fail prompt gets ICL with probability `share` (`use_icl`, a draw seeded by the step and
the prompt, so a resumed run decides the same). With no data p_better = 1/2; an arm that keeps
losing is still tried a share m of the time, so a model that starts to learn in context is
noticed. `gate=always` is the paper: share = 1.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from scipy import stats

GRID = 2049  # points of the integral in `p_icl_better`


def p_icl_better(s_icl: float, f_icl: float, s_zs: float, f_zs: float) -> float:
    """P(theta_icl > theta_zs) for theta_a ~ Beta(1 + S_a, 1 + F_a), independent.

    = integral over x of pdf_icl(x) * cdf_zs(x), by the trapezoid rule on `GRID` points.
    """
    if min(s_icl, f_icl, s_zs, f_zs) < 0:
        raise ValueError(f"counts must be >= 0, got {s_icl}, {f_icl}, {s_zs}, {f_zs}")
    x = np.linspace(0.0, 1.0, GRID)
    integrand = stats.beta.pdf(x, 1 + s_icl, 1 + f_icl) * stats.beta.cdf(x, 1 + s_zs, 1 + f_zs)
    return float(np.clip(np.trapezoid(integrand, x), 0.0, 1.0))


def icl_share(p_better: float, min_share: float) -> float:
    """share = m + (1 - 2m) * p_better: the probability that an all-fail prompt gets ICL."""
    if not 0.0 <= min_share <= 0.5:
        raise ValueError(f"min_share = {min_share} must be in [0, 0.5]")
    return min_share + (1.0 - 2.0 * min_share) * p_better


@dataclass
class ArmCounts:
    """Decayed rollouts and verified successes of one arm on all-fail prompts."""

    rollouts: float = 0.0
    successes: float = 0.0

    @property
    def failures(self) -> float:
        return self.rollouts - self.successes


class ICLGate:
    """The gate's state across steps (saved with the plugin state).

    Args:
        mode: "always" (the paper: every all-fail prompt gets ICL) or "earned" (module docstring).
        min_share: m, the least share either arm keeps.
        decay: gamma in (0, 1], applied to both arms' counts once a step before its counts are added.
    """

    def __init__(self, mode: str = "earned", min_share: float = 0.1, decay: float = 0.9):
        if mode not in ("always", "earned"):
            raise ValueError(f"ICL gate mode {mode!r}: choose 'always' or 'earned'")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay = {decay} must be in (0, 1]")
        icl_share(0.5, min_share)  # validates min_share
        self.mode, self.min_share, self.decay = mode, min_share, decay
        self.icl, self.zero_shot = ArmCounts(), ArmCounts()

    def share(self) -> float:
        """Probability that an all-fail prompt gets ICL this step."""
        if self.mode == "always":
            return 1.0
        p = p_icl_better(self.icl.successes, self.icl.failures, self.zero_shot.successes, self.zero_shot.failures)
        return icl_share(p, self.min_share)

    def use_icl(self, share: float, step: int, prompt_key: str) -> bool:
        """One all-fail prompt's draw: ICL with probability `share`, seeded by (step, prompt)."""
        if share >= 1.0:
            return True
        rng = np.random.default_rng([int(step), zlib.crc32(str(prompt_key).encode())])
        return bool(rng.random() < share)

    def update(self, icl: ArmCounts, zero_shot: ArmCounts) -> None:
        """Decay both arms once, then add this step's rollouts and successes."""
        for mine, new in ((self.icl, icl), (self.zero_shot, zero_shot)):
            if not 0 <= new.successes <= new.rollouts:
                raise ValueError(f"successes {new.successes} must be in [0, rollouts = {new.rollouts}]")
            mine.rollouts = self.decay * mine.rollouts + new.rollouts
            mine.successes = self.decay * mine.successes + new.successes

    def state_dict(self) -> dict:
        return {"icl": vars(self.icl).copy(), "zero_shot": vars(self.zero_shot).copy()}

    def load_state_dict(self, d: dict) -> None:
        self.icl, self.zero_shot = ArmCounts(**d["icl"]), ArmCounts(**d["zero_shot"])
