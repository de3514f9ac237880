"""The per-response inputs of our estimators that only the trainer can compute, from the step's batch view.

- `novelty_scores`: ExTra's r_int of every response against its prompt's memory (ExTra §3.1), then
  every response enters the memory;
- `variance_gate`: g(x) = exp(-λ EMA Var[R(x)]) of the before-norm placement, after folding this
  step's group variance into the per-prompt EMA;
- `rollout_correction`: verl's IS weights and rejection mask, exactly as verl's `_compute_advantage`
  runs them before its estimator (ours replace that method, so they must run it too).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch

from xrpo_verl import icl as icl_lib
from xrpo_verl.config import NoveltyBonusConfig
from xrpo_verl.novelty import NoveltyMemory, RewardVarianceEMA
from xrpo_verl.verl_adapters.batch_view import BatchView
from xrpo_verl.verl_adapters.text import decode_each_span


def novelty_scores(
    view: BatchView,
    memory: NoveltyMemory,
    encode: Callable[[list[str]], np.ndarray],
    decode: Callable[[list[int]], str],
    cfg: NoveltyBonusConfig,
    decode_spans: Callable[[list, list[tuple[int, int, int]]], list[str]] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """r_int per row (B,) float32, ungated (the estimators gate by correctness), and its metrics.

    The tail of each valid response (its last `cfg.tail_tokens` tokens, decoded) is embedded and
    scored against the prompt's memory and its siblings; every valid response then enters the memory.
    `decode_spans` (`text.span_decoder`) decodes every tail in one call; `decode` one by one if None.
    """
    idx = np.flatnonzero(view.valid.numpy())
    novelty = torch.zeros(len(view.uids), dtype=torch.float32)
    if idx.size == 0:  # nothing scored: the step metrics' zeros stand (`step_metrics.signal_metrics`)
        return novelty, {}
    responses = [view.responses[i].numpy() for i in idx]  # views: numpy's len and slices cost ~nothing
    spans = [(k, max(0, len(r) - cfg.tail_tokens), len(r)) for k, r in enumerate(responses)]
    tails = decode_each_span(responses, spans, decode, decode_spans)
    emb = encode(tails)
    keys = [view.keys[i] for i in idx]
    raw = memory.score_then_update(keys, emb)
    novelty[idx] = torch.as_tensor(np.asarray(raw, dtype=np.float32))
    # correct responses whose text differs from every other response of their prompt this step:
    # only these can be novel (identical answers have cosine 1)
    correct = view.correct[idx].numpy()
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for k, t in zip(keys, tails, strict=True):
        seen[(k, t)] += 1
    distinct = sum(c and seen[(k, t)] == 1 for k, t, c in zip(keys, tails, correct, strict=True))
    return novelty, {
        "xrpo/novelty/mean_all": float(np.mean(raw)),
        "xrpo/novelty/correct_distinct": float(distinct),
        "xrpo/novelty/memory_prompts": float(len(memory)),
    }


def corpus_successes(
    view: BatchView,
    prompt_text: Callable[[int], str],
    decode: Callable[[list[int]], str],
    step: int,
    max_tokens: int,
    decode_spans: Callable[[list, list[tuple[int, int, int]]], list[str]] | None = None,
) -> tuple[list[icl_lib.ICLExample], int]:
    """(one example per prompt with a usable success, prompts whose every success was too long).

    A prompt's example is its first correct row that is not guided (a guided response continues a
    prefix it did not write) and is at most `max_tokens` long: an ICL prompt never shows a longer
    solution (`icl.build_icl_prompt`), and a longer one kept would displace a short one from the
    corpus. `prompt_text(i)` is row i's user text; only the chosen rows are decoded.
    """
    chosen: dict[str, int] = {}
    too_long: set[str] = set()
    lengths = [int(r.numel()) for r in view.responses]
    for i in np.flatnonzero((view.correct & view.not_guided).numpy()).tolist():
        key = view.keys[i]
        if key in chosen:
            continue
        if lengths[i] > max_tokens:
            too_long.add(key)
        else:
            chosen[key] = i
    rows = list(chosen.values())
    sources = [view.responses[i].numpy() for i in rows]
    spans = [(k, 0, len(r)) for k, r in enumerate(sources)]
    texts = decode_each_span(sources, spans, decode, decode_spans)
    examples = [
        icl_lib.ICLExample(view.keys[i], prompt_text(i), text, step, int(lengths[i]))
        for i, text in zip(rows, texts, strict=True)
    ]
    return examples, len(too_long - chosen.keys())


def variance_gate(view: BatchView, ema: RewardVarianceEMA) -> torch.Tensor:
    """g(x) per row (B,) float32 after folding this step's group reward variance into the EMA."""
    by_key: dict[str, list[float]] = defaultdict(list)
    for i in np.flatnonzero(view.valid.numpy()):
        by_key[view.keys[i]].append(float(view.scores[i]))
    gates = {k: ema.update(k, v) for k, v in by_key.items()}
    return torch.tensor([gates.get(k, 1.0) for k in view.keys], dtype=torch.float32)


def rollout_correction(rc_cfg, old_log_probs, rollout_log_probs, mask):
    """verl's IS weights and rejection mask for (B, T) tensors: (weights (B, T) or None, mask (B, T), metrics)."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    weights, new_mask, rc_metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old_log_probs,
        rollout_log_prob=rollout_log_probs,
        response_mask=mask,
        rollout_is=rc_cfg.get("rollout_is", None),
        rollout_is_threshold=rc_cfg.get("rollout_is_threshold", 2.0),
        rollout_is_batch_normalize=rc_cfg.get("rollout_is_batch_normalize", False),
        rollout_rs=rc_cfg.get("rollout_rs", None),
        rollout_rs_threshold=rc_cfg.get("rollout_rs_threshold", None),
    )
    w = weights.batch["rollout_is_weights"] if weights is not None else None
    return w, new_mask.to(mask.dtype), rc_metrics


def view_advantage_parts(view: BatchView, novelty: torch.Tensor, gate: torch.Tensor | None, settings):
    """`advantages.advantage_parts` of the step's batch view under the parsed settings (the trainer's
    one pass; `PluginSettings.feature_configs` says which parts are on)."""
    from xrpo_verl import advantages as adv_lib

    return adv_lib.advantage_parts(
        view.scores,
        view.uids,
        correct=view.correct,
        seq_logp_mean=view.seq_logp_mean,
        novelty=novelty,
        gate=gate,
        norm_by_std=settings.norm_adv_by_std,
        **settings.feature_configs(),
    )
