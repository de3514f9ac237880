"""Steady CPU training step: verl's V1 trainer with the `hf` rollout vs TRL's `GRPOTrainer`.

Run: `pytest benchmarks/test_bench_cpu_step.py --benchmark-only`.
Same tiny model, same arithmetic prompts and reward, same batch (B=4 prompts x G=4 completions,
<= 24 new tokens, one optimizer step per training step, fp32, one torch thread). The baseline
is TRL's GRPO step in the same run; the result is the ratio of median steady step times
(`extra_info["ratio_vs_trl"]`). Issue 14's target is <= 1.5, not met (benchmarks/RESULTS.md,
"CPU step"), so the verl half reports an expected failure while the ratio is above the target
and passes once it is reached. No looser bound is asserted: on a loaded machine the ratio of
the same code moved by half between two runs ten minutes apart, so such a bound tests the load.
Step 1 of each (process spawn, first compile) is excluded: "steady" means steps 2..STEPS.

Matched algorithm: TRL with one iteration per batch never recomputes old log-probs (it uses the
detached current ones), so verl runs with `algorithm.rollout_correction.bypass_mode=True`, i.e.
the rollout's log-probs serve as pi_old (they equal the actor's to ~1e-6 here: the
`rollout_corr/*` metrics of any CPU run). XRPO_BENCH_CPU_BYPASS=0 measures verl's default path instead
(+ one actor forward pass per step; measured 1.27 s vs TRL 0.57 s, ratio 2.23).
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

from xrpo_verl.lab import arith, launch, tiny_model

STEPS = int(os.environ.get("XRPO_BENCH_CPU_STEPS", 6))
BYPASS = os.environ.get("XRPO_BENCH_CPU_BYPASS", "1") == "1"
PROMPTS, GENERATIONS, MAX_NEW = 4, 4, 24
LR = 1e-4
_RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def model_dir():
    return tiny_model.build()


def trl_step_times(model_dir, out_dir) -> list[float]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    problems = arith.sample_problems(PROMPTS * STEPS * 2, seed=11)
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p.question}], "answer": str(p.answer)} for p in problems]
    )

    def reward(completions, answer, **kwargs):
        return [
            arith.compute_score(arith.DATA_SOURCE, c[0]["content"], a)["score"] for c, a in zip(completions, answer)
        ]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._t = [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self._t)

    timer = StepTimer()
    config = GRPOConfig(
        output_dir=str(out_dir),
        use_cpu=True,
        bf16=False,
        max_steps=STEPS,
        per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=MAX_NEW,
        temperature=1.0,
        learning_rate=LR,
        beta=0.0,
        gradient_checkpointing=False,  # as our CPU runs (launch.cpu_overrides)
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        callbacks=[timer],
    )
    trainer.train()
    return timer.times


def verl_step_times(model_dir, out_dir) -> list[float]:
    train = arith.write_parquet(out_dir / "train.parquet", 256, seed=11, split="train")
    val = arith.write_parquet(out_dir / "val.parquet", 16, seed=12, split="test")
    run = launch.CpuRun(
        str(model_dir),
        str(train),
        str(val),
        str(out_dir / "run"),
        steps=STEPS,
        prompts_per_step=PROMPTS,
        n=GENERATIONS,
        max_response_length=MAX_NEW,
        lr=LR,
    )
    extra = ["algorithm.rollout_correction.bypass_mode=True"] if BYPASS else []
    result = launch.launch(run, "grpo", extra, timeout_s=900)
    assert result.returncode == 0, result.stdout[-4000:]
    from xrpo_verl.lab.launch import read_metrics

    metrics = read_metrics(run.metrics_path)
    return [metrics[s]["timing_s/step"] for s in sorted(metrics)]


@pytest.mark.slow
def test_bench_trl_grpo_step(benchmark, model_dir, tmp_path):
    times = benchmark.pedantic(trl_step_times, args=(model_dir, tmp_path), rounds=1, iterations=1)
    _RESULTS["trl"] = statistics.median(times[1:])
    benchmark.extra_info["steady_step_s"] = round(_RESULTS["trl"], 3)
    benchmark.extra_info["step_times_s"] = [round(t, 3) for t in times]


@pytest.mark.slow
def test_bench_verl_cpu_step(benchmark, model_dir, tmp_path):
    times = benchmark.pedantic(verl_step_times, args=(model_dir, tmp_path), rounds=1, iterations=1)
    steady = statistics.median(times[1:])
    benchmark.extra_info["steady_step_s"] = round(steady, 3)
    benchmark.extra_info["step_times_s"] = [round(t, 3) for t in times]
    benchmark.extra_info["bypass_old_log_prob"] = BYPASS
    if "trl" not in _RESULTS:
        pytest.skip("the TRL baseline did not run in this session; no ratio to report")
    ratio = steady / _RESULTS["trl"]
    benchmark.extra_info["ratio_vs_trl"] = round(ratio, 3)
    print(f"\nsteady step: verl+hf {steady:.3f}s, TRL GRPOTrainer {_RESULTS['trl']:.3f}s, ratio {ratio:.2f}")
    if ratio > 1.5:
        pytest.xfail(f"verl CPU steady step is {ratio:.2f}x TRL's; issue 14's target 1.5x is not met")
