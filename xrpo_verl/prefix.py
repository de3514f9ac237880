"""Entropy-guided prefix regeneration for hard prompts (ExTra §3.2). Pure numpy.

1. Hard prompt: all rollouts fail (the paper), or at most one succeeds (pass rate <= 1/n, the
   released code's rule, an option).
2. Candidates from the intermediate steps of every rollout of the group (`group_candidates`),
   boundaries b just after newline tokens (`step_boundaries`):
     a. the first boundary is kept; b. a later one if >= min_gap after the last kept one;
     c. the last kept one is dropped if more than one was kept, and so is a lone one at T (a
        suffix must remain); then those past max_len are dropped;
     d. n > K left: keep b_{floor(i n / K)}, i = 0..K-1 (K = max_candidates).
3. Score MTE(p_b) = (1/b) sum_{t<=b} H_t over the rollout's own token entropies.
4. Smooth over prefix embeddings: MTE~_i = sum_j softmax_j(cos(e_i, e_j)/tau) MTE_j, and pick the
   argmin (`select_prefix`, the one function `PrefixMemory.select` and production call).
See docs/algorithms.md (prefix regeneration) for each choice and its source.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from xrpo_verl.embeddings import check_unit_rows, unit_rows_from_half

HardThreshold = Literal["all_fail", "at_most_one"]
_THRESHOLDS = ("all_fail", "at_most_one")


def is_hard(
    rewards_of_one_prompt: Sequence[float], threshold: HardThreshold = "all_fail", *, success_cutoff: float = 0.0
) -> bool:
    """Whether a prompt is hard: successes (reward > success_cutoff) == 0 ("all_fail") or <= 1."""
    if threshold not in _THRESHOLDS:
        raise ValueError(f"threshold = {threshold!r} is not supported; choose one of {list(_THRESHOLDS)}")
    r = np.asarray(rewards_of_one_prompt, dtype=np.float64)
    if r.size == 0:
        raise ValueError("is_hard needs at least one reward, got an empty group")
    if not np.all(np.isfinite(r)):
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    wins = int(np.sum(r > success_cutoff))
    return wins == 0 if threshold == "all_fail" else wins <= 1


def step_boundaries(
    token_ids: Sequence[int],
    newline_ids: set[int],
    *,
    min_gap: int = 32,
    max_candidates: int = 15,
    max_len: int | None = None,
) -> list[int]:
    """Prefix end positions b (prefix = token_ids[:b]) at step breaks, rules 2a-d of the module docstring.

    Args:
        token_ids: (T,) response token ids, without trailing EOS/padding.
        newline_ids: ids that end a line (e.g. the tokenizer's "\\n" and "\\n\\n").
        min_gap: a boundary after the first must lie >= min_gap tokens after the last kept one.
        max_candidates: K, keep at most this many (rule d), after the length filter.
        max_len: drop boundaries beyond this many tokens (max_prefix_frac * max_response_length);
            None or >= T drops none.
    Returns:
        Sorted boundaries, each in [1, T).
    """
    if min_gap < 1 or max_candidates < 1:
        raise ValueError(f"min_gap = {min_gap!r} and max_candidates = {max_candidates!r} must be >= 1")
    if not newline_ids:
        raise ValueError("newline_ids is empty: no token can end a step")
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    is_newline = np.zeros(ids.size, dtype=bool)
    for t in newline_ids:  # a handful of ids: cheaper than np.isin's sort
        is_newline |= ids == t
    ends = np.flatnonzero(is_newline) + 1  # b after each newline
    kept: list[int] = []
    for b in ends.tolist():  # one pass over the newlines only, not every token
        if not kept or b - kept[-1] >= min_gap:
            kept.append(b)
    if len(kept) > 1:
        kept.pop()  # it is the response's end whenever the response ends in a newline
    elif kept and kept[0] >= ids.size:
        kept = []  # a lone boundary at the end is the whole response: nothing left to regenerate
    if max_len is not None:
        # before thinning, so a long response keeps up to K candidates within the cap
        kept = [b for b in kept if b <= max_len]
    n, k = len(kept), max_candidates
    if n > k:  # floor(i n / K) in integers: the released code's int(i * n / 15)
        kept = [kept[i * n // k] for i in range(k)]
    return kept


def prefix_mean_entropies(entropy: np.ndarray, boundaries: Sequence[int]) -> np.ndarray:
    """MTE(p_b) = (1/b) sum_{t<b} H_t for each boundary b; entropy (T,) -> (N,) float64."""
    h = np.asarray(entropy, dtype=np.float64)
    if h.ndim != 1:
        raise ValueError(f"entropy must be (T,), got shape {h.shape}")
    b = np.asarray(boundaries, dtype=np.int64)
    if b.size and (b.min() < 1 or b.max() > h.size):
        raise ValueError(f"boundaries must lie in [1, T = {h.size}], got {b.tolist()}")
    return np.cumsum(h)[b - 1] / b if b.size else np.zeros(0)


def smoothed_scores(scores: np.ndarray, embeddings: np.ndarray, tau: float) -> np.ndarray:
    """MTE~ = W @ MTE with W_ij = softmax_j(cos(e_i, e_j) / tau); (N,), (N, d) -> (N,)."""
    if not tau > 0:
        raise ValueError(f"tau = {tau!r} must be > 0")
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)):
        raise ValueError(f"scores must be a non-empty finite (N,) array, got shape {s.shape}")
    e = check_unit_rows("embeddings", embeddings, s.size).astype(np.float64)
    logits = (e @ e.T) / tau
    logits -= logits.max(axis=1, keepdims=True)
    w = np.exp(logits)
    w /= w.sum(axis=1, keepdims=True)
    return w @ s


@dataclass(frozen=True)
class Candidate:
    """A prefix of one rollout of a hard prompt's group: its first `length` tokens."""

    row: int  # the rollout's position in the group
    length: int  # b
    score: float  # MTE(p_b)
    source: np.ndarray = field(repr=False, compare=False)  # (T,) int64, the rollout's token ids

    @property
    def prefix_ids(self) -> tuple[int, ...]:
        return tuple(self.source[: self.length].tolist())


def group_candidates(
    responses: Sequence[Sequence[int]],
    entropies: Sequence[np.ndarray],
    newline_ids: set[int],
    *,
    min_gap: int = 32,
    max_candidates: int = 15,
    max_len: int | None = None,
) -> list[Candidate]:
    """Prefix candidates from the intermediate steps of every rollout of a group (ExTra §3.2).

    A prefix shared by several rollouts is kept once (its entropies are the same: H_t depends on
    the tokens before t only).

    Args:
        responses: G rollouts, token ids without trailing EOS/padding.
        entropies: G arrays (T_g,) of token entropies H_t aligned with the responses.
    """
    if len(responses) != len(entropies):
        raise ValueError(f"{len(responses)} responses but {len(entropies)} entropy rows")
    out: list[Candidate] = []
    seen: dict[tuple[int, int], list[np.ndarray]] = {}  # (b, prefix hash) -> prefixes kept
    for g, (ids, h) in enumerate(zip(responses, entropies)):
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        h = np.asarray(h, dtype=np.float64)[: ids.size]
        if h.size < ids.size:
            raise ValueError(f"rollout {g}: {h.size} entropies for {ids.size} tokens")
        bounds = step_boundaries(ids, newline_ids, min_gap=min_gap, max_candidates=max_candidates, max_len=max_len)
        if not bounds:
            continue
        hashes = _prefix_hashes(ids)
        for b, score in zip(bounds, prefix_mean_entropies(h, bounds)):
            # a prefix shared by rollouts is found by its hash, then compared whole (collisions)
            same = seen.setdefault((b, int(hashes[b - 1])), [])
            if not any(np.array_equal(ids[:b], other) for other in same):
                same.append(ids[:b])
                out.append(Candidate(g, int(b), float(score), ids))
    return out


def _prefix_hashes(ids: np.ndarray) -> np.ndarray:
    """h[b-1] = a polynomial hash of ids[:b] for every b (mod 2^64, numpy's wrap-around), (T,) uint64."""
    global _POWERS
    if _POWERS.size < ids.size:
        _POWERS = np.cumprod(np.full(max(ids.size, 2 * _POWERS.size), 1_000_003, dtype=np.uint64))  # B^1, B^2, ...
    return np.cumsum((ids.astype(np.uint64) + np.uint64(1)) * _POWERS[: ids.size], dtype=np.uint64)


_POWERS = np.zeros(0, dtype=np.uint64)


@dataclass(frozen=True)
class PrefixChoice:
    index: int  # position among the candidates
    score: float  # MTE(p_b)
    smoothed: float  # MTE~(p_b)
    spread: float  # max - min of MTE~ over the candidates (0: the smoothing tied them all)


def select_prefix(scores: np.ndarray, embeddings: np.ndarray, *, tau: float = 0.1) -> PrefixChoice:
    """The candidate with the lowest smoothed mean token entropy (first on ties)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        raise ValueError("no prefix candidates: the group has no step boundary")
    sm = smoothed_scores(s, embeddings, tau)
    i = int(np.argmin(sm))
    return PrefixChoice(index=i, score=float(s[i]), smoothed=float(sm[i]), spread=float(sm.max() - sm.min()))


@dataclass
class PrefixEntry:
    prefix_ids: list[int]
    score: float  # MTE(p_b)
    embedding: np.ndarray  # (d,) L2-normalised


class _PromptPrefixes:
    """One prompt's ring of entries (source, b, MTE, float16 embedding) over shared token arrays.

    The candidates of a step are prefixes of a few responses, so each response is kept once (cut
    after its last kept boundary, 3 bytes a token: `_pack_ids`) and an entry is (its response, b):
    storage grows with the responses the ring still refers to, not with candidates times prefix
    length, and stays shared through a checkpoint. The entries are four arrays, oldest first (one
    float16 matrix rather than an array per entry: no per-entry object, in memory or in a pickle).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.sids = np.zeros(0, dtype=np.int32)  # (N,) source of each entry
        self.lengths = np.zeros(0, dtype=np.int32)  # (N,) b
        self.scores = np.zeros(0, dtype=np.float64)  # (N,) MTE(p_b)
        self.emb = np.zeros((0, 0), dtype=np.float16)  # (N, d) as given, float16
        self.sources: dict[int, np.ndarray] = {}  # source id -> packed token ids
        self.next_source = 0

    def __len__(self) -> int:
        return int(self.sids.size)

    def add_source(self, ids: np.ndarray) -> int:
        sid = self.next_source
        self.next_source += 1
        self.sources[sid] = _pack_ids(ids)
        return sid

    def extend(self, sids: np.ndarray, lengths: np.ndarray, scores: np.ndarray, embeddings: np.ndarray) -> None:
        """Append entries in order; the oldest beyond `capacity` leave, and so do the sources no
        entry refers to any more."""
        emb = np.asarray(embeddings).astype(np.float16)
        if len(self):
            emb = np.concatenate([self.emb, emb])
        keep = slice(-self.capacity, None)
        self.sids = np.concatenate([self.sids, sids]).astype(np.int32)[keep]
        self.lengths = np.concatenate([self.lengths, lengths]).astype(np.int32)[keep]
        self.scores = np.concatenate([self.scores, scores]).astype(np.float64)[keep]
        self.emb = emb[keep].copy()
        live = set(self.sids.tolist())
        for sid in [k for k in self.sources if k not in live]:
            del self.sources[sid]

    def prefix(self, i: int) -> list[int]:
        return _unpack_ids(self.sources[int(self.sids[i])])[: int(self.lengths[i])].tolist()

    def embeddings(self) -> np.ndarray:
        """(N, d) float32, renormalised after the float16 round trip."""
        return unit_rows_from_half(self.emb)

    def nbytes(self) -> int:
        arrays = (self.sids, self.lengths, self.scores, self.emb, *self.sources.values())
        return sum(a.nbytes for a in arrays)


def _pack_ids(ids) -> np.ndarray:
    """Token ids in 3 little-endian bytes each, (T, 3) uint8, when all lie in [0, 2^24) (every
    vocabulary we know: Qwen's 151k, Llama-3's 128k); otherwise (T,) int32."""
    a = np.asarray(ids, dtype=np.int64).reshape(-1)
    if a.size and (a.min() < 0 or a.max() >= 2**24):
        return a.astype(np.int32)
    return a.astype("<u4").view(np.uint8).reshape(-1, 4)[:, :3].copy()


def _unpack_ids(packed: np.ndarray) -> np.ndarray:
    """(T,) int64 token ids of `_pack_ids`' output (or of a plain int array)."""
    if packed.dtype != np.uint8:
        return packed.astype(np.int64)
    wide = np.zeros((len(packed), 4), dtype=np.uint8)
    wide[:, :3] = packed
    return wide.view("<u4").reshape(-1).astype(np.int64)


class PrefixMemory:
    """Per original prompt ring buffer of scored prefixes (ExTra code: 128 per prompt), over at most
    `max_prompts` prompts (ours [I]): adding to a prompt beyond that drops the prompt that was hard
    least recently, so the memory is bounded by configuration, not by how many prompts were ever hard.
    Token ids are 3-byte arrays shared by the prefixes of one response, embeddings float16
    (docs/algorithms.md, prefix regeneration)."""

    def __init__(self, capacity: int = 128, max_prompts: int | None = None) -> None:
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity = {capacity!r} must be an integer >= 1")
        if max_prompts is not None and (int(max_prompts) != max_prompts or max_prompts < 1):
            raise ValueError(f"max_prompts = {max_prompts!r} must be an integer >= 1 or None")
        self.capacity = int(capacity)
        self.max_prompts = None if max_prompts is None else int(max_prompts)
        self._mem: OrderedDict[str, _PromptPrefixes] = OrderedDict()
        self.evicted_prompts = 0  # prompts dropped by the max_prompts bound, since the start

    def __len__(self) -> int:
        """Number of prompt ids held."""
        return len(self._mem)

    def nbytes(self) -> int:
        """Bytes of the token arrays and embeddings held (not counting Python objects)."""
        return sum(p.nbytes() for p in self._mem.values())

    def _prompt(self, prompt_id: str) -> _PromptPrefixes:
        mem = self._mem.get(prompt_id)
        if mem is None:
            mem = self._mem[prompt_id] = _PromptPrefixes(self.capacity)
            if self.max_prompts is not None and len(self._mem) > self.max_prompts:
                self._mem.popitem(last=False)
                self.evicted_prompts += 1
        self._mem.move_to_end(prompt_id)  # the most recently hard prompt goes last
        return mem

    def entries(self, prompt_id: str) -> list[PrefixEntry]:
        mem = self._mem.get(prompt_id)
        if mem is None:
            return []
        emb = mem.embeddings()
        return [PrefixEntry(mem.prefix(i), float(mem.scores[i]), emb[i]) for i in range(len(mem))]

    def summary(self, prompt_id: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lengths (N,), MTEs (N,), embeddings (N, d)) of the prompt's entries, without their tokens."""
        mem = self._mem.get(prompt_id)
        if mem is None or not len(mem):
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, 0), dtype=np.float32)
        return mem.lengths.astype(np.int64), mem.scores.copy(), mem.embeddings()

    def add(self, prompt_id: str, prefix_ids: Sequence[int], score: float, embedding: np.ndarray) -> None:
        """Append a prefix (relative to the original prompt), evicting the oldest when full.

        A prefix seen again is appended again with its new score (duplicates allowed): each entry
        carries the entropy of the policy that produced it, and the oldest age out of the ring first.
        """
        self.add_group(prompt_id, [prefix_ids], [(0, len(prefix_ids), score)], np.asarray(embedding).reshape(1, -1))

    def add_group(
        self,
        prompt_id: str,
        responses: Sequence[Sequence[int]],
        candidates: Sequence[tuple[int, int, float]],
        embeddings: np.ndarray,
    ) -> None:
        """Append prefixes of one group's responses in order: candidate (g, b, MTE) is responses[g][:b].

        Args:
            responses: G token-id sequences the candidates are prefixes of.
            candidates: (g, b, score) each, 1 <= b <= len(responses[g]).
            embeddings: (len(candidates), d), L2-normalised.
        """
        e = check_unit_rows("embedding", np.asarray(embeddings), len(candidates))
        for g, b, score in candidates:
            if not np.isfinite(score):
                raise ValueError(f"prefix score must be finite, got {score!r}")
            if not 1 <= b <= len(responses[g]):
                raise ValueError(f"prefix length {b} outside [1, {len(responses[g])}] of response {g}")
        if not candidates:
            if prompt_id in self._mem:
                self._mem.move_to_end(prompt_id)  # hard again, with nothing new: still recent
            return
        mem = self._prompt(prompt_id)
        longest: dict[int, int] = {}
        for g, b, _ in candidates:
            longest[g] = max(longest.get(g, 0), int(b))
        sid = {g: mem.add_source(responses[g][:b]) for g, b in sorted(longest.items())}
        mem.extend(
            np.array([sid[g] for g, _, _ in candidates], dtype=np.int64),
            np.array([b for _, b, _ in candidates], dtype=np.int64),
            np.array([score for _, _, score in candidates], dtype=np.float64),
            e,
        )  # a response whose prefixes all left the ring in this very call is dropped with them

    def select(self, prompt_id: str, *, tau: float = 0.1) -> tuple[PrefixEntry, PrefixChoice] | None:
        """`select_prefix` over this prompt's whole memory; None if it holds nothing."""
        mem = self._mem.get(prompt_id)
        if mem is None or not len(mem):
            return None
        emb = mem.embeddings()
        choice = select_prefix(mem.scores, emb, tau=tau)
        i = choice.index
        return PrefixEntry(mem.prefix(i), float(mem.scores[i]), emb[i]), choice

    def state_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "max_prompts": self.max_prompts,
            "evicted_prompts": self.evicted_prompts,
            "prompts": {
                k: {
                    "sources": dict(m.sources),
                    "sids": m.sids.copy(),
                    "lengths": m.lengths.copy(),
                    "scores": m.scores.copy(),
                    "embeddings": m.emb.copy(),
                    "next_source": m.next_source,
                }
                for k, m in self._mem.items()
            },
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.capacity = int(d["capacity"])
        self.evicted_prompts = int(d.get("evicted_prompts", 0))
        self._mem = OrderedDict()
        if "memory" in d:  # written before the compact layout: one list of (ids, score, embedding) per prompt
            for k, v in d["memory"].items():
                for ids, score, emb in v:
                    self.add(k, ids, score, np.asarray(emb, dtype=np.float32))
            return
        for k, saved in d["prompts"].items():
            mem = _PromptPrefixes(self.capacity)
            # int32 sources (written before the 3-byte packing) are packed as they load
            mem.sources = {int(sid): _pack_ids(_unpack_ids(np.asarray(a))) for sid, a in saved["sources"].items()}
            if "entries" in saved:  # written before the array layout: one (source, b, MTE, embedding) tuple each
                rows = list(saved["entries"])
                mem.sids = np.array([int(r[0]) for r in rows], dtype=np.int32)
                mem.lengths = np.array([int(r[1]) for r in rows], dtype=np.int32)
                mem.scores = np.array([float(r[2]) for r in rows], dtype=np.float64)
                dim = len(rows[0][3]) if rows else 0
                mem.emb = np.array([np.asarray(r[3]) for r in rows], dtype=np.float16).reshape(len(rows), dim)
            else:
                mem.sids = np.asarray(saved["sids"], dtype=np.int32)
                mem.lengths = np.asarray(saved["lengths"], dtype=np.int32)
                mem.scores = np.asarray(saved["scores"], dtype=np.float64)
                mem.emb = np.asarray(saved["embeddings"], dtype=np.float16)
            mem.next_source = int(saved["next_source"])
            self._mem[k] = mem


@dataclass
class GuidedPrompt:
    """A queued guided prompt x' = x + p, carrying everything its reward needs.

    The official code queued only token ids, so injected rows were scored against the replaced
    row's ground truth; here the entry carries the original prompt's whole dataset row (ground
    truth, data source, extra info: opaque to this module), the one copy the trainer submits from
    (docs/algorithms.md, prefix regeneration).
    """

    prompt_ids: list[int]
    prefix_ids: list[int]
    original_prompt_id: str
    uid: str
    source_row: dict[str, Any] = field(default_factory=dict)  # the original prompt's dataset columns

    def input_ids(self, max_prompt_length: int | None = None) -> list[int]:
        """prompt_ids + prefix_ids, cut at the end to max_prompt_length (prefix tokens go first)."""
        ids = list(self.prompt_ids) + list(self.prefix_ids)
        return ids if max_prompt_length is None else ids[:max_prompt_length]


class GuidedQueue:
    """FIFO of guided prompts; when full, pushing drops the oldest (the newest are kept)."""

    def __init__(self, capacity: int = 512) -> None:
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity = {capacity!r} must be an integer >= 1")
        self.capacity = int(capacity)
        self._q: deque[GuidedPrompt] = deque(maxlen=self.capacity)

    def __len__(self) -> int:
        return len(self._q)

    def push(self, item: GuidedPrompt) -> None:
        if not isinstance(item, GuidedPrompt):
            raise ValueError(f"GuidedQueue holds GuidedPrompt items, got {type(item).__name__}")
        self._q.append(item)

    def pop_many(self, n: int) -> list[GuidedPrompt]:
        """Up to n oldest entries, removed from the queue."""
        if int(n) != n or n < 0:
            raise ValueError(f"n = {n!r} must be an integer >= 0")
        return [self._q.popleft() for _ in range(min(int(n), len(self._q)))]

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "items": [asdict(x) for x in self._q]}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.capacity = int(d["capacity"])
        self._q = deque((GuidedPrompt(**x) for x in d["items"]), maxlen=self.capacity)
