"""Per-step overhead of the XRPO/ExTra algorithm parts against plain GRPO advantages, and FAISS scaling.

Run: `make bench` or `pytest benchmarks/test_bench_algorithms.py --benchmark-only`.
Every number is a ratio against a baseline measured in the same run (`extra_info`), never a
wall-clock threshold. Sizes (synthetic tensors; no model runs except the embedding sample):

- step: B = 512 prompts x G = 16 rollouts x T = 4096 tokens (XRPO_BENCH_B / _G / _T shrink it).
- embedding: MiniLM on XRPO_BENCH_EMBED_SAMPLE (default 32) response tails, scaled linearly to
  B*G responses and reported as `scaled_s_per_step`; tails are cut at MiniLM's 256-token window.
- FAISS: memory sizes 1e3..1e5 (XRPO_BENCH_FAISS_MAX=1000000 adds 1e6), 512 queries, k = 16.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from xrpo_verl import advantages as A
from xrpo_verl import planner as P
from xrpo_verl.config import PlannerConfig
from xrpo_verl.icl import ICLCorpus, ICLExample
from xrpo_verl.novelty import NoveltyMemory
from xrpo_verl.prefix import PrefixMemory, prefix_mean_entropies, step_boundaries

B = int(os.environ.get("XRPO_BENCH_B", 512))
G = int(os.environ.get("XRPO_BENCH_G", 16))
T = int(os.environ.get("XRPO_BENCH_T", 4096))
D = 384  # MiniLM dimension
_BASE: dict[str, float] = {}


@pytest.fixture(scope="module")
def step_data():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    n = B * G
    lengths = torch.randint(T // 4, T + 1, (n,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()
    correct = torch.rand(n, generator=g) < 0.4
    token_rewards = torch.zeros(n, T)
    token_rewards[torch.arange(n), lengths - 1] = correct.float()
    log_probs = -torch.rand(n, T, generator=g) * 2 * mask
    index = np.repeat(np.array([f"uid-{q}" for q in range(B)], dtype=object), G)
    rng = np.random.default_rng(0)
    z = rng.standard_normal((n, D)).astype(np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    return dict(mask=mask, correct=correct, token_rewards=token_rewards, log_probs=log_probs, index=index, z=z)


def _ratio(benchmark, base_key="grpo"):
    mean = benchmark.stats.stats.mean
    if base_key in _BASE:
        benchmark.extra_info[f"ratio_vs_{base_key}"] = round(mean / _BASE[base_key], 4)
    return mean


def test_bench_grpo_baseline(benchmark, step_data):
    """Plain GRPO: sequence score, group normalisation, broadcast over response tokens."""
    d = step_data

    def run():
        adv = A.grpo_advantages(d["token_rewards"].sum(-1), d["index"])
        return adv.unsqueeze(-1) * d["mask"]

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    _BASE["grpo"] = benchmark.stats.stats.mean


def test_bench_planner(benchmark):
    """Two planner rounds over B prompts (priority with scipy's t quantile + rounding)."""
    rng = np.random.default_rng(1)
    rewards = [rng.integers(0, 2, 8).tolist() for _ in range(B)]
    budgets = P.round_budgets(B, 16, 8, 2)

    cfg = PlannerConfig()

    def run():
        extra = P.plan_round(rewards, budgets[1], cfg).extra
        grown = [r + [0] * k for r, k in zip(rewards, extra)]
        return P.plan_round(grown, budgets[2], cfg).extra

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    _ratio(benchmark)


def test_bench_sharpening(benchmark, step_data):
    """XRPO sharpening: s(y) over (B*G, T) log-probs, eta per group, capped bonus."""
    d = step_data
    adv = A.grpo_advantages(d["token_rewards"].sum(-1), d["index"])

    def run():
        s = A.sequence_mean_logprob(d["log_probs"], d["mask"])
        return A.sharpen_advantages(adv, d["correct"], s, d["index"])

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    _ratio(benchmark)


def test_bench_novelty_memory(benchmark, step_data):
    """ExTra novelty without the encoder: score against warmed 16-entry memories, then update."""
    d = step_data
    keys = list(d["index"])
    correct = d["correct"].numpy()
    mem = NoveltyMemory(capacity=16, warmup=8)
    mem.update(keys, d["z"])

    def run():
        nov = mem.score(keys, d["z"], correct)
        mem.update(keys, d["z"])
        return nov

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    _ratio(benchmark)


def test_bench_novelty_embedding(benchmark):
    """MiniLM on a sample of response tails; scaled to B*G tails per step in extra_info."""
    from xrpo_verl.embeddings import get_embedder

    n = int(os.environ.get("XRPO_BENCH_EMBED_SAMPLE", 32))
    emb = get_embedder(device="cpu", batch_size=32)
    words = "therefore we compute the sum of the roots and check the constraint again carefully".split()
    rng = np.random.default_rng(2)
    texts = [" ".join(rng.choice(words, 400)) for _ in range(n)]  # ~512-token tails

    benchmark.pedantic(lambda: emb.encode(texts), rounds=2, warmup_rounds=1)
    per_text = benchmark.stats.stats.mean / n
    benchmark.extra_info["sample"] = n
    benchmark.extra_info["scaled_s_per_step"] = round(per_text * B * G, 2)
    if "grpo" in _BASE:
        benchmark.extra_info["scaled_ratio_vs_grpo"] = round(per_text * B * G / _BASE["grpo"], 1)


def test_bench_prefix_selection(benchmark):
    """ExTra prefix step for 64 hard prompts: boundaries, prefix MTE, memory, smoothed argmin.

    Prefix embeddings are synthetic here; their encoder cost is the embedding benchmark's per text.
    """
    rng = np.random.default_rng(3)
    anchors = [rng.integers(0, 1000, T) for _ in range(64)]
    for a in anchors:
        a[rng.choice(T, T // 40, replace=False)] = 13  # a newline every ~40 tokens
    entropy = [rng.random(T) for _ in range(64)]
    memory = PrefixMemory(capacity=128)
    emb = rng.standard_normal((64, 15, D)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=-1, keepdims=True)

    def run():
        picks = []
        for q, (ids, h) in enumerate(zip(anchors, entropy)):
            b = step_boundaries(ids, {13}, min_gap=32, max_candidates=15, max_len=T // 2)
            s = prefix_mean_entropies(h, b)
            e = emb[q, : len(b)]
            for j, bj in enumerate(b):
                memory.add(f"p{q}", ids[:bj], float(s[j]), e[j])
            picks.append(memory.select(f"p{q}", tau=0.1))
        return picks

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    _ratio(benchmark)


class _Precomputed:
    """Encoder stand-in returning fixed unit vectors, so only retrieval is timed."""

    def __init__(self, n):
        rng = np.random.default_rng(4)
        self.z = rng.standard_normal((n, D)).astype(np.float32)
        self.z /= np.linalg.norm(self.z, axis=1, keepdims=True)
        self.i = 0

    def encode(self, texts):
        out = self.z[np.arange(self.i, self.i + len(texts)) % len(self.z)]
        self.i += len(texts)
        return out


def test_bench_icl_retrieval(benchmark):
    """Top-2 retrieval for 64 all-fail prompts from a 17k-prompt corpus (DAPO-Math-17k scale)."""
    n = int(os.environ.get("XRPO_BENCH_CORPUS", 17_000))
    corpus = ICLCorpus(_Precomputed(n + 10_000))
    corpus.add_many([ICLExample(f"p{i}", f"prompt {i}", f"solution {i}", 0, 10) for i in range(n)])
    ids = [f"p{i}" for i in range(64)]
    texts = [f"prompt {i}" for i in range(64)]
    benchmark.pedantic(lambda: corpus.retrieve_many(ids, texts, k=2), rounds=5, warmup_rounds=1)
    _ratio(benchmark)


def test_bench_icl_corpus_admission(benchmark):
    """A step's successes of prompts new to the corpus (XRPO_BENCH_NEW_PROMPTS, default 16) admitted
    with one MiniLM call (`add_many`), against one `add` (one encode) each, timed in the same test."""
    from xrpo_verl.embeddings import get_embedder

    n = int(os.environ.get("XRPO_BENCH_NEW_PROMPTS", 16))
    emb = get_embedder(device="cpu", batch_size=32)
    found = [ICLExample(f"p{i}", f"What is {137 * i} + {59 * i}? Think step by step.", "s", 1, 20) for i in range(n)]
    emb.encode([found[0].prompt_text])  # load the model outside the timings

    def one_by_one():
        corpus = ICLCorpus(emb)
        for ex in found:
            corpus.add(ex.prompt_id, ex.prompt_text, ex.response_text, step=ex.step, num_tokens=ex.num_tokens)

    one_by_one()
    tic = time.perf_counter()
    for _ in range(3):
        one_by_one()
    base = (time.perf_counter() - tic) / 3
    benchmark.pedantic(lambda: ICLCorpus(emb).add_many(found), rounds=3, warmup_rounds=1)
    benchmark.extra_info["one_by_one_s"] = round(base, 4)
    benchmark.extra_info["ratio_vs_one_by_one"] = round(benchmark.stats.stats.mean / base, 3)


_FAISS_SIZES = [1_000, 10_000, 100_000]
if int(os.environ.get("XRPO_BENCH_FAISS_MAX", 100_000)) >= 1_000_000:
    _FAISS_SIZES.append(1_000_000)


@pytest.mark.parametrize("size", _FAISS_SIZES)
@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_bench_faiss_search(benchmark, kind, size):
    """512 queries, k = 16, against a memory of `size` unit vectors; ratio vs flat at the same size."""
    from xrpo_verl.embeddings import VectorIndex

    rng = np.random.default_rng(5)
    x = rng.standard_normal((size, D)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(size, 512, replace=False)] + 0.05 * rng.standard_normal((512, D)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    idx = VectorIndex(D, kind=kind, use_gpu="never")
    t0 = time.perf_counter()
    idx.add(x, np.arange(size))
    benchmark.extra_info["build_s"] = round(time.perf_counter() - t0, 3)
    benchmark.pedantic(lambda: idx.search(q, 16), rounds=3, warmup_rounds=1)
    got = idx.search(q, 16)[1]
    if kind == "flat":
        _BASE[f"flat{size}"] = benchmark.stats.stats.mean
        _BASE[f"flat_ids{size}"] = got  # type: ignore[assignment]
    else:
        _ratio(benchmark, f"flat{size}")
        truth = _BASE.get(f"flat_ids{size}")
        if truth is not None:
            benchmark.extra_info["recall_at_16"] = round(
                float(np.mean([len(set(a) & set(b)) / 16 for a, b in zip(got, truth)])), 3
            )
