"""A step of XRPO, ExTra and XRPO+ExTra against GRPO's, at equal rollouts, on the learning setting.

Run: `pytest benchmarks/test_bench_step_cost.py --benchmark-only` (about 4 launches of
XRPO_BENCH_COST_STEPS steps each; `XRPO_BENCH_COST_BACKEND=vllm` in `.venv-vllm`). GRPO runs
first; every other method reports its step and parts over GRPO's step measured in the same
session (`extra_info["over_grpo_step"]`). The targets of issue 23 (XRPO <= 1.10x GRPO's step,
ExTra <= 1.05x, XRPO+ExTra <= 1.15x on the vLLM path; XRPO <= 1.25x on the hf path) are reported
as expected failures while not met, never as timed assertions: the ratio is a measurement.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

STEPS = int(os.environ.get("XRPO_BENCH_COST_STEPS", 12))
BACKEND = os.environ.get("XRPO_BENCH_COST_BACKEND", "hf")
TARGETS = {"hf": {"xrpo": 1.25}, "vllm": {"xrpo": 1.10, "extra": 1.05, "xrpo_extra": 1.15}}[BACKEND]
_spec = importlib.util.spec_from_file_location("step_cost", Path(__file__).parents[1] / "studies" / "step_cost.py")
step_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_cost)
_TABLE: dict[str, dict[str, float]] = {}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", step_cost.RECIPES)
def test_bench_step_cost(benchmark, recipe, tmp_path):
    metrics = benchmark.pedantic(
        step_cost.run_recipe, args=(recipe, tmp_path, STEPS, BACKEND, 0, []), rounds=1, iterations=1
    )
    _TABLE[recipe] = step_cost.parts(metrics)
    benchmark.extra_info["parts_s"] = {k: round(v, 3) for k, v in _TABLE[recipe].items()}
    if recipe == "grpo":
        return
    if "grpo" not in _TABLE:
        pytest.skip("GRPO did not run in this session: no ratio to report")
    over = step_cost.ratios({"grpo": _TABLE["grpo"], recipe: _TABLE[recipe]})[recipe]
    benchmark.extra_info["over_grpo_step"] = {k: round(v, 3) for k, v in over.items()}
    print(f"\n{recipe} ({BACKEND}): step {over['step']:.2f}x GRPO's\n" + step_cost.render(_TABLE))
    target = TARGETS.get(recipe)
    if target is not None and over["step"] > target:
        pytest.xfail(f"{recipe}'s step is {over['step']:.2f}x GRPO's on {BACKEND}; issue 23's target is {target}x")
