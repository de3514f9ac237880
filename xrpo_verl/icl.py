"""ICL seeding corpus (XRPO §2.3): verified successes of training prompts, top-K retrieval, rendering.

No verl. `embedder` is anything with `encode(list[str]) -> (N, d)` L2-normalised rows
(`embeddings.Embedder` in training, a small fake in unit tests). The prompt text is embedded once,
when its prompt id first enters the corpus. Retrieval searches a FAISS index of those embeddings
(`embeddings.VectorIndex`: exact by default, on GPU when there is one), synced lazily: new rows are
added at the next retrieval, and an IVF index is retrained from all rows whenever the corpus has
doubled since its last training (trained on the first few prompts, its lists would never fit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol

import numpy as np

from xrpo_verl.config import ICLConfig
from xrpo_verl.embeddings import GpuPolicy, IndexKind, VectorIndex, check_unit_rows

KeepPolicy = Literal["recent", "shortest"]
_KEEP = ("recent", "shortest")

ICL_HEADER = "Here are examples of solved problems.\n\n"
ICL_EXAMPLE = "Problem: {problem}\nSolution: {solution}\n\n"
ICL_FOOTER = "Now solve the following problem.\n{prompt}"


class TextEncoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class ICLExample:
    """One verified success of a training prompt."""

    prompt_id: str
    prompt_text: str
    response_text: str
    step: int  # training step it was produced at
    num_tokens: int  # response length in tokens
    similarity: float = float("nan")  # cosine to the query, set by retrieve()


def _check_example(prompt_id: str, num_tokens: int) -> None:
    if not prompt_id or not isinstance(prompt_id, str):
        raise ValueError(f"prompt_id must be a non-empty str, got {prompt_id!r}")
    if int(num_tokens) != num_tokens or num_tokens < 0:
        raise ValueError(f"num_tokens = {num_tokens!r} must be an integer >= 0")


class ICLCorpus:
    """Evolving corpus of verified successes, keyed by training prompt id.

    Args:
        embedder: object with `encode(list[str]) -> (N, d)` L2-normalised float array.
        per_prompt: m, successes kept per prompt id.
        keep: "recent" keeps the m latest (by step, then insertion), "shortest" the m shortest.
        index: FAISS index kind for retrieval ("flat" is exact; "ivf"/"hnsw" for huge corpora).
        use_gpu: where the index lives (`embeddings.VectorIndex`).
    """

    def __init__(
        self,
        embedder: TextEncoder,
        *,
        per_prompt: int = 1,
        keep: KeepPolicy = "recent",
        index: IndexKind = "flat",
        use_gpu: GpuPolicy = "auto",
    ) -> None:
        if int(per_prompt) != per_prompt or per_prompt < 1:
            raise ValueError(f"per_prompt = {per_prompt!r} must be an integer >= 1")
        if keep not in _KEEP:
            raise ValueError(f"keep = {keep!r} is not supported; choose one of {list(_KEEP)}")
        self.embedder, self.per_prompt, self.keep = embedder, int(per_prompt), keep
        self.index_kind, self.use_gpu = index, use_gpu
        self._examples: dict[str, list[ICLExample]] = {}  # best first
        self._ids: list[str] = []  # row order of self._emb
        self._row: dict[str, int] = {}
        self._emb = np.zeros((0, 0), dtype=np.float32)
        self._index: VectorIndex | None = None  # rows [0, _indexed) are in it
        self._indexed = self._trained_on = 0

    def __len__(self) -> int:
        """Number of prompt ids in the corpus."""
        return len(self._ids)

    def examples(self, prompt_id: str) -> list[ICLExample]:
        return list(self._examples.get(prompt_id, []))

    def _encode(self, texts: list[str]) -> np.ndarray:
        return check_unit_rows("embedder output", self.embedder.encode(texts), len(texts))

    def add(
        self,
        prompt_id: str,
        prompt_text: str,
        response_text: str,
        *,
        step: int,
        num_tokens: int,
        verified: bool = True,
        split: str = "train",
    ) -> bool:
        """Admit one verified success of a training prompt; return whether it is now stored.

        Unverified responses are not admitted (returns False). A non-training split raises,
        because letting eval prompts in would leak their answers into training prompts.
        """
        if split != "train":
            raise ValueError(f"split = {split!r}: only training prompts may enter the ICL corpus (eval leakage)")
        if not verified:
            _check_example(prompt_id, num_tokens)
            return False
        return self.add_many([ICLExample(prompt_id, prompt_text, response_text, step, num_tokens)])[0]

    def add_many(self, successes: Sequence[ICLExample]) -> list[bool]:
        """Batched `add` of verified successes of training prompts, in order: the prompts new to the
        corpus are encoded in one call (a call per prompt costs the encoder's fixed overhead each)."""
        for ex in successes:
            _check_example(ex.prompt_id, ex.num_tokens)
        successes = [replace(ex, step=int(ex.step), num_tokens=int(ex.num_tokens)) for ex in successes]
        new: dict[str, str] = {}
        for ex in successes:
            if ex.prompt_id not in self._row:
                new.setdefault(ex.prompt_id, ex.prompt_text)
        if new:
            z = self._encode(list(new.values()))
            self._emb = z if self._emb.size == 0 else np.concatenate([self._emb, z])
            for pid in new:
                self._row[pid] = len(self._ids)
                self._ids.append(pid)
        return [self._keep(ex) for ex in successes]

    def _keep(self, ex: ICLExample) -> bool:
        """Rank `ex` among its prompt's kept successes; whether it is kept."""
        kept = self._examples.get(ex.prompt_id, [])
        if any(e.response_text == ex.response_text for e in kept):
            return True  # deduplicated
        if self.keep == "recent":  # latest first; on equal step the later insertion wins
            ranked = sorted([ex] + kept, key=lambda e: -e.step)
        else:  # shortest first; on equal length the earlier one stays
            ranked = sorted(kept + [ex], key=lambda e: e.num_tokens)
        self._examples[ex.prompt_id] = ranked[: self.per_prompt]
        return ex in self._examples[ex.prompt_id]

    def retrieve(
        self,
        prompt_id: str,
        prompt_text: str,
        *,
        k: int = 2,
        min_similarity: float = 0.0,
        max_similarity: float | None = None,
    ) -> list[ICLExample]:
        """Top-k distinct other prompts by cosine similarity, each with its best kept example.

        Never returns `prompt_id` itself; returns [] when nothing reaches `min_similarity`. Prompts
        above `max_similarity` are near-duplicates of the query under another id: showing their
        solution would hand the model the query's answer, so they are skipped.
        """
        return self.retrieve_many(
            [prompt_id], [prompt_text], k=k, min_similarity=min_similarity, max_similarity=max_similarity
        )[0]

    def retrieve_many(
        self,
        prompt_ids: Sequence[str],
        prompt_texts: Sequence[str],
        *,
        k: int = 2,
        min_similarity: float = 0.0,
        max_similarity: float | None = None,
    ) -> list[list[ICLExample]]:
        """Batched `retrieve`: one encode call and one (Q, N) similarity product."""
        if len(prompt_ids) != len(prompt_texts):
            raise ValueError(f"{len(prompt_ids)} prompt_ids but {len(prompt_texts)} prompt_texts")
        if int(k) != k or k < 1:
            raise ValueError(f"k = {k!r} must be an integer >= 1")
        if not -1.0 <= min_similarity <= 1.0:
            raise ValueError(f"min_similarity = {min_similarity!r} must be in [-1, 1]")
        ceiling = np.inf if max_similarity is None else max_similarity
        if ceiling < min_similarity:
            raise ValueError(f"max_similarity = {max_similarity!r} is below min_similarity = {min_similarity!r}")
        if not self._ids or not prompt_ids:
            return [[] for _ in prompt_ids]
        q = self._encode(list(prompt_texts))
        # +1: the query may be in it; a ceiling may skip near-duplicates, so look further
        depth = k + 1 if max_similarity is None else 4 * k + 1
        sims, rows = self._synced_index().search(q, min(depth, len(self._ids)))
        out = []
        for pid, s_q, rows_q in zip(prompt_ids, sims, rows):
            own = self._row.get(pid, -1)
            hits = [
                (int(j), float(sim))
                for j, sim in zip(rows_q, s_q)
                if j >= 0 and j != own and min_similarity <= sim <= ceiling
            ]
            out.append([_with_sim(self._examples[self._ids[j]][0], sim) for j, sim in hits[:k]])
        return out

    def _synced_index(self) -> VectorIndex:
        """The FAISS index over every row: new rows added, IVF retrained once the corpus doubled."""
        n = len(self._ids)
        if self._index is None or (self.index_kind == "ivf" and n >= 2 * self._trained_on):
            self._index = VectorIndex(self._emb.shape[1], kind=self.index_kind, use_gpu=self.use_gpu)
            self._indexed, self._trained_on = 0, n
        if self._indexed < n:
            self._index.add(self._emb[self._indexed :], np.arange(self._indexed, n))
            self._indexed = n
        return self._index

    def state_dict(self) -> dict[str, Any]:
        return {
            "per_prompt": self.per_prompt,
            "keep": self.keep,
            "ids": list(self._ids),
            "embeddings": self._emb.copy(),
            "examples": {pid: [asdict(e) for e in exs] for pid, exs in self._examples.items()},
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if d["per_prompt"] != self.per_prompt or d["keep"] != self.keep:
            raise ValueError(
                f"state has per_prompt/keep {d['per_prompt']}/{d['keep']}, this corpus {self.per_prompt}/{self.keep}"
            )
        self._ids = list(d["ids"])
        self._row = {pid: i for i, pid in enumerate(self._ids)}
        self._emb = np.asarray(d["embeddings"], dtype=np.float32)
        self._examples = {pid: [ICLExample(**e) for e in exs] for pid, exs in d["examples"].items()}
        self._index, self._indexed, self._trained_on = None, 0, 0  # rebuilt at the next retrieval


def _with_sim(ex: ICLExample, sim: float) -> ICLExample:
    return ICLExample(ex.prompt_id, ex.prompt_text, ex.response_text, ex.step, ex.num_tokens, sim)


@dataclass(frozen=True)
class RenderedICL:
    """An ICL user turn and the examples in it (none: the zero-shot prompt, unchanged)."""

    text: str
    examples: tuple[ICLExample, ...]
    skipped_long: int  # retrieved examples left out because their solution exceeds max_example_tokens


def render_icl_prompt(
    examples: Sequence[ICLExample],
    prompt_text: str,
    *,
    count_tokens: Callable[[str], int],
    max_example_tokens: int = 1024,
    max_prompt_tokens: int | None = None,
) -> RenderedICL:
    """Few-shot prompt: header, whole example solutions, then the original prompt.

    A solution is never cut, because its end holds the answer the example exists to show: a solution
    longer than `max_example_tokens` is skipped, and when the result exceeds `max_prompt_tokens` the
    later examples are dropped. If none fits, or `examples` is empty, the zero-shot `prompt_text` is
    returned unchanged (with no examples).

    Args:
        count_tokens: text -> token count (the policy's tokenizer).
        max_example_tokens: L_ex >= 1, the longest solution shown.
        max_prompt_tokens: cap on the whole rendered prompt, or None for no cap.
    """
    if max_example_tokens < 1:
        raise ValueError(f"max_example_tokens = {max_example_tokens!r} must be >= 1")
    if max_prompt_tokens is not None and max_prompt_tokens < 1:
        raise ValueError(f"max_prompt_tokens = {max_prompt_tokens!r} must be >= 1 or None")
    shots = [e for e in examples if count_tokens(e.response_text) <= max_example_tokens]
    skipped = len(examples) - len(shots)

    def render(items: list[ICLExample]) -> str:
        body = "".join(ICL_EXAMPLE.format(problem=e.prompt_text, solution=e.response_text) for e in items)
        return ICL_HEADER + body + ICL_FOOTER.format(prompt=prompt_text)

    while shots:
        text = render(shots)
        if max_prompt_tokens is None or count_tokens(text) <= max_prompt_tokens:
            return RenderedICL(text, tuple(shots), skipped)
        shots.pop()  # drop the least similar example; never cut one
    return RenderedICL(prompt_text, (), skipped)


@dataclass(frozen=True)
class ICLDecision:
    """The ICL prompt for one all-fail prompt, or why it stays zero-shot."""

    text: str  # the rendered ICL user turn; "" when zero-shot
    reason: Literal["ok", "no_examples", "no_fit"]  # no_examples: nothing retrieved within the similarity band
    similarity: float  # mean retrieval similarity of the examples shown; nan when none
    examples: int  # examples shown, each a whole verified solution
    skipped_long: int  # retrieved examples left out as longer than max_example_tokens


def icl_decision(
    corpus: ICLCorpus,
    cfg: ICLConfig,
    *,
    prompt_id: str,
    prompt_text: str,
    count_tokens: Callable[[str], int],
    max_prompt_tokens: int,
) -> ICLDecision:
    """Retrieve K solved neighbours of an all-fail prompt and render them whole (XRPO §2.3).

    Args:
        cfg: algorithm.xrpo.icl (K, the similarity band, the longest example shown).
        count_tokens: text -> token count (the policy's tokenizer).
        max_prompt_tokens: cap on the rendered user turn (`user_turn_budget`).
    """
    examples = corpus.retrieve(
        prompt_id, prompt_text, k=cfg.k, min_similarity=cfg.min_similarity, max_similarity=cfg.max_similarity
    )
    if not examples:
        return ICLDecision("", "no_examples", float("nan"), 0, 0)
    r = render_icl_prompt(
        examples,
        prompt_text,
        count_tokens=count_tokens,
        max_example_tokens=cfg.max_example_tokens,
        max_prompt_tokens=max_prompt_tokens,
    )
    if not r.examples:  # zero-shot fallback: no example fits whole
        return ICLDecision("", "no_fit", float("nan"), 0, r.skipped_long)
    sims = [e.similarity for e in r.examples]
    return ICLDecision(r.text, "ok", float(np.mean(sims)), len(r.examples), r.skipped_long)


def user_turn_budget(chat_template_overhead: int, prompt_length: int) -> int:
    """Tokens the rendered ICL user turn may take: the rollout's prompt cap (verl left-truncates past
    it, which would cut the examples' header) minus what the chat template adds around the user text."""
    return max(1, prompt_length - max(0, chat_template_overhead))
