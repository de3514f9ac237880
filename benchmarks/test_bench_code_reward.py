"""Sandbox judging through the `xrpo` reward manager: speedup of max_concurrency=K over 1.

Run: `pytest benchmarks/test_bench_code_reward.py --benchmark-only`.
One batch of N (XRPO_BENCH_CODE_N, default 32) responses to the tiny code task
(`xrpo_verl.lab.code_task`), half the reference program (AC), half a wrong one (WA), goes through
the manager's real `run_single` path (decode, route, thread pool under the semaphore,
`sandbox.judge` in bubblewrap), as verl's reward-loop worker calls it. Baseline: the same manager
with max_concurrency=1. Reported as `extra_info["speedup_vs_concurrency_1"]` (baseline time / this
time) in the same run, and `extra_info["busy_share"]`: the sandbox's busy time (union of the rows'
[start, end], what the trainer logs as reward/sandbox/busy_s) over the batch's wall time. The
sandbox's share of a whole CPU training step is logged by the trainer as reward/sandbox/share
(`make demo TASK=code` prints it).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from sandbox.backends.bwrap import bwrap_available
from xrpo_verl.lab import code_task
from xrpo_verl.rewards.sandbox_metrics import busy_seconds

N = int(os.environ.get("XRPO_BENCH_CODE_N", 32))
_BASE: dict[str, float] = {}
needs_bwrap = pytest.mark.skipif(bwrap_available() is not None, reason=f"no bubblewrap: {bwrap_available()}")


@pytest.fixture(scope="module")
def batch_and_tokenizer(byte_tokenizer, response_batch):
    problems = code_task.all_problems()[:N]
    texts, infos, expected = [], [], []
    for i, p in enumerate(problems):
        right = i % 2 == 0
        texts.append(p.answer if right else p.answer.replace("print(", "print(1+"))
        infos.append({"problem": json.dumps(code_task.problem_dict(p))})
        expected.append("AC" if right else "WA")
    sources, truths = [code_task.DATA_SOURCE] * len(texts), [p.id for p in problems]
    return response_batch(byte_tokenizer, texts, sources, truths, infos), byte_tokenizer, expected


def _manager(tok, concurrency: int):
    from omegaconf import OmegaConf

    from xrpo_verl.rewards.manager import XrpoRewardManager

    config = {"reward": {"reward_kwargs": {"max_concurrency": concurrency, "code": {"backend": "bwrap"}}}}
    return XrpoRewardManager(OmegaConf.create(config), tok, None)


def _bench(benchmark, batch_and_tokenizer, concurrency: int):
    batch, tok, expected = batch_and_tokenizer
    manager = _manager(tok, concurrency)
    shares = []

    def run():
        async def go():
            return await asyncio.gather(*(manager.run_single(batch[i : i + 1]) for i in range(len(batch))))

        tic = time.time()
        infos = [o["reward_extra_info"] for o in asyncio.run(go())]
        shares.append(busy_seconds([(i["sandbox_start"], i["sandbox_end"]) for i in infos]) / (time.time() - tic))
        return [i["verdict"] for i in infos]

    verdicts = benchmark.pedantic(run, rounds=2, warmup_rounds=1)
    assert verdicts == expected
    benchmark.extra_info.update(max_concurrency=concurrency, responses=len(expected), busy_share=round(shares[-1], 3))
    return benchmark.stats.stats.mean


@needs_bwrap
def test_bench_manager_concurrency_1_baseline(benchmark, batch_and_tokenizer):
    _BASE["c1"] = _bench(benchmark, batch_and_tokenizer, 1)


@needs_bwrap
@pytest.mark.parametrize("concurrency", [2, 4])
def test_bench_manager_concurrency_k(benchmark, batch_and_tokenizer, concurrency):
    mean = _bench(benchmark, batch_and_tokenizer, concurrency)
    if "c1" in _BASE:
        benchmark.extra_info["speedup_vs_concurrency_1"] = round(_BASE["c1"] / mean, 3)
