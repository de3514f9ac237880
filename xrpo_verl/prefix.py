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

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from xrpo_verl.embeddings import check_unit_rows

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
    kept: list[int] = []
    for i, tok in enumerate(token_ids):
        b = i + 1
        if tok in newline_ids and (not kept or b - kept[-1] >= min_gap):
            kept.append(b)
    if len(kept) > 1:
        kept.pop()  # it is the response's end whenever the response ends in a newline
    elif kept and kept[0] >= len(token_ids):
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
    """A prefix of one rollout of a hard prompt's group."""

    row: int  # the rollout's position in the group
    prefix_ids: tuple[int, ...]  # its first b tokens
    score: float  # MTE(p_b)


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
    seen: set[tuple[int, ...]] = set()
    for g, (ids, h) in enumerate(zip(responses, entropies)):
        ids = [int(t) for t in ids]
        h = np.asarray(h, dtype=np.float64)[: len(ids)]
        if h.size < len(ids):
            raise ValueError(f"rollout {g}: {h.size} entropies for {len(ids)} tokens")
        bounds = step_boundaries(ids, newline_ids, min_gap=min_gap, max_candidates=max_candidates, max_len=max_len)
        for b, score in zip(bounds, prefix_mean_entropies(h, bounds)):
            key = tuple(ids[:b])
            if key not in seen:
                seen.add(key)
                out.append(Candidate(g, key, float(score)))
    return out


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


class PrefixMemory:
    """Per original prompt ring buffer of scored prefixes (ExTra code: 128 per prompt)."""

    def __init__(self, capacity: int = 128) -> None:
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity = {capacity!r} must be an integer >= 1")
        self.capacity = int(capacity)
        self._mem: dict[str, deque[PrefixEntry]] = {}

    def __len__(self) -> int:
        """Number of prompt ids held."""
        return len(self._mem)

    def entries(self, prompt_id: str) -> list[PrefixEntry]:
        return list(self._mem.get(prompt_id, ()))

    def add(self, prompt_id: str, prefix_ids: Sequence[int], score: float, embedding: np.ndarray) -> None:
        """Append a prefix (relative to the original prompt), evicting the oldest when full.

        A prefix seen again is appended again with its new score (duplicates allowed): each entry
        carries the entropy of the policy that produced it, and the oldest age out of the ring first.
        """
        if not np.isfinite(score):
            raise ValueError(f"prefix score must be finite, got {score!r}")
        if len(prefix_ids) == 0:
            raise ValueError("prefix_ids is empty")
        e = check_unit_rows("embedding", np.asarray(embedding).reshape(1, -1))[0]
        buf = self._mem.setdefault(prompt_id, deque(maxlen=self.capacity))
        buf.append(PrefixEntry([int(t) for t in prefix_ids], float(score), e))

    def select(self, prompt_id: str, *, tau: float = 0.1) -> tuple[PrefixEntry, PrefixChoice] | None:
        """`select_prefix` over this prompt's whole memory; None if it holds nothing."""
        buf = self.entries(prompt_id)
        if not buf:
            return None
        choice = select_prefix(np.array([x.score for x in buf]), np.stack([x.embedding for x in buf]), tau=tau)
        return buf[choice.index], choice

    def state_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "memory": {k: [(e.prefix_ids, e.score, e.embedding.copy()) for e in v] for k, v in self._mem.items()},
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.capacity = int(d["capacity"])
        self._mem = {
            k: deque(
                (PrefixEntry(list(p), float(s), np.asarray(e, dtype=np.float32)) for p, s, e in v), maxlen=self.capacity
            )
            for k, v in d["memory"].items()
        }


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
