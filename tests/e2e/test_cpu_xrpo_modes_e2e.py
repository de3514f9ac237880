"""Trainer mode `xrpo` end to end: verl's own `main_ppo` on CPU with the `hf` rollout and the tiny model.

Reuses the CPU path of `xrpo_verl.local` (model build, data, overrides, launcher). One run has every
feature on (planner rounds, ICL, novelty sharpening and bonus, prefix regeneration); a second run is
interrupted after its first checkpoint and resumed, and must continue from the saved plugin state.
"""

import json
import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest

from xrpo_verl.local import arith, tiny_model
from xrpo_verl.local.launch import CpuRun, cpu_env, launch, trainer_command
from xrpo_verl.planner import round_budgets

pytestmark = pytest.mark.slow

PROMPTS, N, N_BASE, ROUNDS = 4, 4, 2, 2
XRPO_RECIPE = {
    "config_name": "xrpo_trainer",
    "overrides": [
        "algorithm.adv_estimator=xrpo_extra",
        f"algorithm.xrpo.planner.n_base={N_BASE}", f"algorithm.xrpo.planner.n_avg={N}",
        f"algorithm.xrpo.planner.rounds={ROUNDS}", "algorithm.xrpo.planner.n_max=8",
        "algorithm.extra.novelty.warmup=1", "algorithm.extra.novelty.memory_size=4",
        "algorithm.extra.prefix.warmup_steps=0", "algorithm.extra.prefix.per_step=1",
        "algorithm.extra.prefix.n_suffix=2", "algorithm.extra.prefix.min_gap=2",
        "algorithm.xrpo.icl.max_example_tokens=16",
        "algorithm.xrpo.embedder.device=cpu", "algorithm.extra.embedder.device=cpu",
    ],
}


@pytest.fixture(scope="module")
def cpu_inputs(tmp_path_factory):
    model = tiny_model.build(verbose=False)
    data = tmp_path_factory.mktemp("data")
    train = arith.write_parquet(data / "train.parquet", 512, seed=11, split="train")
    val = arith.write_parquet(data / "val.parquet", 64, seed=12, split="test")
    return str(model), str(train), str(val)


def _metrics(run: CpuRun) -> list[dict]:
    lines = Path(run.metrics_path).read_text().splitlines() if Path(run.metrics_path).exists() else []
    return [json.loads(x) for x in lines if x.strip()]


def _data(rec: dict) -> dict:
    return rec.get("data", rec)


def _patch_recipe(monkeypatch):
    import xrpo_verl.local.launch as L

    monkeypatch.setattr(L, "load_recipe", lambda name: XRPO_RECIPE)


def test_xrpo_all_features_two_steps(cpu_inputs, tmp_path, monkeypatch):
    _patch_recipe(monkeypatch)
    run = CpuRun(*cpu_inputs, out_dir=str(tmp_path / "run"), steps=2, prompts_per_step=PROMPTS, n=N, save_freq=1)
    res = launch(run, "xrpo", timeout_s=1200)
    assert res.returncode == 0, res.stdout[-4000:]
    recs = [_data(r) for r in _metrics(run)]
    assert len(recs) == 2, recs
    budgets = round_budgets(PROMPTS, N, N_BASE, ROUNDS)
    for m in recs:
        # every round hands out exactly its budget (the cap n_max=8 leaves room for all of it)
        assert m["xrpo/round_1/rollouts"] == budgets[1] and m["xrpo/round_2/rollouts"] == budgets[2]
        assert 0.0 < m["xrpo/time_share/plugin"] < 1.0
        assert m["xrpo/alloc/n_q/max"] <= 8
    for step in (1, 2):
        state = pickle.loads((Path(run.ckpt_dir) / f"global_step_{step}" / "xrpo" / "state.pkl").read_bytes())
        assert state["version"] == 1 and state["components"]["novelty"] is not None


def test_kill_and_resume_continues_from_the_checkpoint(cpu_inputs, tmp_path, monkeypatch):
    _patch_recipe(monkeypatch)
    run = CpuRun(*cpu_inputs, out_dir=str(tmp_path / "run"), steps=3, prompts_per_step=PROMPTS, n=N, save_freq=1)
    Path(run.out_dir).mkdir(parents=True)
    env = cpu_env()
    env["VERL_FILE_LOGGER_PATH"] = str(run.metrics_path)
    tracker = Path(run.ckpt_dir) / "latest_checkpointed_iteration.txt"
    with open(Path(run.out_dir) / "killed.log", "w") as log:
        proc = subprocess.Popen(trainer_command(run, XRPO_RECIPE), env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.time() + 1200
        while time.time() < deadline and proc.poll() is None and not (tracker.exists() and tracker.read_text() == "1"):
            time.sleep(1)
        assert tracker.exists() and tracker.read_text() == "1", "the run never wrote its first checkpoint"
        os.killpg(proc.pid, signal.SIGINT)  # interrupt the whole run mid-step 2
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    saved = pickle.loads((Path(run.ckpt_dir) / "global_step_1" / "xrpo" / "state.pkl").read_bytes())
    steps_before = [r.get("step") for r in _metrics(run)]
    assert 3 not in steps_before

    res = launch(run, "xrpo", timeout_s=1200)  # resume_mode=auto picks global_step_1 up
    assert res.returncode == 0, res.stdout[-4000:]
    assert "Resuming from" in res.stdout and "global_step_1" in res.stdout
    resumed = [r for r in _metrics(run) if r.get("step") in (2, 3)]
    assert {r["step"] for r in resumed} >= {2, 3}
    final = pickle.loads((Path(run.ckpt_dir) / "global_step_3" / "xrpo" / "state.pkl").read_bytes())
    # the resumed run built on the saved state: counters only grow, the novelty memory keeps its prompts
    for k, v in saved["counters"].items():
        assert final["counters"][k] >= v
    assert set(saved["components"]["novelty"]["memory"]) <= set(final["components"]["novelty"]["memory"])
