"""ExTra prefix regeneration (§3.2), the verl side: pick prefixes of hard prompts and queue guided prompts.

Runs inside `XrpoTrainer._compute_advantage`, after verl's old-log-prob pass has written the
response-aligned token entropies H_t (π_old of this step, `calculate_entropy=True`). The guided
prompts are injected by the next steps' `prepare_step`. The maths (hardness, candidates, smoothing,
selection) is `xrpo_verl.prefix`; see docs/algorithms.md (prefix regeneration).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from xrpo_verl import prefix as prefix_lib
from xrpo_verl.config import PrefixConfig
from xrpo_verl.verl_adapters import rows as R
from xrpo_verl.verl_adapters.batch_view import BatchView
from xrpo_verl.verl_adapters.state import PluginState
from xrpo_verl.verl_adapters.text import decode_each_span

# Rows whose token entropies are those of the plain prompt: ICL rows are conditioned on the examples.
CANDIDATE_KINDS = ("base", "round")


@dataclass
class PrefixQueueResult:
    """What one step's prefix selection did, for the step's metrics."""

    queued: int = 0  # guided prompts pushed
    hard_prompts: int = 0  # hard groups seen (after warm-up)
    candidates: list[int] = field(default_factory=list)  # per queued prompt: this step's candidates
    memory: list[int] = field(default_factory=list)  # per queued prompt: entries the selection ran over
    chosen_shortest: int = 0  # selections that picked the shortest prefix in memory
    chosen_lowest_raw: int = 0  # selections that picked the lowest raw MTE (smoothing agreed)
    tied: int = 0  # selections where the smoothing collapsed distinct scores of distinct texts to a tie
    memory_prompts: int = 0  # prompts the prefix memory holds after the step
    memory_mb: float = 0.0  # its token arrays and embeddings, in MiB
    evicted_prompts: int = 0  # prompts dropped by its bound since the start

    def metrics(self) -> dict[str, float]:
        def mean(x: list[int]) -> float:
            return float(np.mean(x)) if x else 0.0

        return {
            "xrpo/guided/queued": float(self.queued),
            "xrpo/prefix/hard_prompts": float(self.hard_prompts),
            "xrpo/prefix/candidates/mean": mean(self.candidates),
            "xrpo/prefix/candidates/max": float(max(self.candidates, default=0)),
            "xrpo/prefix/memory/mean": mean(self.memory),
            # entries from the prompt's earlier steps that the selection still ran over (the ring keeps
            # the newest `max_prefixes_per_prompt`, so a visit with that many candidates carries none)
            "xrpo/prefix/memory/carried/mean": mean([m - c for m, c in zip(self.memory, self.candidates, strict=True)]),
            "xrpo/prefix/chosen_shortest": float(self.chosen_shortest),
            "xrpo/prefix/chosen_lowest_raw": float(self.chosen_lowest_raw),
            "xrpo/prefix/smoothing_tied": float(self.tied),
            "xrpo/prefix/memory/prompts": float(self.memory_prompts),
            "xrpo/prefix/memory/mb": float(self.memory_mb),
            "xrpo/prefix/memory/evicted_prompts": float(self.evicted_prompts),
        }


def newline_token_ids(tokenizer) -> set[int]:
    """Ids whose text is a newline run: step boundaries of ExTra's `paragraph` split (§3.2)."""
    ids = set()
    for text in ("\n", "\n\n"):
        enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc) == 1:
            ids.add(int(enc[0]))
    for i in range(min(1000, len(tokenizer))):
        if tokenizer.decode([i]) in ("\n", "\n\n"):
            ids.add(i)
    return ids


def _strip_tail(ids: np.ndarray, drop: set[int]) -> np.ndarray:
    """(T,) token ids without trailing EOS/padding (a view): a prefix must leave a real suffix."""
    end = len(ids)
    while end and int(ids[end - 1]) in drop:
        end -= 1
    return ids[:end]


def _smoothing_collapsed(scores: np.ndarray, embeddings: np.ndarray, spread: float) -> bool:
    """The smoothing tied every candidate although their raw MTEs differ and the encoder tells them apart.

    Equal raw scores, or prefixes the encoder reads as one text (distinct token ids that decode
    alike; the memory may also hold one prefix several times, as the released code's), tie by
    construction: that is the smoothing doing its job, not collapsing.
    """
    told_apart = bool(np.ptp(embeddings, axis=0).any()) if len(embeddings) else False  # two rows differ
    return spread == 0.0 and bool(np.ptp(scores) > 0) and told_apart


def queue_prefixes(
    view: BatchView,
    *,
    cfg: PrefixConfig,
    state: PluginState,
    source_rows: dict[str, dict],
    newline_ids: set[int],
    end_ids: set[int],
    decode: Callable[[list[int]], str],
    max_prefix_len: int,
    decode_spans: Callable[[list, list[tuple[int, int, int]]], list[str]] | None = None,
) -> PrefixQueueResult:
    """Queue one guided prompt per hard prompt of this step (ExTra §3.2).

    Args:
        view: the step's trajectories; `entropy` and `prompts` must be fetched.
        cfg: algorithm.extra.prefix.
        state: the plugin state (prefix memory, guided queue, embedder).
        source_rows: uid -> the dataset row submitted for that uid this step.
        newline_ids: token ids that end a step.
        end_ids: EOS/padding ids stripped from a response's end.
        decode: token ids -> text (the policy's tokenizer).
        max_prefix_len: max_prefix_frac * max_response_length, in tokens.
        decode_spans: (sources, (source, start, end) spans) -> texts in one call (`text.span_decoder`),
            each source decoded once however many candidate tails it holds; `decode` per text if None.
    """
    out = PrefixQueueResult()
    if view.entropy is None or view.prompts is None:
        raise ValueError("queue_prefixes needs the batch's entropy and prompts")
    memory_of = state.prefix_memory
    rows = view.valid & torch.tensor([k in CANDIDATE_KINDS for k in view.kinds], dtype=torch.bool)
    hard = []  # (uid, rows, responses, candidates) of this step's hard prompts
    for uid, idx in view.groups(rows).items():
        # hard by verified successes (the scorer's verdict), never by a partial score
        if not prefix_lib.is_hard([float(view.correct[i]) for i in idx], cfg.hard_threshold):
            continue
        out.hard_prompts += 1
        responses = [_strip_tail(view.responses[i].numpy(), end_ids) for i in idx]
        entropies = [view.entropy[i, : len(r)].numpy() for i, r in zip(idx, responses)]
        cands = prefix_lib.group_candidates(
            responses,
            entropies,
            newline_ids,
            min_gap=cfg.min_gap,
            max_candidates=cfg.max_candidates,
            max_len=max_prefix_len,
        )
        # the ring keeps a prompt's newest `capacity` entries: older candidates would leave it in this
        # very step, so they are neither decoded nor encoded
        hard.append((uid, idx, responses, cands[-memory_of.capacity :]))
    # one encoder call for every hard prompt of the step; a tail is a span of its candidate's response
    sources, spans = [], []
    for _, _, responses, cands in hard:
        spans += [(len(sources) + c.row, max(0, c.length - cfg.embed_tail_tokens), c.length) for c in cands]
        sources += responses
    texts = decode_each_span(sources, spans, decode, decode_spans)
    embeddings = state.extra_embedder().encode(texts) if texts else np.zeros((0, 1), dtype=np.float32)
    start = 0
    for uid, idx, responses, cands in hard:
        key = view.keys[idx[0]]
        emb = embeddings[start : start + len(cands)]
        start += len(cands)
        memory_of.add_group(key, responses, [(c.row, c.length, c.score) for c in cands], emb)
        # b* = argmin_i Σ_j softmax_j(cos_ij / τ) MTE_j over the prompt's whole prefix memory; as in
        # the released code, a hard prompt with no new candidate this step still draws from it
        found = memory_of.select(key, tau=cfg.tau)
        if found is None:
            continue
        entry, choice = found
        lengths, scores, embs = memory_of.summary(key)
        out.candidates.append(len(cands))
        out.memory.append(len(lengths))
        out.chosen_shortest += len(entry.prefix_ids) == int(lengths.min())
        out.chosen_lowest_raw += entry.score == float(scores.min())
        out.tied += _smoothing_collapsed(scores, embs, choice.spread)
        source = source_rows.get(uid)
        if source is None:
            raise RuntimeError(f"hard prompt {uid} has no source row in this step; cannot queue its guided prompt")
        gp = prefix_lib.GuidedPrompt(
            prompt_ids=view.prompts[idx[0]].tolist(),
            prefix_ids=list(entry.prefix_ids),
            original_prompt_id=key,
            uid=uuid.uuid4().hex,
            source_row=R.dataset_row(source),
        )
        state.guided_queue.push(gp)
        out.queued += 1
    out.memory_prompts = len(memory_of)
    out.memory_mb = memory_of.nbytes() / 2**20
    out.evicted_prompts = memory_of.evicted_prompts
    return out
