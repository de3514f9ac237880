"""Convergence study on CPU, the learning setting: GRPO vs XRPO, ExTra and XRPO+ExTra at equal rollouts.

Not a CI test (each run trains verl's real trainer on CPU for ~10 minutes). For each method and
seed it trains the learning setting (`xrpo_verl/local/learning.py`: the tiny model partly warmed
up on column addition, a disjoint held-out set) with `xrpo_verl/local/recipes/<method>.yaml` and the same
rollouts per prompt for every method (GRPO's n = XRPO's n_avg); verl validates on the held-out set
every `--val-every` steps (k samples at T=1: mean@k and pass@k); the final weights are then
measured greedy and mean@k with standard errors over problems. Reported per method: the curves
against step and against rollouts generated, steps to the target mean@k with a bootstrap
confidence interval over seeds, and before/after accuracy per seed.

Resumable: a run that finished has `done.json` and is reused; an interrupted one starts again.

    python benchmarks/convergence_study.py --methods grpo --seeds 0 1 2 --out outputs/convergence
    python benchmarks/convergence_study.py --report-only --out outputs/convergence   # table + plot
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

VAL_ACC = re.compile(r"^val-core/.+/acc/mean@(\d+)$")
VAL_PASS = re.compile(r"^val-core/.+/acc/best@(\d+)/mean$")
ROLLOUTS_MEAN = "xrpo/alloc/n_q/mean"  # the planner's rollouts per prompt (XRPO); GRPO uses n


def read_metrics(path: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.setdefault(int(rec["step"]), {}).update(rec["data"])
    return out


def val_curve(metrics: dict[int, dict], prompts: int, n: int) -> list[tuple[int, int, float, float | None]]:
    """(step, rollouts generated up to it, mean@k, pass@k) at each validation (step 0 = before training)."""
    rollouts, spent, curve = {0: 0}, 0, []
    for step in sorted(metrics):
        if "critic/score/mean" in metrics[step]:
            spent += round(prompts * metrics[step].get(ROLLOUTS_MEAN, n))
        rollouts[step] = spent
    for step in sorted(metrics):
        data = metrics[step]
        acc = next((v for k, v in data.items() if VAL_ACC.match(k)), None)
        if acc is None:
            continue
        passes = {int(VAL_PASS.match(k).group(1)): v for k, v in data.items() if VAL_PASS.match(k)}
        # verl logs the validation before training under step 0 or under step 1 with no training metrics
        at = 0 if not curve and "critic/score/mean" not in data else step
        curve.append((at, rollouts.get(at, spent), float(acc), passes[max(passes)] if passes else None))
    return curve


def steps_to_target(curve, target: float) -> int | None:
    """First validated step whose mean@k reaches `target`; None if never."""
    return next((step for step, _, acc, _ in curve if acc >= target), None)


def bootstrap_median(values: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Median and its 95% percentile-bootstrap interval over seeds (inf stands for 'never reached')."""
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    medians = np.median(rng.choice(arr, size=(rounds, len(arr)), replace=True), axis=1)
    return float(np.median(arr)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def run_one(method: str, seed: int, args) -> Path:
    from xrpo_verl.local import learning
    from xrpo_verl.local.launch import launch

    out = Path(args.out) / method / f"seed{seed}"
    if (out / "done.json").exists():
        return out  # finished runs are reused
    if out.exists():
        import shutil

        shutil.rmtree(out)  # an interrupted run starts again: the file logger appends
    setting = replace(learning.LearningSetting(), steps=args.steps, lr=args.lr, val_samples=args.k)
    run = learning.cpu_run(out, setting, save_freq=args.steps)
    extra = [*learning.validation_overrides(setting, args.val_every), f"data.seed={seed}"]
    result = launch(run, method, extra, timeout_s=args.timeout, echo=True)
    if result.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} failed (exit {result.returncode}); see {out / 'trainer.log'}")
    after = measure(run.ckpt_dir / f"global_step_{args.steps}" / "actor", setting, seed)
    (out / "done.json").write_text(json.dumps({"method": method, "seed": seed, "after": after}))
    import shutil

    shutil.rmtree(run.ckpt_dir)  # ~60 MB a run; the measured numbers are kept
    return out


def measure(checkpoint: Path | None, setting, seed: int) -> dict:
    """Greedy and mean@k on the held-out set with standard errors over problems."""
    import torch
    from transformers import AutoTokenizer

    from xrpo_verl.local import learning, tiny_model

    torch.set_num_threads(1)
    model_dir = tiny_model.build(setting.model)
    heldout = learning.heldout_problems(setting, setting.n_eval)
    model = learning.load_actor(model_dir, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    found = learning.heldout_accuracy(model, tokenizer, heldout, setting.val_samples, setting.max_response_length, seed)
    return {k: {"mean": v.mean, "se": v.se, "never": v.never, "always": v.always} for k, v in found.items()}


def summarize(args) -> dict:
    from xrpo_verl.local import learning

    setting = learning.LearningSetting()
    summary = {}
    for method in args.methods:
        done = [p for p in sorted((Path(args.out) / method).glob("seed*")) if (p / "done.json").exists()]
        if not done:
            continue
        curves = [val_curve(read_metrics(p / "metrics.jsonl"), setting.prompts_per_step, setting.n) for p in done]
        reach = [steps_to_target(c, args.target) for c in curves]
        never = args.steps + args.val_every  # censored: beyond the last validation
        median, low, high = bootstrap_median([never if r is None else r for r in reach])
        summary[method] = {
            "seeds": [int(p.name.removeprefix("seed")) for p in done],
            "steps_to_target": reach,
            "steps_to_target_median_ci95": [median, low, high],
            "after": [json.loads((p / "done.json").read_text())["after"] for p in done],
            "curves": curves,
        }
    return summary


def plot(summary: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for i, (method, s) in enumerate(summary.items()):
        for axis, ax in ((0, axes[0]), (1, axes[1])):
            for j, curve in enumerate(s["curves"]):
                ax.plot(
                    [c[axis] for c in curve],
                    [c[2] for c in curve],
                    color=f"C{i}",
                    alpha=0.8,
                    label=f"{method} ({len(s['curves'])} seeds)" if j == 0 else None,
                )
    for ax, label in zip(axes, ("training step", "rollouts generated"), strict=True):
        ax.axhline(args.target, ls="--", c="gray", lw=1)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"held-out accuracy (mean@{args.k}, T=1)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    from xrpo_verl.local import learning

    defaults = learning.LearningSetting()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--methods",
        nargs="+",
        default=["grpo", "xrpo", "extra", "xrpo_extra"],
        help="xrpo_verl/local/recipes/<method>.yaml names",
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=defaults.steps)
    p.add_argument("--k", type=int, default=defaults.val_samples, help="validation samples per problem")
    p.add_argument("--lr", type=float, default=defaults.lr, help="actor learning rate (the learning setting's)")
    p.add_argument("--val-every", type=int, default=25)
    p.add_argument("--target", type=float, default=0.5, help="held-out mean@k that counts as converged")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    p.add_argument("--out", default="outputs/convergence")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    before_path = out / "before.json"
    if not args.report_only:
        if not before_path.exists():
            setting = replace(defaults, val_samples=args.k)
            before_path.write_text(json.dumps(measure(None, setting, seed=0)))
        for seed in args.seeds:
            for method in args.methods:
                run_one(method, seed, args)
    summary = summarize(args)
    if not summary:
        print(f"no finished runs under {args.out}", file=sys.stderr)
        return 1
    settings = {k: v for k, v in vars(args).items() if k not in ("report_only", "out")}
    before = json.loads(before_path.read_text()) if before_path.exists() else None
    (out / "summary.json").write_text(
        json.dumps({"settings": settings, "before": before, "methods": summary}, indent=1)
    )
    plot(summary, args, out / "convergence.png")
    if before:
        print("before: " + "  ".join(f"{k} {v['mean']:.3f}±{v['se']:.3f}" for k, v in before.items()))
    for method, s in summary.items():
        med, low, high = s["steps_to_target_median_ci95"]
        afters = "; ".join("  ".join(f"{k} {v['mean']:.3f}±{v['se']:.3f}" for k, v in a.items()) for a in s["after"])
        print(f"{method:12s} seeds={s['seeds']} steps_to_{args.target}: median {med:g} [{low:g}, {high:g}]")
        print(f"{'':12s} after: {afters}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
