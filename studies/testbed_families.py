"""Where a testbed study's accuracy moved: held-out mean@k of known and unknown families, before and after.

    python studies/testbed_families.py --out outputs/tb_study

Reads a `convergence_study.py --setting testbed` directory (before.json and each run's done.json)
and splits the measurement set by family kind: the families the model's warm-up showed zero-shot
(known) and those it saw only in few-shot prompts (unknown, the never-solved tail RL and ICL
seeding are for). Changes are paired per problem (mean ± SE over problems).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def split_changes(before: list[float], after: list[float], unknown: list[bool]) -> dict[str, tuple]:
    """{kind: (problems, before mean, after mean, change mean, change SE)} for kinds known/unknown."""
    out = {}
    for kind, want in (("known", False), ("unknown", True)):
        idx = [i for i, u in enumerate(unknown) if u == want]
        d = [after[i] - before[i] for i in idx]
        se = statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
        out[kind] = (
            len(idx),
            statistics.fmean(before[i] for i in idx),
            statistics.fmean(after[i] for i in idx),
            statistics.fmean(d),
            se,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from xrpo_verl.lab import addition, learning_setting, testbed

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="outputs/tb_study")
    p.add_argument("--metric", default=None, help="default: mean@<the setting's k>")
    args = p.parse_args(argv)
    out = Path(args.out)
    before = json.loads((out / "before.json").read_text())
    metric = args.metric or next(k for k in before if k.startswith("mean@"))
    n = len(before[metric]["per_problem"])
    problems = learning_setting.heldout_problems(testbed.SETTING, n)
    known = set(addition.FAMILY_NAMES[: testbed.MODEL.addition.known_families])
    unknown = [p.family not in known for p in problems]
    print(f"| run | {metric} known: before → after (change) | {metric} unknown: before → after (change) |")
    print("|---|---|---|")
    for done in sorted(out.glob("*/seed*/done.json")):
        after = json.loads(done.read_text())["after"][metric]["per_problem"]
        parts = split_changes(before[metric]["per_problem"], after, unknown)
        cells = [f"{b:.3f} → {a:.3f} ({d:+.3f} ± {se:.3f}, {q} sums)" for q, b, a, d, se in parts.values()]
        print(f"| {done.parent.parent.name} {done.parent.name} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
