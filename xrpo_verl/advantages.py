"""Group advantages and their XRPO/ExTra modifications. Pure torch; never imports verl.

Shapes: B responses, T response tokens. `index` (B,) holds a hashable group id per response
(verl's `uid`); groups may have different sizes. Everything is vectorised with scatter-add, so
B = 8192 costs microseconds, not a Python loop over rows.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from xrpo_verl.config import NoveltyBonusConfig, SharpeningConfig


def group_codes(index: Sequence[Hashable] | np.ndarray) -> tuple[torch.Tensor, int]:
    """Map group ids to dense codes 0..G-1.

    Returns:
        codes: (B,) int64, equal ids share a code.
        G: number of distinct groups.
    """
    arr = np.asarray(index)
    if arr.ndim != 1:
        raise ValueError(f"index must be one-dimensional (B,), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("index is empty: no responses to group")
    try:
        uniq, inv = np.unique(arr, return_inverse=True)
        n_groups = len(uniq)
    except TypeError:  # unorderable mixed ids: fall back to first-seen codes
        seen: dict[Hashable, int] = {}
        inv = np.array([seen.setdefault(x, len(seen)) for x in arr.tolist()])
        n_groups = len(seen)
    return torch.as_tensor(inv.reshape(-1), dtype=torch.long), n_groups


def _check_rows(name: str, t: torch.Tensor, b: int | None = None) -> int:
    """Check `t` is (B,) (and B == b when given); return B."""
    if t.dim() != 1:
        raise ValueError(f"{name} must be one-dimensional (B,), got shape {tuple(t.shape)}")
    if b is not None and t.shape[0] != b:
        raise ValueError(f"{name} must have shape ({b},) to match, got {tuple(t.shape)}")
    return t.shape[0]


def _group_mean(x: torch.Tensor, codes: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row group mean (B,) and per-row group size (B,), float64."""
    ones = torch.ones_like(x)
    count = torch.zeros(n_groups, dtype=x.dtype).scatter_add_(0, codes, ones)
    total = torch.zeros(n_groups, dtype=x.dtype).scatter_add_(0, codes, x)
    return (total / count)[codes], count[codes]


def grpo_advantages(
    scores: torch.Tensor, index: Sequence[Hashable] | np.ndarray, *, norm_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Outcome GRPO advantage, numerically as verl's `compute_grpo_outcome_advantage`.

    A_i = (R_i - mean_g R) / (std_g R + eps)   (std unbiased; Dr.GRPO drops the division)
    A group of one uses mean 0 and std 1, as verl does.

    Args:
        scores: (B,) sequence rewards R_i.
        index: (B,) group ids.
    Returns:
        (B,) advantages in the dtype of `scores`.
    """
    codes, n_groups = group_codes(index)
    _check_rows("scores", scores, codes.shape[0])
    if not torch.all(torch.isfinite(scores)):
        raise ValueError("scores contain NaN or inf")
    x = scores.detach().to(torch.float64)
    mean, count = _group_mean(x, codes, n_groups)
    dev = x - mean
    sq = torch.zeros(n_groups, dtype=torch.float64).scatter_add_(0, codes, dev * dev)[codes]
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    adv = (x - mean) / (std + eps) if norm_by_std else x - mean
    return adv.to(scores.dtype)


def sequence_mean_logprob(log_probs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """s(y) = (1/|y|) sum_t log pi(y_t | x, y_<t) over the response mask.

    Args:
        log_probs: (B, T) token log-probs.
        response_mask: (B, T) 1 on response tokens, 0 on padding.
    Returns:
        (B,) float; rows with an empty mask give 0.
    """
    return _masked_row_mean("log_probs", log_probs, response_mask)


def _masked_row_mean(name: str, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2 or x.shape != mask.shape:
        raise ValueError(f"{name} (B, T) and response_mask must match, got {tuple(x.shape)} vs {tuple(mask.shape)}")
    m = mask.to(x.dtype)
    return (x * m).sum(-1) / m.sum(-1).clamp(min=1)


def novelty_ratio(seq_logp_mean: torch.Tensor, index: Sequence[Hashable] | np.ndarray) -> torch.Tensor:
    """eta_i = exp(s(y_i) - sbar_g), sbar_g the mean of s over the whole group (XRPO §2.4).

    eta < 1 means the response is less likely than its group on average.
    """
    codes, n_groups = group_codes(index)
    _check_rows("seq_logp_mean", seq_logp_mean, codes.shape[0])
    if not torch.all(torch.isfinite(seq_logp_mean)):
        raise ValueError("seq_logp_mean contains NaN or inf")
    s = seq_logp_mean.detach().to(torch.float64)
    sbar, _ = _group_mean(s, codes, n_groups)
    return torch.exp(s - sbar).to(seq_logp_mean.dtype)


def sharpen_advantages(
    adv: torch.Tensor,
    correct: torch.Tensor,
    seq_logp_mean: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray,
    *,
    coef: float = 2.5,
    cap_frac: float = 0.5,
) -> torch.Tensor:
    """Novelty-guided sharpening (XRPO §2.4), on correct responses only:

        A+_i = A_i + min(max(lambda_nov (1 - eta_i), 0), kappa A_i)

    The bonus is clamped at >= 0 as well, so a correct response whose A_i < 0 (possible with
    partial-credit rewards) is left unchanged rather than lowered [I]. In an all-correct group
    A = 0, so the bonus is 0: sharpening acts only in mixed groups.

    Args:
        adv: (B,) advantages A_i.
        correct: (B,) bool, R_i counts as correct.
        seq_logp_mean: (B,) s(y_i), see `sequence_mean_logprob`.
        index: (B,) group ids.
        coef: lambda_nov >= 0.  cap_frac: kappa >= 0.
    """
    b = _check_sharpening(adv, correct, coef, cap_frac)
    eta = novelty_ratio(seq_logp_mean, index)
    _check_rows("index", eta, b)
    return _sharpen(adv, correct, eta, coef, cap_frac)


def _check_sharpening(adv: torch.Tensor, correct: torch.Tensor, coef: float, cap_frac: float) -> int:
    if coef < 0 or cap_frac < 0:
        raise ValueError(f"coef = {coef!r} and cap_frac = {cap_frac!r} must both be >= 0")
    b = _check_rows("adv", adv)
    _check_rows("correct", correct, b)
    if correct.dtype != torch.bool:
        raise ValueError(f"correct must be a bool tensor, got {correct.dtype}")
    return b


def _sharpen(adv: torch.Tensor, correct: torch.Tensor, eta: torch.Tensor, coef: float, cap_frac: float) -> torch.Tensor:
    """The sharpening formula given eta (B,), so that one eta serves every sharpening of a step."""
    raw = (coef * (1.0 - eta.to(adv.dtype))).clamp(min=0)
    bonus = torch.minimum(raw, cap_frac * adv).clamp(min=0)
    return adv + torch.where(correct, bonus, torch.zeros_like(bonus))


def _check_novelty(adv_or_scores: torch.Tensor, correct: torch.Tensor, novelty: torch.Tensor, scale: float) -> None:
    b = _check_rows("advantages/scores", adv_or_scores)
    _check_rows("correct", correct, b)
    _check_rows("novelty", novelty, b)
    if correct.dtype != torch.bool:
        raise ValueError(f"correct must be a bool tensor, got {correct.dtype}")
    if not torch.all(torch.isfinite(novelty)) or torch.any(novelty < 0):
        raise ValueError("novelty must be finite and >= 0")
    if not scale >= 0:
        raise ValueError(f"scale = {scale!r} must be >= 0")


def add_novelty_bonus(adv: torch.Tensor, correct: torch.Tensor, novelty: torch.Tensor, *, scale: float) -> torch.Tensor:
    """ExTra after-norm bonus (paper form, option B): A_i + alpha * r_int_i * 1[R_i > 0].

    Never lowers an advantage; gives all-correct groups (A = 0) a positive signal.

    Args:
        adv: (B,) advantages A_i.  correct: (B,) bool, R_i > 0.
        novelty: (B,) ungated r_int_i >= 0 on every row (`NoveltyMemory.score` without `correct`).
    """
    _check_novelty(adv, correct, novelty, scale)
    return adv + scale * novelty.to(adv.dtype) * correct.to(adv.dtype)


def novelty_shaped_scores(
    scores: torch.Tensor,
    correct: torch.Tensor,
    novelty: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray,
    *,
    scale: float,
    gate: torch.Tensor | None = None,
) -> torch.Tensor:
    """ExTra before-norm variant (official code's default, option A): shape the reward, then normalise.

        nov~_i  = r_int_i / max_{j in g} r_int_j      (max over the whole group; 0 when it is 0)
        score_i = R_i + alpha * g_i * nov~_i * 1[R_i > 0]

    The max runs over every row of the group, correct or not, as the released code has it; a
    wrong response with the largest r_int shrinks the correct ones' bonus. Feed the result to
    `grpo_advantages`.

    Args:
        scores: (B,) rewards R_i.  correct: (B,) bool, R_i > 0.
        novelty: (B,) ungated r_int_i >= 0 on every row (`NoveltyMemory.score` without `correct`).
        index: (B,) group ids.
        gate: (B,) g(x) = exp(-lambda * EMA Var[R(x)]) (`novelty.RewardVarianceEMA`); None is g = 1.
    """
    _check_novelty(scores, correct, novelty, scale)
    codes, n_groups = group_codes(index)
    _check_rows("index", codes, scores.shape[0])
    nov = novelty.detach().to(torch.float64)
    gmax = torch.zeros(n_groups, dtype=torch.float64).scatter_reduce_(0, codes, nov, reduce="amax")[codes]
    nov_tilde = torch.where(gmax > 0, nov / gmax.clamp(min=1e-300), torch.zeros_like(nov))
    if gate is not None:
        _check_rows("gate", gate, scores.shape[0])
        nov_tilde = nov_tilde * gate.detach().to(torch.float64)
    return scores + (scale * nov_tilde * correct.to(torch.float64)).to(scores.dtype)


@dataclass(frozen=True)
class AdvantageParts:
    """A step's advantages and what each part of the estimator gave, (B,) each in the dtype of the scores.

    The parts are stages, so that a part's effect is the difference of two tensors the training
    advantages were built from (never a recomputation that could round otherwise):
        grpo        GRPO (Dr.GRPO without the std) of the rewards alone, no feature;
        sharpened   grpo after sharpening (grpo itself when sharpening is off);
        advantages  what the policy is trained on: sharpened plus the novelty bonus (after_norm),
                    or the same chain on the novelty-shaped rewards (before_norm).
    """

    grpo: torch.Tensor
    sharpened: torch.Tensor
    advantages: torch.Tensor
    eta: torch.Tensor | None  # (B,) sharpening's eta_i; None when sharpening is off
    novelty: torch.Tensor | None  # (B,) the r_int the novelty bonus read; None when it is off

    @property
    def sharpening_bonus(self) -> torch.Tensor:
        return self.sharpened - self.grpo

    @property
    def novelty_bonus(self) -> torch.Tensor:
        """What novelty added on top of the rest (before_norm: through the group normalisation)."""
        return self.advantages - self.sharpened


def advantage_parts(
    scores: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray,
    *,
    correct: torch.Tensor,
    seq_logp_mean: torch.Tensor,
    novelty: torch.Tensor,
    gate: torch.Tensor | None = None,
    sharpening: SharpeningConfig | None = None,
    novelty_bonus: NoveltyBonusConfig | None = None,
    norm_by_std: bool = True,
) -> AdvantageParts:
    """Every estimator of this package in one pass: GRPO, then sharpening, then the novelty bonus.

    A feature is on when its config is given: `grpo` none, `xrpo` sharpening, `extra` novelty_bonus,
    `xrpo_extra` both. The training advantages are those of the estimator; the other stages are
    what the step's metrics measure each feature against.

    Args:
        scores: (B,) sequence rewards R_i.  index: (B,) group ids.
        correct: (B,) bool, a verified success.  seq_logp_mean: (B,) s(y_i).
        novelty: (B,) ungated r_int_i >= 0.  gate: (B,) g(x) of before_norm, None is g = 1.
        norm_by_std: GRPO's division by the group std (False: Dr.GRPO).
    """
    grpo = grpo_advantages(scores, index, norm_by_std=norm_by_std)
    eta, sharpened = None, grpo
    if sharpening is not None:
        b = _check_sharpening(grpo, correct, sharpening.coef, sharpening.cap_frac)
        eta = novelty_ratio(seq_logp_mean, index)
        _check_rows("seq_logp_mean", eta, b)
        # A+_i = A_i + min(max(λ_nov (1 − η_i), 0), κ A_i) for correct i   (XRPO §2.4)
        sharpened = _sharpen(grpo, correct, eta, sharpening.coef, sharpening.cap_frac)
    final = sharpened
    if novelty_bonus is not None and novelty_bonus.placement == "after_norm":
        # A_i = GRPO(R)_i + α · r_int(x, y_i)   (ExTra §3.1, paper form)
        final = add_novelty_bonus(sharpened, correct, novelty, scale=novelty_bonus.scale)
    elif novelty_bonus is not None:
        # ExTra Option A: novelty shapes the score, then the group normalisation (and sharpening) run.
        shaped = novelty_shaped_scores(scores, correct, novelty, index, scale=novelty_bonus.scale, gate=gate)
        final = grpo_advantages(shaped, index, norm_by_std=norm_by_std)
        if sharpening is not None:
            final = _sharpen(final, correct, eta, sharpening.coef, sharpening.cap_frac)
    used = novelty if novelty_bonus is not None else None
    return AdvantageParts(grpo=grpo, sharpened=sharpened, advantages=final, eta=eta, novelty=used)


def token_advantages(adv: torch.Tensor, response_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B,) sequence advantages onto every response token: (B, T) of `dtype`, 0 where the mask is 0."""
    return adv.to(dtype).unsqueeze(-1) * response_mask


def bonus_effect(
    adv: torch.Tensor, adv_without: torch.Tensor, correct: torch.Tensor, index: Sequence[Hashable] | np.ndarray
) -> dict[str, float]:
    """How much a bonus changed the advantages of correct responses (for logging, not for training).

    Args:
        adv: (B,) advantages with the bonus.  adv_without: (B,) the same without it.
        correct: (B,) bool.  index: (B,) group ids.
    Returns:
        rows: correct responses whose advantage rose; abs_mean: mean |delta| over correct responses;
        share: sum |delta| / sum |A| over correct responses (0 when none);
        rank_changed: among groups with >= 2 correct responses, the fraction where their order by
        advantage (ties counted as ties) differs with and without the bonus.
    """
    b = _check_rows("adv", adv)
    _check_rows("adv_without", adv_without, b)
    _check_rows("correct", correct, b)
    delta = (adv - adv_without).detach().to(torch.float64)
    c = correct.bool()
    if not c.any():
        return {"rows": 0.0, "abs_mean": 0.0, "share": 0.0, "rank_changed": 0.0}
    total = float(adv.detach().to(torch.float64)[c].abs().sum())
    codes, _ = group_codes(index)
    groups = changed = 0
    a_with, a_without = adv.detach().double().numpy(), adv_without.detach().double().numpy()
    for g in torch.unique(codes[c]).tolist():
        rows = ((codes == g) & c).numpy()
        if rows.sum() < 2:
            continue
        groups += 1
        changed += not np.array_equal(_ranks(a_with[rows]), _ranks(a_without[rows]))
    return {
        "rows": float((delta[c] > 1e-12).sum()),
        "abs_mean": float(delta[c].abs().mean()),
        "share": float(delta[c].abs().sum()) / total if total > 0 else 0.0,
        "rank_changed": changed / groups if groups else 0.0,
    }


def _ranks(x: np.ndarray) -> np.ndarray:
    """Dense ranks with ties sharing a rank (values within 1e-9 count as tied)."""
    r = np.round(x / 1e-9)
    return np.unique(r, return_inverse=True)[1]
