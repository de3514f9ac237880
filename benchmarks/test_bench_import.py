"""Cost of our `verl.plugins` entry point: `import verl` with the plugin against without it.

verl imports every `verl.plugins` entry point inside `import verl`, in every process of a run
(driver, TaskRunner, FSDP workers, rollout servers, agent-loop and reward workers). Each round
times one fresh interpreter with the plugin, paired with one without it just before, so both see
the same load; the median of the per-round ratios goes to extra_info["ratio_vs_without"], the
number of verl modules loaded to extra_info["verl_modules"] (with, without). The CPU case does the
same with the CPU switch on (`XRPO_VERL_CPU=1`, the CPU entry point named in
`VERL_USE_EXTERNAL_MODULES` as the launchers do), whose shims must not load verl's heavy modules.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

ROUNDS = 5
PROBE = (
    "import json, sys, time; t = time.perf_counter(); import verl; dt = time.perf_counter() - t; "
    "print(json.dumps([dt, sum(m.startswith('verl') for m in sys.modules)]))"
)


CPU = {"XRPO_VERL_CPU": "1", "VERL_USE_EXTERNAL_MODULES": "xrpo_verl.cpu.register"}


def _import_verl(plugins: str, cpu: bool = False) -> tuple[float, int]:
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": plugins}
    for key in CPU:
        env.pop(key, None)
    if cpu:
        env.update(CPU)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    seconds, modules = json.loads(out.stdout.strip().splitlines()[-1])
    return seconds, modules


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu_path", "cpu_switch"])
def test_import_verl_with_plugin_vs_without(benchmark, cpu):
    without: list[tuple[float, int]] = []
    timed: list[tuple[float, int]] = []

    def setup():
        without.append(_import_verl("none"))

    def target():
        timed.append(_import_verl("auto", cpu))

    benchmark.pedantic(target, setup=setup, rounds=ROUNDS, iterations=1)
    ratios = [w[0] / b[0] for w, b in zip(timed, without)]
    benchmark.extra_info["import_s"] = statistics.median(t[0] for t in timed)
    benchmark.extra_info["import_s_without"] = statistics.median(b[0] for b in without)
    benchmark.extra_info["ratio_vs_without"] = statistics.median(ratios)
    benchmark.extra_info["verl_modules"] = [timed[-1][1], without[-1][1]]
