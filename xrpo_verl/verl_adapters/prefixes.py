"""ExTra prefix regeneration (§3.2), the verl side: pick prefixes of hard prompts and queue guided prompts.

Runs inside `XrpoTrainer._compute_advantage`, after verl's old-log-prob pass has written the
response-aligned token entropies H_t (π_old of this step, `calculate_entropy=True`). The guided
prompts are injected by the next steps' `prepare_step`. The maths (boundaries, prefix entropies,
smoothing, hardness) is `xrpo_verl.prefix`.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import numpy as np

from xrpo_verl import advantages as adv_lib
from xrpo_verl import prefix as prefix_lib
from xrpo_verl.verl_adapters import rows as R


def candidate_groups(view) -> dict[str, list[int]]:
    """uid -> valid row indices of the step's non-guided groups (guided groups never spawn prefixes)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i in np.flatnonzero((view.valid & view.not_guided).numpy()):
        groups[view.uids[i]].append(int(i))
    return groups


def queue_prefixes(trainer, view) -> int:
    """Queue one guided prompt per hard prompt of this step; returns how many were queued."""
    s = trainer.xrpo_settings
    cfg = s.extra.prefix
    if trainer.global_steps <= cfg.warmup_steps:
        return 0
    state = trainer.xrpo_state
    max_len = int(cfg.max_prefix_frac * int(trainer.config.actor_rollout_ref.rollout.response_length))
    queued = 0
    for uid, idx in candidate_groups(view).items():
        rewards = [float(view.scores[i]) for i in idx]
        if not prefix_lib.is_hard(rewards, cfg.hard_threshold):
            continue
        # anchor y* = argmin_i MTE(y_i) over generated tokens
        mte = adv_lib.mean_token_entropy(view.entropy[idx], view.mask[idx])
        a = idx[prefix_lib.select_anchor(mte.tolist())]
        length = int(view.responses[a].numel())
        tokens = view.responses[a][:length].tolist()
        bounds = [
            b
            for b in prefix_lib.step_boundaries(
                tokens, trainer._xrpo_newlines, min_gap=cfg.min_gap, max_candidates=cfg.max_candidates
            )
            if b <= max_len
        ]
        if not bounds:
            continue
        entropies = prefix_lib.prefix_mean_entropies(view.entropy[a, :length].numpy(), bounds)
        texts = [trainer.tokenizer.decode(tokens[:b], skip_special_tokens=True) for b in bounds]
        emb = state.extra_embedder().encode(texts)
        key = view.keys[a]
        for b, score, e in zip(bounds, entropies, emb, strict=True):
            state.prefix_memory.add(key, tokens[:b], float(score), e)
        # b* = argmin_i Σ_j softmax_j(cos_ij / τ) MTE_j over the prompt's whole prefix memory
        prefix_ids = state.prefix_memory.select(key, tau=cfg.tau).prefix_ids
        source = trainer._xrpo_step_rows.get(uid)
        if source is None:
            raise RuntimeError(f"hard prompt {uid} has no source row in this step; cannot queue its guided prompt")
        stored = R.dataset_row(source)
        gp = prefix_lib.GuidedPrompt(
            prompt_ids=view.prompts[a].tolist(),
            prefix_ids=list(prefix_ids),
            ground_truth=stored["reward_model"]["ground_truth"],
            data_source=stored["data_source"],
            extra_info=stored.get("extra_info"),
            original_prompt_id=key,
            uid=uuid.uuid4().hex,
        )
        state.guided_queue.push(gp)
        state.remember_guided_row(gp.uid, stored)
        queued += 1
    return queued
