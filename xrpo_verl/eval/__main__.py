"""Evaluate a model on benchmarks: k samples per problem, our scorers, JSON + Markdown + plot.

    python -m xrpo_verl.eval --model Qwen/Qwen3-1.7B --bench aime2024 math500 --k 32 --out eval/qwen3
    python -m xrpo_verl.eval --model ckpt/merged_hf --bench data/aime2025.parquet --k 16 --backend hf

Benchmarks: a name of our converters (math sets: aime2024, aime2025, hmmt_feb_2025, brumo_2025,
math500, amc23, minerva, olympiadbench; code: livecodebench, codeforces), NAME=LOCAL_FILE to convert
an upstream file offline, or a parquet in verl's schema. Generation uses vLLM when it is installed
and a GPU is present, else transformers. Killed runs resume from OUT/<bench>/samples.jsonl.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from xrpo_verl.eval.benchmarks import bench_name, load_benchmark
from xrpo_verl.eval.generate import BACKENDS, SamplingConfig, make_generator
from xrpo_verl.eval.metrics_report import benchmark_metrics, write_outputs
from xrpo_verl.eval.runner import run_benchmark


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m xrpo_verl.eval", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="HF model directory or hub name (merge verl FSDP checkpoints first)")
    p.add_argument("--bench", nargs="+", required=True, help="benchmark specs (see above)")
    p.add_argument("--out", required=True, help="output folder: results.json/.md/.png and per-benchmark caches")
    p.add_argument("--k", type=int, default=16, help="samples per problem")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--max-new-tokens", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="auto: vLLM on GPU, else transformers")
    p.add_argument("--tp", type=int, default=1, help="vLLM tensor parallel size")
    p.add_argument("--family", default="qwen", help="answer-format prompt family for named benchmarks")
    p.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark (smoke runs)")
    p.add_argument("--batch-problems", type=int, default=8, help="problems per generation call")
    p.add_argument("--no-logdet", action="store_true", help="skip the MiniLM embeddings of LogDet")
    p.add_argument("--overwrite", action="store_true", help="delete existing caches in --out first")
    return p


def evaluate(args: argparse.Namespace, generator=None) -> dict:
    """Run every benchmark and write the outputs; returns {bench: metrics}."""
    from xrpo_verl.rewards.routing import compute_score

    out = Path(args.out)
    sampling = SamplingConfig(
        k=args.k, temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed
    )
    benches = {bench_name(s): load_benchmark(s, args.family) for s in args.bench}
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError(f"--limit = {args.limit} must be >= 1")
        benches = {n: p[: args.limit] for n, p in benches.items()}
    if args.overwrite:
        for name in benches:
            shutil.rmtree(out / name, ignore_errors=True)
    generator = generator or make_generator(args.model, sampling, args.backend, args.tp)
    embed = None
    if not args.no_logdet:
        from xrpo_verl.embeddings import get_embedder

        embed = get_embedder().encode
    results = {}
    for name, problems in benches.items():
        records = run_benchmark(
            name, problems, generator, sampling, out, args.model, compute_score, args.batch_problems
        )
        results[name] = benchmark_metrics(records, args.k, embed)
    paths = write_outputs(results, out, args.model)
    print(paths["markdown"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        evaluate(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
