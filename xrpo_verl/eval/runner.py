"""Generate, score and cache one benchmark at a time; then compute the report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tqdm import tqdm

from xrpo_verl.eval import cache
from xrpo_verl.eval.benchmarks import Problem
from xrpo_verl.eval.generate import Generator, SamplingConfig


def score_samples(problem: Problem, samples, compute_score) -> list[dict]:
    """Our scorers on every sample; a scorer exception (the judge failed) propagates."""
    out = []
    for s in samples:
        r = compute_score(problem.data_source, s.text, problem.ground_truth, problem.extra_info)
        out.append(
            {
                "text": s.text,
                "tokens": s.num_tokens,
                "score": float(r["score"]),
                "acc": float(r.get("acc", r["score"])),
                "pred": r.get("pred") or "",
            }
        )
    return out


def run_benchmark(
    name: str,
    problems: list[Problem],
    generator: Generator,
    sampling: SamplingConfig,
    out: Path,
    model: str,
    compute_score,
    batch_problems: int = 8,
) -> list[dict]:
    """Samples of every problem, resuming from `out/name/samples.jsonl`. Returns the records in problem order."""
    folder = out / name
    cache.check_meta(folder, {"model": model, "backend": generator.name, **dataclasses.asdict(sampling)})
    path = folder / "samples.jsonl"
    done = cache.load(path)
    for key, rec in done.items():
        match = next((p for p in problems if p.key == key), None)
        if match is None or rec["fingerprint"] != match.fingerprint:
            raise ValueError(
                f"{path}: cached problem {key!r} is not in the benchmark as loaded now "
                "(the data changed); use a new --out folder or --overwrite"
            )
    todo = [(i, p) for i, p in enumerate(problems) if p.key not in done]
    bar = tqdm(total=len(problems), initial=len(problems) - len(todo), desc=name, unit="problem")
    for start in range(0, len(todo), batch_problems):
        chunk = todo[start : start + batch_problems]
        outputs = generator.generate([p.messages for _, p in chunk], [sampling.seed + i for i, _ in chunk])
        for (_, p), samples in zip(chunk, outputs, strict=True):
            record = {"key": p.key, "fingerprint": p.fingerprint, "samples": score_samples(p, samples, compute_score)}
            cache.append(path, record)
            done[p.key] = record
            bar.update(1)
    bar.close()
    return [done[p.key] for p in problems]
