"""Evaluation metrics (docs/algorithms.md, evaluation). Pure python/numpy."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k)/C(n, k) (Chen et al. 2021), in the stable product form.

    = 1 if n - c < k, else 1 - prod_{i=n-c+1}^{n} (1 - k/i).
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if int(v) != v:
            raise ValueError(f"{name} = {v!r} must be an integer")
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def cons_at_k(
    answers: Sequence[str | None],
    truth: Callable[[str], bool] | Sequence[bool],
    *,
    normalize: Callable[[str], str] = str.strip,
) -> bool:
    """cons@k (maj@k): the most frequent normalised answer decides; ties go to the first occurrence.

    Args:
        answers: the k extracted answers; None means no answer was extracted (it never wins).
        truth: a function answer -> correct, or per-answer correctness labels (k,).
        normalize: canonical form used for voting (use the verifier's normaliser).
    Returns:
        Whether the majority answer is correct; False when no answer was extracted.
    """
    if len(answers) == 0:
        raise ValueError("cons_at_k needs at least one answer")
    labels = None if callable(truth) else list(truth)
    if labels is not None and len(labels) != len(answers):
        raise ValueError(f"{len(labels)} labels for {len(answers)} answers")
    keys = [None if a is None else normalize(a) for a in answers]
    votes = Counter(k for k in keys if k is not None)
    if not votes:
        return False
    top = max(votes.values())
    first = next(i for i, k in enumerate(keys) if k is not None and votes[k] == top)
    if labels is not None:
        return bool(labels[first])
    return bool(truth(answers[first]))  # type: ignore[operator]


def mean_length(lengths: Sequence[int | float]) -> float:
    """Mean response length (tokens)."""
    x = np.asarray(lengths, dtype=np.float64)
    if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError(f"lengths must be a non-empty sequence of finite values >= 0, got {list(lengths)[:8]}")
    return float(x.mean())


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def bleu4(hypothesis: list[str], references: list[list[str]], *, epsilon: float = 0.1) -> float:
    """Sentence BLEU-4, uniform weights, smoothing "method1" (Chen & Cherry 2014).

    p_n = clipped n-gram matches / hypothesis n-grams; a zero p_n becomes epsilon / max(1, count).
    BP = exp(1 - r/c) for c <= r, r the closest reference length (shorter on ties). No matching
    unigram (or an empty hypothesis) gives 0.
    """
    if not references:
        raise ValueError("bleu4 needs at least one reference")
    c = len(hypothesis)
    log_p = 0.0
    for n in range(1, 5):
        hyp = _ngrams(hypothesis, n)
        max_ref: Counter = Counter()
        for ref in references:
            max_ref |= _ngrams(ref, n)
        matches = sum(min(cnt, max_ref[g]) for g, cnt in hyp.items())
        total = max(1, sum(hyp.values()))
        if matches == 0:
            if n == 1:
                return 0.0
            log_p += 0.25 * math.log(epsilon / total)
        else:
            log_p += 0.25 * math.log(matches / total)
    r = min((len(ref) for ref in references), key=lambda rl: (abs(rl - c), rl))
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return bp * math.exp(log_p)


def self_bleu(texts: Sequence[str]) -> float:
    """Self-BLEU (Texygen): mean_i BLEU-4(y_i, {y_j : j != i}); whitespace tokens. Lower = more diverse."""
    if len(texts) < 2:
        raise ValueError(f"self_bleu needs at least 2 texts, got {len(texts)}")
    toks = [t.split() for t in texts]
    return float(np.mean([bleu4(toks[i], toks[:i] + toks[i + 1 :]) for i in range(len(toks))]))


def logdet_diversity(embeddings: np.ndarray, eps: float = 1e-6) -> float:
    """LogDet = log det(Z Z^T + eps I), Z the L2-normalised rows (k, d). Higher = more diverse; <= k*log(1+eps)."""
    z = np.asarray(embeddings, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] == 0 or not np.all(np.isfinite(z)):
        raise ValueError(f"embeddings must be a non-empty finite (k, d) array, got shape {z.shape}")
    if not eps > 0:
        raise ValueError(f"eps = {eps!r} must be > 0")
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("embeddings contain a zero row, which has no direction")
    z = z / norms
    sign, logdet = np.linalg.slogdet(z @ z.T + eps * np.eye(z.shape[0]))
    return float(logdet)
