"""What each XRPO/ExTra mechanism did in a step, as the flat `xrpo/...` metrics verl's trackers log.

Pure functions of the step's plans, decisions and batch view; the trainer calls them and merges the
results. A mechanism that is switched off logs exactly 0 under every one of its keys (never a
missing key), so a tracker shows "off" and "inert" the same way and a test can tell both from
"acting".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from xrpo_verl import advantages as adv_lib
from xrpo_verl import planner
from xrpo_verl.icl import ICLDecision
from xrpo_verl.icl_gate import ArmCounts
from xrpo_verl.verl_adapters.batch_view import BatchView

# bins of the allocation histogram: how many prompts got k extra rollouts in a round
ALLOC_BINS = ((0, 0), (1, 2), (3, 4), (5, 8), (9, 16), (17, 10**9))


def round_metrics(r: int, plan: planner.RoundPlan) -> dict[str, float]:
    """Planner round r: rollouts handed out, to how many prompts, and what drove the split."""
    ks, diag = np.asarray(plan.extra), plan.diagnostics
    out = {f"xrpo/round_{r}/rollouts": float(ks.sum()), f"xrpo/round_{r}/prompts": float((ks > 0).sum())}
    for lo, hi in ALLOC_BINS:  # scalar bins: the trackers drop lists
        label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**9 else f"{lo}+")
        out[f"xrpo/round_{r}/alloc_hist/{label}"] = float(((ks >= lo) & (ks <= hi)).sum())
    delta = np.asarray(diag.delta, dtype=float)
    phi = np.asarray(diag.phi, dtype=float)
    out[f"xrpo/round_{r}/delta/mean"] = float(delta.mean())
    out[f"xrpo/round_{r}/phi/mean"] = float(phi.mean())
    out[f"xrpo/round_{r}/step_rollouts"] = float(plan.step_rollouts)  # T of phi_q
    # phi/Delta > 1: the exploration bonus, not the uncertainty reduction, drives the allocation
    if delta.mean() > 0:  # every group at zero variance: Pi = phi and the ratio is undefined
        out[f"xrpo/round_{r}/phi_over_delta"] = float(phi.mean() / delta.mean())
    return out


def allocation_metrics(group_sizes: Sequence[int]) -> dict[str, float]:
    """n_q over the step's dataloader prompts (every round included)."""
    sizes = np.asarray(group_sizes, dtype=float)
    return {"xrpo/alloc/n_q/mean": sizes.mean(), "xrpo/alloc/n_q/min": sizes.min(), "xrpo/alloc/n_q/max": sizes.max()}


def selection_metrics(score: np.ndarray, chosen: np.ndarray, seen_before: np.ndarray, known: int) -> dict[str, float]:
    """selection=history this step: I_q(n) of the trained and the passed-over candidates, and how many
    of the trained prompts had a record, and the prompts the selector tracks (`selection.PromptSelector`)."""
    score = np.asarray(score, dtype=float)
    kept = np.zeros(score.size, dtype=bool)
    kept[np.asarray(chosen, dtype=np.int64)] = True
    return {
        "xrpo/select/candidates": float(score.size),
        "xrpo/select/score_trained": float(score[kept].mean()) if kept.any() else 0.0,
        "xrpo/select/score_passed_over": float(score[~kept].mean()) if (~kept).any() else 0.0,
        "xrpo/select/trained_with_record": float(np.asarray(seen_before)[kept].sum()),
        "xrpo/select/prompts_tracked": float(known),
    }


def group_signal_metrics(view: BatchView) -> dict[str, float]:
    """The bare prompts' groups this step (base and round rows; ICL and guided rows apart): how many
    have mixed verified outcomes, the only groups with a GRPO gradient, and their share of the rollouts."""
    groups: dict[str, list[bool]] = {}
    for i, kind in enumerate(view.kinds):
        if kind in ("base", "round") and bool(view.valid[i]):
            groups.setdefault(view.uids[i], []).append(bool(view.correct[i]))
    mixed = [g for g in groups.values() if 0 < sum(g) < len(g)]
    rollouts = sum(len(g) for g in groups.values())
    return {
        "xrpo/groups/mixed": float(len(mixed)),
        "xrpo/groups/mixed_rollout_share": sum(len(g) for g in mixed) / rollouts if rollouts else 0.0,
    }


def icl_reliance_metrics(view: BatchView, rollout_log_probs: torch.Tensor | None, mode: str) -> dict[str, float]:
    """Hint reliance of this step's ICL successes (HiLL): how much less likely the correct response y
    is without the examples, log pi(y | x, examples) - log pi(y | x), per sequence and per token.

    With `icl.mode=strip_icl` both terms are at hand: the engine sampled y under the examples
    (`rollout_log_probs`, (B, T)) and the trainer scores it under the bare prompt (`old_log_probs`).
    `with_icl` trains under the examples, so log pi(y | x) is never computed: its rows count 0 here.
    The same difference on the step's other rows is the engine-trainer mismatch, the floor to read
    the reliance against.
    """
    zero = {
        "xrpo/icl/reliance_rows": 0.0,
        "xrpo/icl/reliance_seq": 0.0,
        "xrpo/icl/reliance_token": 0.0,
        "xrpo/icl/reliance_floor_token": 0.0,
    }
    if mode != "strip_icl" or rollout_log_probs is None:
        return zero
    diff = ((rollout_log_probs - view.old_log_probs) * view.mask).sum(-1)  # (B,)
    tokens = view.mask.sum(-1)
    icl = torch.tensor([k == "icl" for k in view.kinds], dtype=torch.bool) & view.valid
    hinted = icl & view.correct
    bare = ~icl & view.valid & view.not_guided
    out = dict(zero)
    if hinted.any():
        out["xrpo/icl/reliance_rows"] = float(hinted.sum())
        out["xrpo/icl/reliance_seq"] = float(diff[hinted].mean())
        out["xrpo/icl/reliance_token"] = float(diff[hinted].sum() / tokens[hinted].sum().clamp(min=1))
    if bare.any():
        out["xrpo/icl/reliance_floor_token"] = float(diff[bare].abs().sum() / tokens[bare].sum().clamp(min=1))
    return out


def icl_metrics(decisions: list[ICLDecision], triggers: int, flips: int, corpus_size: int) -> dict[str, float]:
    """ICL seeding this step: triggers, flips and what the prompts held."""
    sims = [d.similarity for d in decisions if d.reason == "ok"]
    return {
        "xrpo/icl/triggers": float(triggers),
        "xrpo/icl/flips": float(flips),
        "xrpo/icl/flip_rate": flips / triggers if triggers else 0.0,
        "xrpo/icl/corpus_size": float(corpus_size),
        # an all-fail prompt falls back to zero-shot when retrieval is empty or no example fits whole
        "xrpo/icl/fallback_no_examples": float(sum(d.reason == "no_examples" for d in decisions)),
        "xrpo/icl/fallback_no_fit": float(sum(d.reason == "no_fit" for d in decisions)),
        # every example shown is a whole verified solution, so it ends with its own final answer
        "xrpo/icl/examples_whole": float(sum(d.examples for d in decisions)),
        "xrpo/icl/examples_skipped_long": float(sum(d.skipped_long for d in decisions)),
        "xrpo/icl/retrieval_similarity/mean": float(np.mean(sims)) if sims else 0.0,
    }


def icl_gate_metrics(share: float, icl: ArmCounts, zero_shot: ArmCounts, flips_zero_shot: int) -> dict[str, float]:
    """ICL against zero-shot on this step's all-fail prompts (xrpo_verl/icl_gate.py): the share
    that got ICL, and each arm's rollouts and verified-success rate (a comparison at equal prompts)."""
    return {
        "xrpo/icl/gate_share": float(share),
        "xrpo/icl/icl_rollouts": float(icl.rollouts),
        "xrpo/icl/icl_success_rate": icl.successes / icl.rollouts if icl.rollouts else 0.0,
        "xrpo/icl/zero_shot_rollouts": float(zero_shot.rollouts),
        "xrpo/icl/zero_shot_success_rate": zero_shot.successes / zero_shot.rollouts if zero_shot.rollouts else 0.0,
        "xrpo/icl/zero_shot_flips": float(flips_zero_shot),  # all-fail prompts a zero-shot round solved
    }


def prefix_mask_metrics(view: BatchView) -> dict[str, float]:
    """Response tokens the loss does not see (`response_mask` 0 inside the response), from the batch
    itself: ExTra guided rows must have them (the forced prefix), every other row none."""
    lengths = torch.tensor([int(r.numel()) for r in view.responses], dtype=torch.float32)
    masked = lengths - view.mask.sum(-1)
    guided = ~view.not_guided & view.valid
    other = view.not_guided & view.valid
    return {
        "xrpo/prefix/guided_rows": float(guided.sum()),
        "xrpo/prefix/guided_rows_masked": float((masked[guided] > 0).sum()),
        "xrpo/prefix/masked_prefix_tokens": float(masked[guided].sum()),
        "xrpo/prefix/masked_tokens_other_rows": float(masked[other].sum()),
        "xrpo/guided/rollouts": float(guided.sum()),
        "xrpo/guided/success_rate": float(view.correct[guided].float().mean()) if guided.any() else 0.0,
    }


_BONUS_STATS = ("rows", "abs_mean", "share", "rank_changed")


def signal_metrics(view: BatchView | None, parts: adv_lib.AdvantageParts | None = None) -> dict[str, float]:
    """What sharpening and the novelty bonus did to correct responses this step; all 0 when off.

    Each feature's effect is the difference of two stages of the step's own advantages
    (`advantages.AdvantageParts`), over the valid rows, so a feature that went inert logs 0. The
    novelty memory's own figures (`mean_all`, `correct_distinct`) are 0 here and come from
    `advantage_inputs.novelty_scores` when the bonus is on.
    """
    out = {f"xrpo/{f}/bonus_{n}": 0.0 for f in ("sharpening", "novelty") for n in _BONUS_STATS}
    out["xrpo/novelty/positive_correct"] = 0.0
    out["xrpo/novelty/mean_correct"] = 0.0
    out["xrpo/novelty/mean_all"] = 0.0
    out["xrpo/novelty/correct_distinct"] = 0.0
    # what sharpening can act on: correct responses of mixed groups clearly less likely than their
    # group (each must get a bonus), and whether the likelihoods it reads vary at all
    out["xrpo/sharpening/eligible_rows"] = 0.0
    out["xrpo/sharpening/seq_logp_spread"] = 0.0
    if view is None or parts is None:
        return out
    valid = view.valid
    index = list(np.array(view.uids, dtype=object)[valid.numpy()])
    correct = view.correct[valid]
    if parts.eta is not None:
        plain = parts.grpo[valid]
        effect = adv_lib.bonus_effect(parts.sharpened[valid], plain, correct, index)
        out.update({f"xrpo/sharpening/bonus_{n}": effect[n] for n in _BONUS_STATS})
        log_eta = torch.log(parts.eta[valid].double())
        out["xrpo/sharpening/eligible_rows"] = float((correct & (plain > 0) & (log_eta < -1e-4)).sum())
        out["xrpo/sharpening/seq_logp_spread"] = float(log_eta.abs().mean()) if len(log_eta) else 0.0
    if parts.novelty is not None:
        effect = adv_lib.bonus_effect(parts.advantages[valid], parts.sharpened[valid], correct, index)
        out.update({f"xrpo/novelty/bonus_{n}": effect[n] for n in _BONUS_STATS})
        gated = parts.novelty[valid] * correct  # the bonus only ever reaches correct responses
        out["xrpo/novelty/positive_correct"] = float((gated > 0).sum())
        out["xrpo/novelty/mean_correct"] = float(gated[correct].mean()) if correct.any() else 0.0
    return out
