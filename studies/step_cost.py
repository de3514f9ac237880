"""What a step costs with each method, against GRPO in the same run, on the learning setting.

    python studies/step_cost.py --steps 12 --out outputs/step_cost            # hf rollout (.venv)
    .venv-vllm/bin/python studies/step_cost.py --backend vllm --out ...        # verl's vLLM rollout on CPU

Runs GRPO, XRPO, ExTra and XRPO+ExTra one after another at equal rollouts (the learning
setting: 8 prompts x 8 rollouts a step, XRPO's n_avg = 8) from the same model and data order, and
reads the step's parts from verl's timing metrics: generation (each planner round apart), old
log-probs, advantages (our plugin's work included), the actor update, the weight push, and our
own bookkeeping (`xrpo/time_s/plugin`). The first step (start-up, first compile) is left out;
each part is the median over the rest. Ratios are against GRPO's step measured in the same
invocation, so machine load moves both sides. `benchmarks/test_bench_step_cost.py` runs it under
pytest-benchmark; RESULTS.md ("Step cost") has the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

RECIPES = ("grpo", "xrpo", "extra", "xrpo_extra")
# the planner's schedules (docs/algorithms.md, "Streaming schedule"): name -> (recipe, overrides)
ONE_ROUND = ["algorithm.xrpo.planner.rounds=1"]
STREAMING = [*ONE_ROUND, "algorithm.xrpo.planner.schedule=streaming"]
VARIANTS = {
    "xrpo_r2": ("xrpo_r2", []),  # the paper's two rounds; `xrpo` runs one
    "xrpo_stream1": ("xrpo", STREAMING),
    "xrpo_extra_r1": ("xrpo_extra", ONE_ROUND),
    "xrpo_extra_stream1": ("xrpo_extra", STREAMING),
}
# the step's parts, as verl's timer and our trainer name them
PARTS = {
    "step": "timing_s/step",
    "gen": "timing_s/gen",
    "round_0": "timing_s/xrpo_round_0",
    "round_1": "timing_s/xrpo_round_1",
    "round_2": "timing_s/xrpo_round_2",
    "streaming": "timing_s/xrpo_streaming",
    "old_log_prob": "timing_s/old_log_prob",
    "adv": "timing_s/adv",
    "update_actor": "timing_s/update_actor",
    "update_weights": "timing_s/update_weights",
    "plugin": "xrpo/time_s/plugin",
}


def run_recipe(name: str, out: Path, steps: int, backend: str, seed: int, extra: list[str]) -> dict[int, dict]:
    """Train recipe (or variant) `name` for `steps` steps of the learning setting; verl's metrics per step."""
    from xrpo_verl.lab import launch, learning_setting

    recipe, variant = VARIANTS.get(name, (name, []))
    setting = replace(learning_setting.LearningSetting(), steps=steps)
    run = learning_setting.cpu_run(out / name, setting)
    go = launch.launch_vllm if backend == "vllm" else launch.launch
    result = go(run, recipe, [f"data.seed={seed}", *variant, *extra], timeout_s=3600)
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {result.returncode}):\n{result.stdout[-4000:]}")
    return launch.read_metrics(run.metrics_path)


def parts(metrics: dict[int, dict]) -> dict[str, float]:
    """Median of each part over steps 2..S (a part the run never logged is absent)."""
    steady = [metrics[s] for s in sorted(metrics)[1:]]
    out = {}
    for name, key in PARTS.items():
        values = [m[key] for m in steady if key in m]
        if values:
            out[name] = statistics.median(values)
    rollouts = [m.get("xrpo/alloc/n_q/mean") for m in steady if "xrpo/alloc/n_q/mean" in m]
    if rollouts:
        out["rollouts_per_prompt"] = statistics.median(rollouts)
    return out


def ratios(table: dict[str, dict[str, float]], baseline: str = "grpo") -> dict[str, dict[str, float]]:
    """Each method's parts over GRPO's step (so the parts of a row add up to about its step ratio)."""
    base = table[baseline]["step"]
    return {r: {k: v / base for k, v in p.items() if k != "rollouts_per_prompt"} for r, p in table.items()}


def render(table: dict[str, dict[str, float]]) -> str:
    cols = [c for c in PARTS if any(c in p for p in table.values())]
    lines = ["| method | " + " | ".join(cols) + " | step / GRPO |", "|---" * (len(cols) + 2) + "|"]
    base = table["grpo"]["step"] if "grpo" in table else float("nan")
    for recipe, p in table.items():
        cells = [f"{p[c]:.2f}" if c in p else "" for c in cols]
        lines.append(f"| {recipe} | " + " | ".join(cells) + f" | {p['step'] / base:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path("outputs/step_cost"))
    parser.add_argument("--backend", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), help=f"recipes or {sorted(VARIANTS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides applied to every run")
    args = parser.parse_args(argv)
    table = {}
    for recipe in args.recipes:
        metrics = run_recipe(recipe, args.out, args.steps, args.backend, args.seed, args.overrides)
        table[recipe] = parts(metrics)
        print(f"{recipe}: " + ", ".join(f"{k} {v:.2f}" for k, v in table[recipe].items()), flush=True)
    print(render(table))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"backend": args.backend, "steps": args.steps, "overrides": args.overrides, "parts_s": table}
    if "grpo" in table:
        record["over_grpo_step"] = ratios(table)
    (args.out / f"step_cost_{args.backend}.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
