"""TRL's GRPOTrainer as the reference for verl's GRPO on the CPU learning setting.

Not a CI test (each run trains for minutes on CPU). Both trainers get the same thing:
the learning setting's model, training sums and held-out sums (`xrpo_verl/lab/learning_setting.py`),
the training sums in verl's order for the seed (verl's `RandomSampler` seeded with `data.seed`),
8 prompts x 8 completions a step, T = 1, at most 48 new tokens, AdamW at a constant lr 3e-5
(weight decay 0.01, grad clip 1.0: verl's defaults), no KL, one optimizer step per batch,
token-mean loss (TRL's `loss_type="dapo"` over one batch is verl's `token-mean`), group-normalised
advantages. Held-out greedy and mean@4 are measured with `learning_setting.heldout_accuracy` (evaluation
seed 0, as the demo) at steps 0, 10, ..., 50: TRL's from the in-memory model, verl's from actor
checkpoints saved every 10 steps.

verl runs its default path (old log-probs recomputed by the actor); TRL with one iteration per
batch uses the detached current log-probs. Both are on-policy here, so the ratio is 1 either way.

Resumable: a finished (trainer, seed) has `done.json` and is reused; an interrupted one starts again.

    python studies/trl_reference.py --trainers trl verl --seeds 0 1 --out outputs/trl_reference
    python studies/trl_reference.py --report-only --out outputs/trl_reference   # table + plot
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

EVAL_SEED = 0  # the demo's: the step-0 figures match RESULTS.md's "before"
TRAINERS = ("trl", "verl")


def setting_for(args):
    from xrpo_verl.lab import learning_setting

    return replace(learning_setting.LearningSetting(), steps=args.steps)


def evaluate(model, setting) -> dict:
    """Held-out greedy and mean@k of an in-memory model, as {name: {mean, se, per_problem}}."""
    import torch
    from transformers import AutoTokenizer

    from xrpo_verl.lab import learning_setting, tiny_model

    model_dir = tiny_model.build(setting.model, verbose=False)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rng = torch.random.get_rng_state()  # the evaluation must not change the training's sampling
    was_training = model.training
    model.eval()
    try:
        found = learning_setting.heldout_accuracy(
            model,
            tokenizer,
            learning_setting.heldout_problems(setting),
            setting.val_samples,
            setting.max_response_length,
            EVAL_SEED,
        )
    finally:
        torch.random.set_rng_state(rng)
        model.train(was_training)
    return {k: {"mean": v.mean, "se": v.se, "per_problem": list(v.per_problem)} for k, v in found.items()}


def verl_order(n: int, seed: int) -> list[int]:
    """The order in which verl's trainer draws the training rows for `data.seed=seed`
    (verl/trainer/ppo/utils.py:create_rl_sampler, the same sampler class and generator)."""
    import torch
    from torchdata.stateful_dataloader.sampler import RandomSampler

    generator = torch.Generator()
    generator.manual_seed(seed)
    return list(RandomSampler(data_source=range(n), generator=generator))


def run_trl(seed: int, setting, out: Path, eval_every: int) -> dict:
    import pandas as pd
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from xrpo_verl.lab import arith, learning_setting

    torch.set_num_threads(1)
    model_dir, train_file, _ = learning_setting.prepare(out, setting)
    rows = pd.read_parquet(train_file)
    order = verl_order(len(rows), seed)[: setting.steps * setting.prompts_per_step]
    data = Dataset.from_list(
        [
            {
                "prompt": [dict(m) for m in rows.iloc[i]["prompt"]],
                "answer": rows.iloc[i]["reward_model"]["ground_truth"],
            }
            for i in order
        ]
    )

    def reward(completions, answer, **kwargs):
        return [
            arith.compute_score(rows.iloc[0]["data_source"], c[0]["content"], a)["score"]
            for c, a in zip(completions, answer, strict=True)
        ]

    evals: dict[int, dict] = {}
    step_times: list[float] = []

    class EvalEvery(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kw):
            step_times.append(time.perf_counter() - self._t)
            if state.global_step % eval_every == 0:
                evals[state.global_step] = evaluate(model, setting)
                print(f"  trl seed {seed} step {state.global_step}: " + fmt(evals[state.global_step]), flush=True)

    config = GRPOConfig(
        output_dir=str(out / "trl"),
        use_cpu=True,
        bf16=False,
        seed=seed,
        max_steps=setting.steps,
        per_device_train_batch_size=setting.prompts_per_step * setting.n,
        num_generations=setting.n,
        shuffle_dataset=False,  # the dataset is already in verl's order
        max_completion_length=setting.max_response_length,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=setting.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_grad_norm=1.0,
        beta=0.0,
        gradient_checkpointing=False,  # as our CPU runs (launch.cpu_overrides); the maths is the same
        num_iterations=1,
        loss_type="dapo",
        scale_rewards="group",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        callbacks=[EvalEvery()],
    )
    trainer.train()
    train_reward = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    return {"evals": evals, "train_reward": train_reward, "step_times_s": step_times}


def run_verl(seed: int, setting, out: Path, eval_every: int) -> dict:
    from xrpo_verl.lab import launch, learning_setting

    run = learning_setting.cpu_run(out, setting, save_freq=eval_every)
    start, first_step = time.time(), []

    def on_line(line: str) -> None:
        if not first_step and "step:1 " in line:
            first_step.append(time.time() - start)

    extra = [f"data.seed={seed}", "actor_rollout_ref.actor.checkpoint.save_contents=[model]"]
    result = launch.launch(run, "grpo", extra, timeout_s=3600, echo=True, on_line=on_line)
    if result.returncode != 0:
        raise RuntimeError(f"verl seed {seed} failed (exit {result.returncode}); see {out / 'trainer.log'}")
    metrics = launch.read_metrics(run.metrics_path)
    evals = {}
    for step in range(eval_every, setting.steps + 1, eval_every):
        model = learning_setting.load_actor(run.model_path, run.ckpt_dir / f"global_step_{step}" / "actor")
        evals[step] = evaluate(model, setting)
        print(f"  verl seed {seed} step {step}: " + fmt(evals[step]), flush=True)
    shutil.rmtree(run.ckpt_dir)
    return {
        "evals": evals,
        "train_reward": [metrics[s]["critic/score/mean"] for s in sorted(metrics)],
        "step_times_s": [metrics[s]["timing_s/step"] for s in sorted(metrics)],
        "start_to_step1_s": first_step[0] if first_step else None,
    }


def fmt(ev: dict) -> str:
    return "  ".join(f"{k} {v['mean']:.3f}±{v['se']:.3f}" for k, v in ev.items())


def run_one(trainer: str, seed: int, args) -> dict:
    out = Path(args.out) / trainer / f"seed{seed}"
    done = out / "done.json"
    if done.exists():
        return json.loads(done.read_text())
    if out.exists():
        shutil.rmtree(out)  # an interrupted run starts again
    out.mkdir(parents=True)
    setting = setting_for(args)
    start = time.time()
    found = (run_trl if trainer == "trl" else run_verl)(seed, setting, out, args.eval_every)
    found["evals"] = {int(k): v for k, v in found["evals"].items()}
    found.update(trainer=trainer, seed=seed, wall_s=time.time() - start)
    done.write_text(json.dumps(found))
    return found


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of b - a over the same problems, and its standard error."""
    d = [y - x for x, y in zip(a, b, strict=True)]
    return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))


def report(args) -> int:
    out = Path(args.out)
    before = json.loads((out / "before.json").read_text())
    runs = {
        (t, s): json.loads((out / t / f"seed{s}" / "done.json").read_text())
        for t in TRAINERS
        for s in args.seeds
        if (out / t / f"seed{s}" / "done.json").exists()
    }
    if not runs:
        print(f"no finished runs under {out}", file=sys.stderr)
        return 1
    for run in runs.values():
        run["evals"] = {0: before, **{int(k): v for k, v in run["evals"].items()}}
    names = list(before)
    lines = ["| trainer | seed | " + " | ".join(f"{n} at step {s}" for n in names for s in (0, args.steps)) + " |"]
    for (t, s), run in sorted(runs.items()):
        cells = [
            f"{run['evals'][st][n]['mean']:.3f} ± {run['evals'][st][n]['se']:.3f}"
            for n in names
            for st in (0, args.steps)
        ]
        lines.append(f"| {t} | {s} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    print("\ncurves (mean over seeds of held-out accuracy):")
    steps = sorted(next(iter(runs.values()))["evals"])
    for t in TRAINERS:
        seeds = [s for s in args.seeds if (t, s) in runs]
        if not seeds:
            continue
        for n in names:
            vals = [statistics.fmean(runs[(t, s)]["evals"][st][n]["mean"] for s in seeds) for st in steps]
            print(f"  {t:5s} {n:7s} " + " ".join(f"{st}:{v:.3f}" for st, v in zip(steps, vals, strict=True)))
    print("\nverl - TRL at each evaluated step, paired over problems (same seed, same data order):")
    for s in args.seeds:
        if ("trl", s) in runs and ("verl", s) in runs:
            for n in names:
                parts = []
                for st in steps[1:]:
                    d, se = paired(
                        runs[("trl", s)]["evals"][st][n]["per_problem"],
                        runs[("verl", s)]["evals"][st][n]["per_problem"],
                    )
                    parts.append(f"{st}:{d:+.3f}±{se:.3f}")
                print(f"  seed {s} {n:7s} " + " ".join(parts))
    for (t, s), run in sorted(runs.items()):
        st = run["step_times_s"]
        extra = f", launch to step 1 {run['start_to_step1_s']:.0f} s" if run.get("start_to_step1_s") else ""
        print(f"  {t} seed {s}: median step {statistics.median(st[1:]):.2f} s, wall {run['wall_s']:.0f} s{extra}")
    plot(runs, names, args, out / "trl_reference.png")
    return 0


def plot(runs: dict, names: list[str], args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), sharey=True)
    for ax, n in zip(axes, names, strict=True):
        for i, t in enumerate(TRAINERS):
            for j, s in enumerate(s for s in args.seeds if (t, s) in runs):
                ev = runs[(t, s)]["evals"]
                steps = sorted(ev)
                ax.errorbar(
                    [st + (i - 0.5) * 0.6 for st in steps],
                    [ev[st][n]["mean"] for st in steps],
                    yerr=[ev[st][n]["se"] for st in steps],
                    color=f"C{i}",
                    ls="-" if j == 0 else "--",
                    capsize=2,
                    label=f"{t} seed {s}",
                )
        ax.set_title(f"held-out {n} (± SE over 100 problems)")
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    from xrpo_verl.lab import learning_setting

    defaults = learning_setting.LearningSetting()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainers", nargs="+", choices=TRAINERS, default=list(TRAINERS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="data order (verl's data.seed) and TRL's seed")
    p.add_argument("--steps", type=int, default=defaults.steps)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--out", default="outputs/trl_reference")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        if not (out / "before.json").exists():
            from xrpo_verl.lab import tiny_model

            setting = setting_for(args)
            model = learning_setting.load_actor(tiny_model.build(setting.model))
            (out / "before.json").write_text(json.dumps(evaluate(model, setting)))
        for seed in args.seeds:
            for trainer in args.trainers:
                run_one(trainer, seed, args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
