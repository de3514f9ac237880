"""Convergence study on CPU with the tiny model: GRPO vs XRPO, ExTra and XRPO+ExTra at equal rollouts.

Not a CI test (each run trains verl's real trainer on CPU for minutes). For each method and seed
it runs `xrpo_verl.local.launch` on the generated arithmetic task (`xrpo_verl/local/recipes/<method>.yaml`,
the same n = n_avg rollouts per prompt for every method), validates every `--val-every` steps
with k samples, then reports per method: steps to reach the target validation accuracy
(mean@k), the final pass@k (verl's best@k), mean and spread over seeds, and a plot.

    python benchmarks/convergence_study.py --methods grpo xrpo extra xrpo_extra --seeds 0 1 2 \
        --steps 40 --target 0.5 --out outputs/convergence
    python benchmarks/convergence_study.py --report-only --out outputs/convergence   # re-plot
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

VAL_ACC = re.compile(r"^val-core/.+/acc/mean@(\d+)$")
VAL_PASS = re.compile(r"^val-core/.+/acc/best@(\d+)/mean$")


def val_curve(metrics_path: Path) -> list[tuple[int, float, float | None]]:
    """(step, mean@k accuracy, pass@k) for every validation in verl's file-logger output."""
    curve = []
    for line in metrics_path.read_text().splitlines():
        rec = json.loads(line)
        data = rec.get("data", rec)
        acc = next((v for k, v in data.items() if VAL_ACC.match(k)), None)
        if acc is None:
            continue
        passes = {int(VAL_PASS.match(k).group(1)): v for k, v in data.items() if VAL_PASS.match(k)}
        curve.append(
            (
                int(rec.get("step", data.get("training/global_step", len(curve)))),
                float(acc),
                passes[max(passes)] if passes else None,
            )
        )
    return curve


def steps_to_target(curve, target: float) -> int | None:
    """First validated step whose accuracy reaches `target`; None if never."""
    return next((step for step, acc, _ in curve if acc >= target), None)


def run_one(method: str, seed: int, args) -> Path:
    from xrpo_verl.local import arith, tiny_model
    from xrpo_verl.local.launch import CpuRun, launch

    out = Path(args.out) / method / f"seed{seed}"
    if (out / "done.json").exists():
        return out  # resumable: finished runs are kept
    model = tiny_model.build()
    data = Path(args.out) / "data"
    train = arith.write_parquet(data / "train.parquet", 2048, seed=11, split="train")
    val = arith.write_parquet(data / "val.parquet", args.val_problems, seed=12, split="test")
    run = CpuRun(
        str(model),
        str(train),
        str(val),
        str(out),
        steps=args.steps,
        prompts_per_step=args.prompts,
        n=args.n,
        lr=args.lr,
    )
    extra = [
        f"trainer.test_freq={args.val_every}",
        "trainer.val_before_train=True",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.val_kwargs.n={args.k}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
    ]
    result = launch(run, method, extra, timeout_s=args.timeout, echo=True)
    if result.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} failed (exit {result.returncode}); see {out / 'trainer.log'}")
    (out / "done.json").write_text(json.dumps({"method": method, "seed": seed}))
    return out


def summarize(args) -> dict:
    summary = {}
    for method in args.methods:
        curves = [
            val_curve(p / "metrics.jsonl")
            for p in sorted((Path(args.out) / method).glob("seed*"))
            if (p / "done.json").exists()
        ]
        if not curves:
            continue
        reach = [steps_to_target(c, args.target) for c in curves]
        finals = [c[-1][2] for c in curves if c and c[-1][2] is not None]
        summary[method] = {
            "seeds": len(curves),
            "steps_to_target": reach,
            "median_steps_to_target": float(np.median([r for r in reach if r is not None]))
            if any(r is not None for r in reach)
            else None,
            "final_acc": [c[-1][1] for c in curves],
            f"final_pass@{args.k}": float(np.mean(finals)) if finals else None,
            "curves": curves,
        }
    return summary


def plot(summary: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, s in summary.items():
        steps = sorted({st for c in s["curves"] for st, _, _ in c})
        accs = np.array([[dict((st, a) for st, a, _ in c).get(x, np.nan) for x in steps] for c in s["curves"]])
        mean, std = np.nanmean(accs, 0), np.nanstd(accs, 0)
        ax.plot(steps, mean, label=f"{method} ({s['seeds']} seeds)")
        ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    ax.axhline(args.target, ls="--", c="gray", lw=1)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"validation accuracy (mean@{args.k})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--methods",
        nargs="+",
        default=["grpo", "xrpo", "extra", "xrpo_extra"],
        help="xrpo_verl/local/recipes/<method>.yaml names",
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--n", type=int, default=8, help="rollouts per prompt (n_avg for XRPO): the equal budget")
    p.add_argument("--k", type=int, default=8, help="validation samples per problem (pass@k)")
    p.add_argument("--lr", type=float, default=1e-4, help="actor learning rate (CpuRun's default)")
    p.add_argument("--val-every", type=int, default=5)
    p.add_argument("--val-problems", type=int, default=64)
    p.add_argument("--target", type=float, default=0.5, help="validation accuracy that counts as converged")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    p.add_argument("--out", default="outputs/convergence")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    if not args.report_only:
        for seed in args.seeds:
            for method in args.methods:
                run_one(method, seed, args)
    summary = summarize(args)
    if not summary:
        print(f"no finished runs under {args.out}", file=sys.stderr)
        return 1
    out = Path(args.out)
    settings = {k: v for k, v in vars(args).items() if k not in ("report_only", "out")}
    (out / "summary.json").write_text(json.dumps({"settings": settings, "methods": summary}, indent=1))
    plot(summary, args, out / "convergence.png")
    for method, s in summary.items():
        print(
            f"{method:12s} seeds={s['seeds']} steps_to_{args.target}={s['steps_to_target']} "
            f"final_pass@{args.k}={s[f'final_pass@{args.k}']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
