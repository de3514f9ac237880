"""Per-benchmark metrics from cached samples, and the JSON / Markdown / plot outputs.

Metrics (docs/algorithms.md §8): pass@1 = mean c/n, unbiased pass@k, cons@k (majority of the
extracted answers, math only), mean response tokens, Self-BLEU (lower = more diverse) and
LogDet of the MiniLM embeddings of the k responses (higher = more diverse), averaged over problems.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from xrpo_verl.metrics import cons_at_k, logdet_diversity, mean_length, pass_at_k, self_bleu


def report_ks(k: int) -> list[int]:
    """1, 2, 4, ... up to k, and k itself."""
    ks = [1]
    while ks[-1] * 2 <= k:
        ks.append(ks[-1] * 2)
    return ks if ks[-1] == k else ks + [k]


def benchmark_metrics(records: list[dict], k: int, embed=None) -> dict:
    """Metrics of one benchmark. `embed(texts) -> (n, d)` enables LogDet; None skips it."""
    if not records:
        raise ValueError("no finished problems to score")
    ks = report_ks(k)
    passes = {kk: [] for kk in ks}
    cons, lengths, bleus, logdets = [], [], [], []
    for r in records:
        samples = r["samples"]
        n = len(samples)
        if n < k:
            raise ValueError(f"problem {r['key']!r} has {n} samples, fewer than k = {k}")
        correct = [s["acc"] > 0.5 for s in samples]
        for kk in ks:
            passes[kk].append(pass_at_k(n, sum(correct), kk))
        preds = [s.get("pred") or None for s in samples]
        if any(p is not None for p in preds):
            cons.append(cons_at_k(preds, correct))
        lengths += [s["tokens"] for s in samples]
        texts = [s["text"] for s in samples]
        if n >= 2:
            bleus.append(self_bleu(texts))
            if embed is not None:
                logdets.append(logdet_diversity(embed(texts)))
    out = {f"pass@{kk}": float(np.mean(v)) for kk, v in passes.items()}
    out.update(
        {
            "problems": len(records),
            "k": k,
            f"cons@{k}": float(np.mean(cons)) if cons else None,
            "mean_length": mean_length(lengths),
            "self_bleu": float(np.mean(bleus)) if bleus else None,
            "logdet": float(np.mean(logdets)) if logdets else None,
        }
    )
    return out


def markdown_table(results: dict[str, dict], model: str) -> str:
    """One row per benchmark."""
    k = next(iter(results.values()))["k"]
    head = ["benchmark", "problems", "pass@1", f"pass@{k}", f"cons@{k}", "mean length", "Self-BLEU", "LogDet"]
    rows = [f"Model: `{model}`, k = {k}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def fmt(v, pct=True):
        return "–" if v is None else (f"{100 * v:.1f}" if pct else f"{v:.3g}")

    for name, m in results.items():
        rows.append(
            "| "
            + " | ".join(
                [
                    name,
                    str(m["problems"]),
                    fmt(m["pass@1"]),
                    fmt(m[f"pass@{k}"]),
                    fmt(m[f"cons@{k}"]),
                    f"{m['mean_length']:.1f}",
                    fmt(m["self_bleu"], False),
                    fmt(m["logdet"], False),
                ]
            )
            + " |"
        )
    rows.append("")
    rows.append(
        "pass@k and cons@k in %; mean length in generated tokens; Self-BLEU lower = more diverse; "
        "LogDet (MiniLM) higher = more diverse."
    )
    return "\n".join(rows) + "\n"


def plot(results: dict[str, dict], path: Path) -> None:
    """Left: pass@1 / pass@k / cons@k per benchmark. Right: pass@k against k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    k = results[names[0]]["k"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(names))
    for j, key in enumerate(["pass@1", f"pass@{k}", f"cons@{k}"]):
        vals = [100 * (results[n][key] or 0.0) for n in names]
        ax1.bar(x + (j - 1) * 0.27, vals, 0.27, label=key)
    ax1.set_xticks(x, names, rotation=20, ha="right")
    ax1.set_ylabel("%")
    ax1.legend()
    for n in names:
        ks = report_ks(k)
        ax2.plot(ks, [100 * results[n][f"pass@{kk}"] for kk in ks], marker="o", label=n)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("k")
    ax2.set_ylabel("pass@k (%)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(results: dict[str, dict], out: Path, model: str) -> dict[str, Path]:
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "results.png"}
    paths["json"].write_text(json.dumps({"model": model, "benchmarks": results}, indent=1))
    paths["markdown"].write_text(markdown_table(results, model))
    plot(results, paths["plot"])
    return paths
