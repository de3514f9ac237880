"""Convergence study on CPU, the learning setting: GRPO vs XRPO, ExTra and XRPO+ExTra at equal rollouts.

Not a CI test (each run trains verl's real trainer on CPU for ~10 minutes). For each method and
seed it trains the learning setting (`xrpo_verl/lab/learning_setting.py`: the tiny model partly warmed
up on column addition, a disjoint held-out set) with `xrpo_verl/lab/recipes/<method>.yaml` and the same
rollouts per prompt for every method (GRPO's n = XRPO's n_avg); verl validates on the held-out set
every `--val-every` steps (k samples at T=1: mean@k and pass@k); the final weights are then
measured greedy and mean@k on `n_eval` problems (the held-out sums and more, none trained on).
Reported per method: mean@k and pass@k curves against step and against rollouts generated, steps
to the target mean@k with a bootstrap confidence interval over seeds, the curve's mean over the
rollouts every run generated (`curve_area`), the after-training accuracy, and each one's difference
from GRPO's on the same seed (same data order) with a bootstrap interval.
`xrpo_planner` and `xrpo_planner_icl` are XRPO's ablations (xrpo = planner + ICL + sharpening).
`extra_n` (novelty only) and `extra_r` (prefix regeneration only) are ExTra's; `dapo` is GRPO with
verl's dynamic sampling, whose dropped groups count as rollouts generated.

Resumable: a run that finished has `done.json` (the measured accuracy, the validation curve and
per-step metrics of every part; small enough to keep in git) and is reused; an interrupted one
starts again.

    python studies/convergence_study.py --methods grpo --seeds 0 1 2 --out outputs/convergence
    python studies/convergence_study.py --report-only --out outputs/convergence   # table + plot
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

VAL_ACC = re.compile(r"^val-core/.+/acc/mean@(\d+)$")
VAL_PASS = re.compile(r"^val-core/.+/acc/best@(\d+)/mean$")
ROLLOUTS_MEAN = "xrpo/alloc/n_q/mean"  # the planner's rollouts per prompt (XRPO); GRPO uses n
# DAPO's dynamic sampling (verl's V1 replay buffer): groups generated and dropped in a step, each of n
# rollouts: all-equal groups evicted, and groups finished beyond the batch once it was full.
DAPO_DROPPED = ("training/filter_groups/evicted_samples", "training/filter_groups/discarded_surplus_samples")
# Pilot-Commit generates its pilots, trained or not, and its commits: every rollout of the step.
PC_ROLLOUTS = "xrpo/pc/rollouts"
# Per-step metrics kept in each run's done.json: the training reward and what each part did.
SERIES = (
    "critic/score/mean",
    "timing_s/step",
    "actor/entropy",
    ROLLOUTS_MEAN,
    "xrpo/alloc/n_q/min",
    "xrpo/alloc/n_q/max",
    "xrpo/icl/triggers",
    "xrpo/icl/flips",
    "xrpo/icl/zero_shot_flips",
    "xrpo/icl/gate_share",
    "xrpo/sharpening/bonus_share",
    "xrpo/novelty/bonus_share",
    "xrpo/guided/injected",
    "xrpo/guided/success_rate",
    *DAPO_DROPPED,
    PC_ROLLOUTS,
    "xrpo/groups/mixed",
    "xrpo/groups/mixed_rollout_share",
    "xrpo/select/trained_with_record",
    "xrpo/select/score_trained",
    "xrpo/select/score_passed_over",
    "xrpo/icl/reliance_rows",
    "xrpo/icl/reliance_seq",
    "xrpo/icl/reliance_token",
    "xrpo/icl/reliance_floor_token",
    "xrpo/alloc/fail_floor_rollouts",
)
# Kept in done.json beside SERIES though the report reads none of them: the code task's sandbox
# accounting per step, from which RESULTS computes the sandbox's share of the step. With them a
# run's final record carries every figure quoted from it, and its metrics.jsonl stays out of git.
RECORDED_PREFIXES = ("reward/sandbox/", "reward/verdict/")


def read_metrics(path: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.setdefault(int(rec["step"]), {}).update(rec["data"])
    return out


def rollouts_by_step(metrics: dict[int, dict], prompts: int, n: int) -> dict[int, int]:
    """Rollouts generated up to and including each logged step (0 before training); DAPO's dropped
    groups and Pilot-Commit's untrained pilots count as generated."""
    rollouts, spent = {0: 0}, 0
    for step in sorted(metrics):
        if "critic/score/mean" in metrics[step]:
            if PC_ROLLOUTS in metrics[step]:
                spent += round(metrics[step][PC_ROLLOUTS])
                rollouts[step] = spent
                continue
            dropped = sum(metrics[step].get(key, 0) for key in DAPO_DROPPED)
            spent += round(prompts * metrics[step].get(ROLLOUTS_MEAN, n) + n * dropped)
        rollouts[step] = spent
    return rollouts


def checkpoint_curve(
    metrics: dict[int, dict], points: dict[int, dict], prompts: int, n: int, k: int
) -> list[tuple[int, int, float, float]]:
    """The validation curve from checkpoints measured after the run (`points`: step -> measure()'s
    dict, step 0 = before training): (step, rollouts generated up to it, mean@k, pass@k), pass@k
    being the share of problems any of the k samples solved."""
    rollouts = rollouts_by_step(metrics, prompts, n)
    curve = []
    for step in sorted(points):
        per_problem = points[step][f"mean@{k}"]["per_problem"]
        solved = float(np.mean([p > 0 for p in per_problem]))
        curve.append((step, rollouts[step], points[step][f"mean@{k}"]["mean"], solved))
    return curve


def val_curve(metrics: dict[int, dict], prompts: int, n: int) -> list[tuple[int, int, float, float | None]]:
    """(step, rollouts generated up to it, mean@k, pass@k) at each validation (step 0 = before training).

    Every rollout generated counts: DAPO's dropped groups as well as the trained ones."""
    rollouts, curve = rollouts_by_step(metrics, prompts, n), []
    spent = max(rollouts.values())
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


def cost_to_target(curve, step_seconds: list, target: float) -> tuple[int, float] | None:
    """Rollouts generated and training seconds (the sum of `timing_s/step`, validation left out)
    up to the first validated step whose mean@k reaches `target`; None if never."""
    step = steps_to_target(curve, target)
    if step is None:
        return None
    rollouts = next(r for s, r, _, _ in curve if s == step)
    return rollouts, float(sum(t for t in step_seconds[:step] if t is not None))


def curve_area(curve, budget: int) -> float | None:
    """Mean held-out mean@k over the first `budget` rollouts generated: the area under the curve of
    mean@k against rollouts (linear between measured points) divided by `budget`. At equal
    rollouts, a method that learns sooner has the larger area; every measured point counts, so it
    is steadier than one point at the end. None if the curve stops short of `budget`."""
    xs = np.array([r for _, r, _, _ in curve], dtype=np.float64)
    ys = np.array([acc for _, _, acc, _ in curve], dtype=np.float64)
    if budget <= 0 or xs[-1] < budget:
        return None
    inside = xs < budget
    x = np.append(xs[inside], budget)
    y = np.append(ys[inside], np.interp(budget, xs, ys))
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / budget)


def upper_median(a, axis=None):
    """The median, with an even count the upper of the two middle values (never a midpoint made up
    between a finite value and a censored one)."""
    return np.quantile(a, 0.5, axis=axis, method="higher")


def median_ci(values: list[float | None]) -> str:
    """Median and 95% bootstrap interval over seeds, a run that never got there counted as beyond all
    (with an even count, the upper of the two middle values: a median is not made up between a
    finite cost and a run that never got there)."""
    finite = [v for v in values if v is not None]
    if not finite:
        return "never"
    beyond = 10 * max(finite) + 1
    med, low, high = bootstrap([beyond if v is None else v for v in values], upper_median)
    show = lambda x: "never" if x >= beyond else f"{x:,.0f}"  # noqa: E731
    return f"{show(med)} [{show(low)}, {show(high)}]"


def bootstrap(values: list[float], stat=np.mean, rounds: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """`stat` of `values` over seeds and its 95% percentile-bootstrap interval."""
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    resampled = stat(rng.choice(arr, size=(rounds, len(arr)), replace=True), axis=1)
    return float(stat(arr)), float(np.percentile(resampled, 2.5)), float(np.percentile(resampled, 97.5))


# each setting's name on its plot (the choices of --setting)
PLOT_TITLES = {
    "learning": "Learning setting (column addition",
    "testbed": "Testbed (families of sums",
    "testbed_epochs": "Testbed over 128 prompts, four epochs (families of sums",
    "code": "Code task (stdin programs judged in the sandbox",
    "code_tail": "Code task with a hard tail, 96 problems (stdin programs judged in the sandbox",
}


def base_setting(name: str):
    """The learning setting (`learning_setting.LearningSetting()`), the premise testbed (`testbed.SETTING`), its
    multi-epoch protocol (`testbed.EPOCHS`) or the code task (`code_rl.CodeSetting()`, rewards judged
    in the sandbox)."""
    from xrpo_verl.lab import code_rl, learning_setting, testbed

    settings = {
        "testbed": testbed.SETTING,
        "testbed_epochs": testbed.EPOCHS,
        "code": code_rl.CodeSetting(),
        "code_tail": code_rl.TAIL,
    }
    return settings.get(name) or learning_setting.LearningSetting()


def study_setting(args):
    """The setting with the study's validation samples and, where given, its measurement set's size."""
    setting = replace(base_setting(args.setting), val_samples=args.k)
    return setting if args.n_eval is None else replace(setting, n_eval=args.n_eval)


def task_run(setting, out: Path, steps: int, method: str) -> tuple:
    """The setting's `CpuRun` under `out` and the task's own overrides of `method`'s recipe."""
    from xrpo_verl.lab import code_rl, learning_setting
    from xrpo_verl.lab.launch import load_recipe

    if isinstance(setting, code_rl.CodeSetting):
        ours = bool(load_recipe(method).get("config_name"))
        return code_rl.cpu_run(out, setting, save_freq=steps), list(code_rl.XRPO_OVERRIDES if ours else ())
    return learning_setting.cpu_run(out, setting, save_freq=steps), []


def run_one(method: str, seed: int, args) -> Path:
    from xrpo_verl.lab import learning_setting
    from xrpo_verl.lab.launch import launch, load_recipe, trainer_command

    out = Path(args.out) / method / f"seed{seed}"
    if (out / "done.json").exists():
        return out  # finished runs are reused
    if out.exists():
        import shutil

        shutil.rmtree(out)  # an interrupted run starts again: the file logger appends
    setting = replace(study_setting(args), steps=args.steps, lr=args.lr)
    every = args.eval_every
    run, task_extra = task_run(setting, out, every or args.steps, method)
    # verl's validation runs on the trainer's rollout path; measuring the checkpoints afterwards in
    # batched generate is several times faster, so the curve can afford the larger set
    validation = (
        ["trainer.val_before_train=False"] if every else learning_setting.validation_overrides(setting, args.val_every)
    )
    extra = [*validation, f"data.seed={seed}", *task_extra]
    check_command(out, trainer_command(run, load_recipe(method), extra))
    result = launch(run, method, extra, timeout_s=args.timeout, echo=True)
    if result.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} failed (exit {result.returncode}); see {out / 'trainer.log'}")
    final = run.ckpt_dir / f"global_step_{args.steps}" / "actor"
    after = measure(final, setting, seed, breadth_k=args.breadth_k)
    metrics = read_metrics(run.metrics_path)
    record = {"method": method, "seed": seed, "after": after, **compact(metrics, setting)}
    if every:
        before = json.loads((Path(args.out) / "before.json").read_text())
        points = {0: before, args.steps: after}
        for step in range(every, args.steps, every):
            points[step] = measure(run.ckpt_dir / f"global_step_{step}" / "actor", setting, seed, greedy=False)
        curve = checkpoint_curve(metrics, points, setting.prompts_per_step, setting.n, args.k)
        record.update(curve=curve, eval_every=every)
    (out / "done.json").write_text(json.dumps(record))
    import shutil

    shutil.rmtree(run.ckpt_dir)  # ~60 MB a run; the measured numbers are kept
    return out


def compact(metrics: dict[int, dict], setting) -> dict:
    """What the report needs from a run's metrics.jsonl: the validation curve and the SERIES per step
    (and the RECORDED_PREFIXES series, for RESULTS)."""
    steps = sorted(s for s in metrics if "critic/score/mean" in metrics[s])
    judged = any(metrics[s].get("reward/sandbox/runs") for s in steps)  # math runs log zeros there
    recorded = sorted({k for s in steps for k in metrics[s] if k.startswith(RECORDED_PREFIXES)}) if judged else []
    return {
        "curve": val_curve(metrics, setting.prompts_per_step, setting.n),
        "series": {
            k: [metrics[s].get(k) for s in steps] for k in (*SERIES, *recorded) if any(k in metrics[s] for s in steps)
        },
    }


def load_record(run_dir: Path) -> dict:
    """A finished run's done.json; runs finished before done.json held the curve get it from metrics.jsonl."""
    from xrpo_verl.lab import learning_setting

    record = json.loads((run_dir / "done.json").read_text())
    if "curve" not in record:
        record.update(compact(read_metrics(run_dir / "metrics.jsonl"), learning_setting.LearningSetting()))
    return record


def measure(checkpoint: Path | None, setting, seed: int, greedy: bool = True, breadth_k: int = 0) -> dict:
    """Greedy and mean@k on the measurement set (`n_eval` problems; code: the held-out problems,
    judged in the sandbox, and pass@k) with standard errors over problems; with `breadth_k`, also
    `learning_setting.heldout_breadth` of that many samples (pass@breadth_k, Self-BLEU, LogDet, styles)."""
    import torch
    from transformers import AutoTokenizer

    from xrpo_verl.lab import code_rl, learning_setting, tiny_model

    torch.set_num_threads(1)
    model_dir = tiny_model.build(setting.model)
    model = learning_setting.load_actor(model_dir, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    k, max_new = setting.val_samples, setting.max_response_length
    if isinstance(setting, code_rl.CodeSetting):
        heldout = code_rl.heldout_problems(setting)
        found = code_rl.heldout_accuracy(model, tokenizer, heldout, k, max_new, setting.backend, seed)
    else:
        heldout = learning_setting.heldout_problems(setting, setting.n_eval)
        found = learning_setting.heldout_accuracy(model, tokenizer, heldout, k, max_new, seed, greedy=greedy)
        if breadth_k:
            from xrpo_verl.embeddings import get_embedder

            embed = get_embedder().encode
            more = learning_setting.heldout_breadth(model, tokenizer, heldout, breadth_k, max_new, seed, embed)
            found.update({key: v for key, v in more.items() if key not in found})  # mean@k stays greedy's run's
    return {
        k: {
            "mean": v.mean,
            "se": v.se if np.isfinite(v.se) else None,
            **({"never": v.never, "always": v.always, "per_problem": list(v.per_problem)} if v.per_problem else {}),
        }
        for k, v in found.items()
    }


def summarize(args) -> dict:
    summary = {}
    for method in args.methods:
        done = [p for p in sorted((Path(args.out) / method).glob("seed*")) if (p / "done.json").exists()]
        if not done:
            continue
        records = [load_record(p) for p in done]
        curves = [r["curve"] for r in records]
        reach = [steps_to_target(c, args.target) for c in curves]
        costs = [cost_to_target(r["curve"], r["series"].get("timing_s/step", []), args.target) for r in records]
        never = args.steps + (args.eval_every or args.val_every)  # censored: beyond the last validation
        median, low, high = bootstrap([never if r is None else r for r in reach], upper_median)
        series = {
            k: [float(np.nanmean([v for v in r["series"][k] if v is not None])) for r in records]
            for k in SERIES
            if all(k in r["series"] for r in records)
        }
        summary[method] = {
            "seeds": [r["seed"] for r in records],
            "steps_to_target": reach,
            "steps_to_target_median_ci95": [median, low, high],
            "rollouts_to_target": [c and c[0] for c in costs],
            "seconds_to_target": [c and c[1] for c in costs],
            "after": [
                {k: {x: v for x, v in a.items() if x != "per_problem"} for k, a in r["after"].items()} for r in records
            ],
            "after_per_problem": [{k: a.get("per_problem") for k, a in r["after"].items()} for r in records],
            "series_run_means": series,
            "curves": curves,
        }
    # the rollouts every run generated: DAPO's runs generate more a step than the others
    budget = min((curve[-1][1] for s in summary.values() for curve in s["curves"]), default=0)
    for s in summary.values():
        s["curve_area_rollouts"] = budget
        s["curve_area"] = [curve_area(c, budget) for c in s["curves"]]
    return summary


def versus(summary: dict, base: str, key: str) -> dict[str, list[float]]:
    """Per method, the after-training `key` accuracy minus the base method's on the same seed
    (same data order), averaged over the seeds both have: mean and 95% bootstrap interval."""
    return paired_with(summary, base, {m: [a[key]["mean"] for a in s["after"]] for m, s in summary.items()})


def paired_with(summary: dict, base: str, values: dict[str, list[float | None]]) -> dict[str, list[float]]:
    """`values` (per method, one a seed in `summary[method]["seeds"]` order) minus the base method's
    on the same seed, over the seeds both have: [mean, 95% low, high, seeds]; two seeds at least."""
    if base not in summary:
        return {}
    base_by_seed = dict(zip(summary[base]["seeds"], values[base], strict=True))
    out = {}
    for method, s in summary.items():
        diffs = [
            v - base_by_seed[seed]
            for seed, v in zip(s["seeds"], values[method], strict=True)
            if base_by_seed.get(seed) is not None and v is not None
        ]
        if method != base and len(diffs) >= 2:
            out[method] = [*bootstrap(diffs), len(diffs)]
    return out


def _seed_mean(curves: list[list], steps: list[int], index: int) -> list[float]:
    """Column `index` of each curve's point at each of `steps`, averaged over the curves (seeds)."""
    return [float(np.mean([next(c[index] for c in curve if c[0] == st) for curve in curves])) for st in steps]


def plot(summary: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey="row")
    # one colour per method: the default cycle repeats after ten
    palette = plt.get_cmap("tab10" if len(summary) <= 10 else "tab20").colors
    for i, (method, s) in enumerate(summary.items()):
        color = palette[i % len(palette)]
        for row, metric in ((0, 2), (1, 3)):
            for col in (0, 1):
                ax = axes[row][col]
                for curve in s["curves"]:
                    points = [(c[col], c[metric]) for c in curve if c[metric] is not None]
                    ax.plot(*zip(*points), color=color, alpha=0.25, lw=1)
                # the mean over seeds at the validated steps all seeds share
                shared = sorted(set.intersection(*({c[0] for c in curve} for curve in s["curves"])))
                # rollouts at a step differ between seeds where a method's step size varies (DAPO, Pilot-Commit)
                mean, xs = _seed_mean(s["curves"], shared, metric), _seed_mean(s["curves"], shared, col)
                ax.plot(xs, mean, color=color, lw=2.2, marker="o", ms=3, label=f"{method} ({len(s['curves'])} seeds)")
    for col, label in enumerate(("training step", "rollouts generated")):
        axes[1][col].set_xlabel(label)
    axes[0][0].axhline(args.target, ls="--", c="gray", lw=1)
    axes[0][0].set_ylabel(f"held-out mean@{args.k} (T=1)")
    axes[1][0].set_ylabel(f"held-out pass@{args.k} (T=1)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{PLOT_TITLES[args.setting]}, tiny model, verl on CPU)\nthin = one seed, thick = mean over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(summary: dict, before: dict | None, args) -> str:
    """The study's table as Markdown: one row per method."""
    k = f"mean@{args.k}"
    lines = [
        f"| method | seeds | val {k} at step {args.steps} (held-out) | after: {k} (change) | after: greedy | "
        f"{k} − GRPO's, same seed [95% CI] | greedy − GRPO's [95% CI] | "
        f"steps to val {k} ≥ {args.target}: median [95% CI] | rollouts to it | training seconds to it | "
        f"curve's mean {k} over the first {_budget(summary):,} rollouts | its difference from GRPO's [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = "grpo"
    vs_mean, vs_greedy = versus(summary, base, k), versus(summary, base, "greedy")
    vs_area = paired_with(summary, base, {m: s["curve_area"] for m, s in summary.items()})
    for method, s in summary.items():
        finals = [c[-1][2] for c in s["curves"]]
        after_k = [a[k]["mean"] for a in s["after"]]
        after_g = [a["greedy"]["mean"] for a in s["after"]]
        sd = lambda xs: float(np.std(xs, ddof=1)) if len(xs) > 1 else float("nan")  # noqa: E731
        change = f" ({np.mean(after_k) - before[k]['mean']:+.3f})" if before else ""
        med, low, high = s["steps_to_target_median_ci95"]
        cell = lambda d: f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] ({d[3]} seeds)" if d else "—"  # noqa: E731
        reached = "never" if med > args.steps else f"{med:g} [{low:g}, {high:g}]"
        lines.append(
            f"| {method} | {len(finals)} | {np.mean(finals):.3f} ± {sd(finals):.3f} | "
            f"{np.mean(after_k):.3f} ± {sd(after_k):.3f}{change} | {np.mean(after_g):.3f} ± {sd(after_g):.3f} | "
            f"{cell(vs_mean.get(method))} | {cell(vs_greedy.get(method))} | {reached} | "
            f"{median_ci(s['rollouts_to_target'])} | {median_ci(s['seconds_to_target'])} | "
            f"{_mean_sd(s['curve_area'])} | {cell(vs_area.get(method))} |"
        )
    return "\n".join(lines)


def _budget(summary: dict) -> int:
    return next(iter(summary.values()))["curve_area_rollouts"]


def _mean_sd(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "—"
    sd = f" ± {np.std(known, ddof=1):.3f}" if len(known) > 1 else ""
    return f"{np.mean(known):.3f}{sd}"


def _in_se(change: float, se: float) -> str:
    """A change in standard errors; an SE of 0 (every problem moved alike, e.g. none) has none."""
    return f"{change / se:+.1f} SE" if se > 0 else "SE 0"


def seeds_report(summary: dict, before: dict, k: int) -> str:
    """Per run: the change of greedy and mean@k on the measurement set, paired per problem, with its SE."""
    from xrpo_verl.lab import learning_setting

    before = {key: before[key] for key in ("greedy", f"mean@{k}") if key in before}

    base = dict(zip(summary["grpo"]["seeds"], summary["grpo"]["after_per_problem"])) if "grpo" in summary else {}
    lines = ["| method | seed | " + " | ".join(f"{k}: before → after, change (SE)" for k in before)]
    lines[0] += " | " + " | ".join(f"{k} − GRPO's, same seed, paired (SE)" for k in before) + " |"
    lines.append("|---|---|" + "---|" * 2 * len(before))
    for method, s in summary.items():
        for seed, after in zip(s["seeds"], s["after_per_problem"], strict=True):
            versus_grpo = []
            for k in before:
                if method == "grpo" or not base.get(seed, {}).get(k) or not after.get(k):
                    versus_grpo.append("—")
                    continue
                diff, se = learning_setting.paired_change(base[seed][k], after[k])
                versus_grpo.append(f"{diff:+.3f} ± {se:.3f} ({_in_se(diff, se)})")
            cells = []
            for k in before:
                if not after.get(k) or "per_problem" not in before[k]:
                    cells.append("—")
                    continue
                change, se = learning_setting.paired_change(before[k]["per_problem"], after[k])
                moved = f"{before[k]['mean']:.3f} → {np.mean(after[k]):.3f}"
                cells.append(f"{moved}, {change:+.3f} ± {se:.3f} ({_in_se(change, se)})")
            lines.append(f"| {method} | {seed} | " + " | ".join(cells + versus_grpo) + " |")
    return "\n".join(lines)


BREADTH = (  # after training, `learning_setting.breadth` of --breadth-k samples: (key, column, format)
    ("pass@{k}", "pass@{k}", "{:.3f}"),
    ("mean@{k}", "mean@{k}", "{:.3f}"),
    ("self_bleu", "Self-BLEU (lower: more diverse)", "{:.3f}"),
    ("logdet", "LogDet (higher: more diverse)", "{:.1f}"),
    ("both_styles", "problems solved in both styles", "{:.3f}"),
    ("style_entropy", "style entropy of correct samples (bits)", "{:.3f}"),
)


def breadth_report(summary: dict, before: dict | None, k: int) -> str:
    """After training: what --breadth-k samples cover, per method the mean over seeds and the
    difference from GRPO's on the same seed [95% bootstrap]; before training on the first row."""
    keys = [(key.format(k=k), col.format(k=k), fmt) for key, col, fmt in BREADTH]
    keys = [c for c in keys if any(c[0] in a for s in summary.values() for a in s["after"])]
    if not keys:
        return ""
    lines = ["| method | seeds | " + " | ".join(c for _, c, _ in keys) + " |", "|---|---|" + "---|" * len(keys)]
    if before:
        lines.append(
            "| before | — | "
            + " | ".join(f.format(before[key]["mean"]) if key in before else "—" for key, _, f in keys)
            + " |"
        )
    for method, s in summary.items():
        cells = []
        for key, _, fmt in keys:
            values = [a[key]["mean"] for a in s["after"] if key in a]
            if len(values) < len(s["after"]):
                cells.append("—")
                continue
            diff = versus(summary, "grpo", key).get(method)
            vs = f" ({diff[0]:+.3f} [{diff[1]:+.3f}, {diff[2]:+.3f}])" if diff else ""
            cells.append(fmt.format(float(np.mean(values))) + vs)
        lines.append(f"| {method} | {len(s['after'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


HARD_BEFORE, LEARNED_AFTER = 0.25, 0.3  # a family's held-out mean@k before / after training (diagnostic)


def hard_families_learned(before: list[float], after: list[float], families: list[str]) -> tuple[int, int]:
    """Testbed: of the families whose held-out mean@k is below HARD_BEFORE before training (those
    whose offset the model must find), how many end above LEARNED_AFTER; a family's accuracy is
    nearly all or nothing, since one offset decides every sum of it. (learned, hard)"""
    fam = np.asarray(families)
    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    hard = [f for f in sorted(set(families)) if b[fam == f].mean() < HARD_BEFORE]
    return sum(a[fam == f].mean() > LEARNED_AFTER for f in hard), len(hard)


def families_report(summary: dict, before: dict, args) -> str:
    """Per method, the hard families each seed learned (`hard_families_learned`), and the paired
    difference from GRPO's. A diagnostic added at stop 52, after the results it explains."""
    from xrpo_verl.lab import learning_setting

    k = f"mean@{args.k}"
    setting = study_setting(args)
    families = [p.family for p in learning_setting.heldout_problems(setting, setting.n_eval)]
    learned = {
        m: [hard_families_learned(before[k]["per_problem"], a[k], families)[0] for a in s["after_per_problem"]]
        for m, s in summary.items()
    }
    hard = hard_families_learned(before[k]["per_problem"], before[k]["per_problem"], families)[1]
    vs = paired_with(summary, "grpo", {m: [float(x) for x in v] for m, v in learned.items()})
    lines = [
        f"| method | seeds | hard families learned, of {hard} (per seed) | mean | − GRPO's, same seed [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for m, v in learned.items():
        d = vs.get(m)
        cell = f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]" if d else "—"
        lines.append(f"| {m} | {len(v)} | {' '.join(map(str, v))} | {np.mean(v):.1f} | {cell} |")
    return "\n".join(lines)


def tail_report(summary: dict, before: dict, args) -> str:
    """Code with a hard tail: per method, the held-out mean@k of the tail's problems and of the rest
    after training, and the paired difference from GRPO's. Defined with the task, before its first run."""
    from xrpo_verl.lab import code_rl, code_task

    k = f"mean@{args.k}"
    tail = np.array([code_task.in_tail(p) for p in code_rl.heldout_problems(study_setting(args))])

    def split(per_problem: list[float]) -> tuple[float, float]:
        v = np.asarray(per_problem)
        return float(v[tail].mean()), float(v[~tail].mean())

    b_tail, b_rest = split(before[k]["per_problem"])
    lines = [
        f"Held-out {k}, the tail's {int(tail.sum())} problems and the other {int((~tail).sum())}; "
        f"before training: tail {b_tail:.3f}, rest {b_rest:.3f}",
        "| method | seeds | tail | − GRPO's, same seed [95% CI] | rest | − GRPO's, same seed [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    parts = {m: [split(a[k]) for a in s["after_per_problem"]] for m, s in summary.items()}
    vs = [paired_with(summary, "grpo", {m: [v[i] for v in parts[m]] for m in parts}) for i in (0, 1)]
    for m, v in parts.items():
        cells = []
        for i in (0, 1):
            d = vs[i].get(m)
            cells += [f"{np.mean([x[i] for x in v]):.3f}", f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]" if d else "—"]
        lines.append(f"| {m} | {len(v)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# (column, metrics, format, the part that logs them: `launch.PARTS`, or None for every method)
PART_COLUMNS = (
    ("rollouts/prompt min–max", ("xrpo/alloc/n_q/min", "xrpo/alloc/n_q/max"), "{:.1f}–{:.1f}", "planner"),
    ("ICL prompts", ("xrpo/icl/triggers",), "{:.2f}", "icl"),
    ("ICL flips", ("xrpo/icl/flips",), "{:.3f}", "icl"),
    ("zero-shot flips beside them", ("xrpo/icl/zero_shot_flips",), "{:.3f}", "icl"),
    ("sharpening share of advantage", ("xrpo/sharpening/bonus_share",), "{:.4f}", "sharpening"),
    ("novelty share of advantage", ("xrpo/novelty/bonus_share",), "{:.4f}", "novelty"),
    ("guided prompts", ("xrpo/guided/injected",), "{:.2f}", "prefix"),
    ("guided success", ("xrpo/guided/success_rate",), "{:.3f}", "prefix"),
    ("mixed groups", ("xrpo/groups/mixed",), "{:.2f}", None),
    ("ICL reliance / token", ("xrpo/icl/reliance_token",), "{:.3f}", "icl"),
    ("Pilot-Commit rollouts", (PC_ROLLOUTS,), "{:.0f}", None),
    ("entropy", ("actor/entropy",), "{:.3f}", None),
    ("step s", ("timing_s/step",), "{:.1f}", None),
)


def parts_report(summary: dict, parts: dict[str, dict[str, bool]]) -> str:
    """What each part did, per step, averaged over the run and then over seeds. `parts`: per
    method, the parts its recipe switches on ("off": the part is not in the method; the trainer
    logs 0 for it. "—": not logged)."""
    lines = ["| method | " + " | ".join(c[0] for c in PART_COLUMNS) + " |", "|---" * (len(PART_COLUMNS) + 1) + "|"]
    for method, s in summary.items():
        cells = []
        for _, keys, fmt, part in PART_COLUMNS:
            found = [s["series_run_means"].get(k) for k in keys]
            if part is not None and not parts[method][part]:
                cells.append("off")
            elif any(f is None for f in found):
                cells.append("—")
            else:
                cells.append(fmt.format(*(float(np.mean(f)) for f in found)))
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The CPU platform and the toy lab moved out of `xrpo_verl.local` (issue 47): records made before
# name the old modules in their trainer commands (`pkg://xrpo_verl.local.arith`). Read as the new
# ones, so that a seed added now is compared with the configuration the finished seeds ran, not
# with where its code lived then.
MOVED_MODULES = (
    (re.compile(r"xrpo_verl([./])local([./])(switches|register|shims|vllm_cpu|hf_rollout)\b"), r"xrpo_verl\1cpu\2\3"),
    (re.compile(r"xrpo_verl([./])local([./])learning\b"), r"xrpo_verl\1lab\2learning_setting"),
    (re.compile(r"xrpo_verl([./])local([./])"), r"xrpo_verl\1lab\2"),
)


def current_module_paths(token: str) -> str:
    """`token` with the modules it names at their present paths."""
    for old, new in MOVED_MODULES:
        token = old.sub(new, token)
    return token


# The CPU recipes name the phased schedule since `auto` became the default (3633ef6); on the hf
# engine, which every study run uses, auto resolves to phased, the default the earlier records ran.
PHASED_ON_HF = ("algorithm.xrpo.planner.schedule=phased", "actor_rollout_ref.rollout.name=hf")


def run_settings(command: list[str], run_dir: Path) -> list[str]:
    """A trainer command less what differs between the seeds of one method: the interpreter, the
    run's own paths and the data order; the modules it names at their present paths; the phased
    schedule named on hf, where it was and is what the default runs."""
    own = f"{run_dir.parent.name}/{run_dir.name}/"
    implied = {PHASED_ON_HF[0]} if PHASED_ON_HF[1] in command else set()
    return [
        current_module_paths(t)
        for t in command[1:]
        if own not in t and not t.startswith("data.seed=") and t not in implied
    ]


def check_command(run_dir: Path, command: list[str]) -> None:
    """Refuse to add a seed to a method whose finished seeds ran another trainer command (its recipe
    changed since): the seeds of one column must be runs of one configuration."""
    from xrpo_verl.lab.launch import read_command

    mine = run_settings(command, run_dir)
    for other in sorted(run_dir.parent.glob("seed*")):
        if other == run_dir or not (other / "done.json").exists() or not (other / "command.txt").exists():
            continue
        theirs = run_settings(read_command(other), other)
        if theirs != mine:
            changed = sorted(set(mine) ^ set(theirs))
            raise SystemExit(
                f"{run_dir.parent} holds runs of another configuration ({other.name}); the settings that "
                f"differ: {changed or 'their order'}. Use another --out, or the recipe those runs used."
            )


def check_model(out: Path, setting) -> None:
    """Refuse to add runs to records made from another model (the records' `model.json`)."""
    from xrpo_verl.lab import tiny_model

    model_dir = tiny_model.build(setting.model)
    found = {
        "key": setting.model.key,
        "weights_sha256": hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest(),
    }
    path = out / "model.json"
    if not path.exists():
        path.write_text(json.dumps(found, indent=1))
        return
    recorded = json.loads(path.read_text())
    if recorded["weights_sha256"] != found["weights_sha256"]:
        raise SystemExit(
            f"{out} holds runs of another model (weights {recorded['weights_sha256'][:12]}, key "
            f"{recorded['key']}) than the one built here ({found['weights_sha256'][:12]}, key {found['key']}): "
            "their before/after comparisons would mix the two; use another --out"
        )


def summarized_methods(args) -> list[str]:
    """The methods a run's `summary.json` and plot cover: with --report-only the ones named, else
    also those the set's summary covered before, so training one method keeps the others' rows."""
    path = Path(args.out) / "summary.json"
    if args.report_only or not path.exists():
        return list(args.methods)
    before = json.loads(path.read_text()).get("settings", {}).get("methods", [])
    return list(dict.fromkeys([*before, *args.methods]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--setting",
        choices=tuple(PLOT_TITLES),
        default="learning",
        help="the task and model (testbed_epochs: the testbed over 128 training prompts, visited about four "
        "times; code_tail: the code task with a hard tail, 96 training problems visited about four times)",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        default=["grpo", "xrpo", "extra", "xrpo_extra", "xrpo_planner", "xrpo_planner_icl"],
        help="xrpo_verl/lab/recipes/<method>.yaml names",
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=None, help="default: the setting's")
    p.add_argument("--k", type=int, default=None, help="validation samples per problem (default: the setting's)")
    p.add_argument("--lr", type=float, default=None, help="actor learning rate (default: the setting's)")
    p.add_argument("--val-every", type=int, default=10, help="verl's validation on the held-out set every N steps")
    p.add_argument(
        "--eval-every",
        type=int,
        default=0,
        help="instead: save every N steps and measure each checkpoint's mean@k on the measurement set (n_eval)",
    )
    p.add_argument(
        "--breadth-k", type=int, default=0, help="after training, also pass@K, Self-BLEU, LogDet of K samples"
    )
    p.add_argument("--n-eval", type=int, default=None, help="problems of the measurement set (default: the setting's)")
    p.add_argument("--target", type=float, default=0.45, help="held-out mean@k that counts as converged")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    p.add_argument("--out", default="outputs/convergence")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    defaults = base_setting(args.setting)
    args.steps = defaults.steps if args.steps is None else args.steps
    args.k = defaults.val_samples if args.k is None else args.k
    args.lr = defaults.lr if args.lr is None else args.lr
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    before_path = out / "before.json"
    if not args.report_only:
        setting = study_setting(args)
        check_model(out, setting)
        if not before_path.exists():
            before_path.write_text(json.dumps(measure(None, setting, seed=0, breadth_k=args.breadth_k)))
        for seed in args.seeds:
            for method in args.methods:
                run_one(method, seed, args)
    args.methods = summarized_methods(args)
    summary = summarize(args)
    if not summary:
        print(f"no finished runs under {args.out}", file=sys.stderr)
        return 1
    settings = {k: v for k, v in vars(args).items() if k not in ("report_only", "out")}
    before = json.loads(before_path.read_text()) if before_path.exists() else None
    (out / "summary.json").write_text(
        json.dumps({"settings": settings, "before": before, "methods": summary}, separators=(",", ":"))
    )
    plot(summary, args, out / "convergence.png")
    if before:
        se = lambda v: "" if v["se"] is None else f"±{v['se']:.3f}"  # noqa: E731  (a run-level figure has none)
        print("before: " + "  ".join(f"{k} {v['mean']:.3f}{se(v)}" for k, v in before.items()))
    print(report(summary, before, args))
    from xrpo_verl.lab.launch import recipe_parts

    print(parts_report(summary, {method: recipe_parts(method) for method in summary}))
    if before:
        print(seeds_report(summary, before, args.k))
    if args.breadth_k:
        print(breadth_report(summary, before, args.breadth_k))
    if before and args.setting in ("testbed", "testbed_epochs"):
        print(families_report(summary, before, args))
    if before and args.setting == "code_tail":
        print(tail_report(summary, before, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
