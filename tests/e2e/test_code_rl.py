"""Code RL end to end: verl's `main_ppo` (XRPO trainer mode) trains on rewards judged in the sandbox.

One run per backend, 2 steps of 4 prompts of the tiny code task (`xrpo_verl.local.code_task`):
Docker with the `xrpo` recipe (planner, ICL, sharpening), bubblewrap with `extra` (ExTra alone:
fixed n, novelty over programs, prefix regeneration), which is also the one launch of that recipe
in the suite. The reward is `reward.reward_manager.name=xrpo`, so verl's reward-loop workers (Ray
actors) judge every response in the sandbox. verl dumps every rollout (`trainer.rollout_data_dir`)
and the test checks the run against it:

- every reward came from a sandbox verdict: per step, the verdict counts the trainer logged add up
  to the rows dumped, and the sandbox runs it logged are the judged rows plus the retries;
- the dumped score of every response is what the sandbox says when the test judges it again
  (AC -> 1, anything else -> 0), and the run had both;
- planted rows: two problems whose hidden tests contradict their statement (`a+b+1` stated,
  `a+b+2` tested; code_task.planted_problems). Any program that does what the statement says gets
  WA, so every planted row must score 0; those whose program passes the statement's own tests
  (re-judged here) show a right-looking program scored 0 because the sandbox said WA;
- SE (Docker run): a thread kills the sandbox containers while the run judges; the backend retries
  on a fresh container (sandbox/backends/docker.py) or the scorer retries the SE, so no row has
  verdict SE and the run completes (xrpo_verl/rewards/code.py: SE is retried, else the run stops,
  never scored 0); the retry is seen in the trainer log or the logged retries;
- nothing is left behind: no sandbox process, container, held uid lease or temp dir (Ray ends the
  reward worker without atexit; on Docker the pool's reaper cleans up after it);
- ExTra (bubblewrap run): no planner, ICL and sharpening log exactly 0, and the all-fail prompts of
  step 1 (the planted ones among them) come back at step 2 as guided rows with masked prefixes.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from sandbox.backends.bwrap import bwrap_available
from sandbox.backends.docker import LABEL, docker_available
from xrpo_verl.local import code_rl, code_task, launch
from xrpo_verl.local.launch import read_metrics
from xrpo_verl.rewards.code import VERDICTS, CodeRewardConfig, compute_score

pytestmark = pytest.mark.slow

STEPS, PROMPTS, N = 2, 4, 4
RECIPE = {"bwrap": "extra", "docker": "xrpo"}
SANDBOX_VERDICTS = ("AC", "WA", "TLE", "MLE", "RE", "CE", "OLE")
DOCKER_RETRY_LOG = "retrying on a fresh one"


def _unavailable(backend: str) -> str | None:
    return bwrap_available() if backend == "bwrap" else docker_available()


def _containers() -> set[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL}"], capture_output=True, text=True, check=False
    )
    return set(out.stdout.split())


def _sandbox_state() -> dict[str, set]:
    """What a sandbox run leaves if it leaks: temp dirs, processes, containers, held uid locks."""
    tmp = tempfile.gettempdir()
    dirs = {
        p for pattern in ("xrpo-sbx-*", "xrpo-job-*", "xrpo-docker-*") for p in glob.glob(os.path.join(tmp, pattern))
    }
    procs = set()
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if pid.isdigit() and os.path.basename(cmd) == b"bwrap":
            procs.add(pid)
    held = set()
    for lock in glob.glob(os.path.expanduser("~/.cache/xrpo-sandbox/**/uid-*.lock"), recursive=True) + glob.glob(
        "/run/xrpo-sandbox/uid-*.lock"
    ):
        with open(lock, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
            except OSError:
                held.add(lock)
    containers = _containers() if docker_available() is None else set()
    return {"dirs": dirs, "procs": procs, "held uid locks": held, "containers": containers}


class ContainerKiller(threading.Thread):
    """Kills the run's sandbox containers `times` times, `gap_s` apart, once they exist."""

    def __init__(self, before: set[str], times: int = 2, gap_s: float = 8.0):
        super().__init__(daemon=True)
        self.before, self.times, self.gap_s = before, times, gap_s
        self.killed: list[str] = []
        self.stop = threading.Event()

    def run(self):
        while len(self.killed) < self.times and not self.stop.wait(0.5):
            ours = sorted(_containers() - self.before - set(self.killed))
            if ours:
                subprocess.run(["docker", "kill", ours[0]], capture_output=True, check=False)
                self.killed.append(ours[0])
                self.stop.wait(self.gap_s)


def _problems(path: Path) -> dict[str, dict]:
    rows = pd.read_parquet(path)
    return {json.loads(e["problem"])["id"]: json.loads(e["problem"]) for e in rows["extra_info"]}


@pytest.fixture(scope="module")
def code_model_dir() -> Path:
    from xrpo_verl.local import tiny_model

    return tiny_model.build(code_rl.MODEL)


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def run(request, code_model_dir, tmp_path_factory):
    backend = request.param
    reason = _unavailable(backend)
    if reason:
        pytest.skip(f"{backend} unavailable: {reason}")
    root = tmp_path_factory.mktemp(f"code_{backend}")
    setting = replace(code_rl.CodeSetting(), steps=STEPS, prompts_per_step=PROMPTS, n=N, backend=backend)
    train_problems, heldout = code_task.train_and_heldout(setting.n_heldout, setting.data_seed)
    # 6 regular + 2 planted rows = the 8 prompts of the 2 steps (one epoch)
    rows = code_task.verl_rows(train_problems[:6], "train") + code_task.verl_rows(
        code_task.planted_problems(), "train", planted=True
    )
    train = root / "train.parquet"
    pd.DataFrame(rows).to_parquet(train)
    val = root / "val.parquet"
    pd.DataFrame(code_task.verl_rows(heldout[:4], "test")).to_parquet(val)
    cpu = code_rl.cpu_run(root / "out", setting, data=(train, val))
    before = _sandbox_state()
    killer = ContainerKiller(before["containers"]) if backend == "docker" else None
    extra = [
        f"trainer.rollout_data_dir={root / 'rollouts'}",
        "algorithm.xrpo.icl.max_example_tokens=48",  # a reference program is ~26 tokens
    ]
    start = time.time()
    if killer:
        killer.start()
    result = launch.launch(cpu, RECIPE[backend], extra, timeout_s=900)
    if killer:
        killer.stop.set()
        killer.join()
    wall = time.time() - start
    assert result.returncode == 0, result.stdout[-6000:]
    dumped = {}
    for step in range(1, STEPS + 1):
        lines = (root / "rollouts" / f"{step}.jsonl").read_text().splitlines()
        dumped[step] = [json.loads(line) for line in lines if line.strip()]
    # Ray ends the reward worker without close(): the Docker pool's reaper removes its containers
    # and temp root once the worker is gone (sandbox/backends/docker.py). Give it a moment. What
    # is new since `before` and still there at the deadline is a leak; the snapshots are
    # machine-wide, so they also see the sandbox tests another xdist worker runs meanwhile: what
    # those make after the first snapshot is not counted, and what they hold at it goes with them.
    deadline = time.time() + 60
    state = _sandbox_state()
    left = {kind: state[kind] - before[kind] for kind in state}
    while any(left.values()) and time.time() < deadline:
        time.sleep(1)
        state = _sandbox_state()
        left = {kind: left[kind] & state[kind] for kind in left}
    print(f"\n{backend} run: {wall:.0f}s wall")
    return {
        "backend": backend,
        "metrics": read_metrics(cpu.metrics_path),
        "dumped": dumped,
        "problems": _problems(train),
        "log": result.stdout,
        "killed": killer.killed if killer else [],
        "left": left,
    }


def test_every_reward_came_from_a_sandbox_verdict(run):
    metrics, dumped = run["metrics"], run["dumped"]
    assert sorted(metrics) == list(range(1, STEPS + 1))
    for step, m in metrics.items():
        counts = {v: m[f"reward/verdict/{v}"] for v in VERDICTS}
        print(step, {k: int(v) for k, v in counts.items() if v}, "sandbox busy", m["reward/sandbox/busy_s"])
        assert sum(counts.values()) == len(dumped[step]) > 0
        judged = sum(counts[v] for v in SANDBOX_VERDICTS)
        # a row whose program was judged for another row takes its verdict without a run
        assert m["reward/sandbox/runs"] == judged - m["reward/sandbox/memo_hits"] + m["reward/sandbox/retries"]
        assert counts["SE"] == 0  # an SE is retried or stops the run; it never becomes a score
        assert 0 < m["reward/sandbox/busy_s"] <= m["reward/sandbox/judge_s"] + 1e-6
        assert 0 < m["reward/sandbox/share"] < 1
        # the agent loop's generation times reach the trainer: the sandbox's time alone is measured
        assert 0 <= m["reward/sandbox/exclusive_s"] <= m["reward/sandbox/busy_s"] + 1e-6


def test_dumped_scores_agree_with_the_sandbox(run):
    problems = run["problems"]
    config = CodeRewardConfig(backend="bwrap" if bwrap_available() is None else run["backend"])
    rows = [row for step in run["dumped"].values() for row in step]
    verdicts = []
    for row in rows:
        result = compute_score(code_task.DATA_SOURCE, row["output"], None, {"problem": problems[row["gts"]]}, config)
        verdicts.append(result["verdict"])
        assert row["score"] == (1.0 if result["verdict"] == "AC" else 0.0), (row, result)
    assert "AC" in verdicts and set(verdicts) - {"AC"}, verdicts  # both rewards occurred


def test_planted_rows_score_zero_even_when_the_program_follows_the_statement(run):
    problems = run["problems"]
    config = CodeRewardConfig(backend="bwrap" if bwrap_available() is None else run["backend"])
    planted = [row for step in run["dumped"].values() for row in step if row["gts"].startswith("planted/")]
    assert planted
    honest_ac = 0
    for row in planted:
        assert row["score"] == 0.0
        honest = code_task.problem_dict(code_task.CodeProblem(*row["gts"].split("/")[2:]))
        assert honest["id"] == problems[row["gts"]]["id"].removeprefix("planted/")
        honest_ac += compute_score(code_task.DATA_SOURCE, row["output"], None, {"problem": honest}, config)["acc"]
    print(f"planted rows: {len(planted)}, of which {honest_ac:.0f} follow the statement and still scored 0")


def test_sandbox_errors_were_retried_never_scored(run):
    if run["backend"] != "docker":
        pytest.skip("SE is injected by killing Docker containers")
    assert run["killed"], "the killer thread found no sandbox container to kill during the run"
    retries = sum(m["reward/sandbox/retries"] for m in run["metrics"].values())
    assert retries > 0 or DOCKER_RETRY_LOG in run["log"]
    assert all(m["reward/verdict/SE"] == 0 for m in run["metrics"].values())


def test_plugin_metrics_reach_verls_logger(run):
    for m in run["metrics"].values():
        assert {f"reward/verdict/{v}" for v in VERDICTS} <= set(m)
        assert {"reward/sandbox/runs", "reward/sandbox/busy_s", "reward/sandbox/share"} <= set(m)


def _leaks(run, kinds) -> dict:
    return {k: sorted(run["left"][k]) for k in kinds if run["left"][k]}


def test_no_process_or_uid_lease_is_left_behind(run):
    assert not _leaks(run, ("procs", "held uid locks"))


def test_no_temp_dir_or_container_is_left_behind(run):
    assert not _leaks(run, ("dirs", "containers"))


ICL_KEYS = ("xrpo/icl/triggers", "xrpo/icl/flips", "xrpo/icl/examples_whole", "xrpo/icl/corpus_size")
SHARPENING_KEYS = (
    "xrpo/sharpening/bonus_rows",
    "xrpo/sharpening/bonus_share",
    "xrpo/sharpening/bonus_abs_mean",
    "xrpo/sharpening/eligible_rows",
    "xrpo/sharpening/seq_logp_spread",
)


def test_extra_trains_with_fixed_n_and_guided_prefixes(run):
    if RECIPE[run["backend"]] != "extra":
        pytest.skip(f"the {run['backend']} run trains {RECIPE[run['backend']]}")
    metrics = run["metrics"]
    for m in metrics.values():
        assert m["response_length/mean"] > 0 and m["training/rollout_probs_diff_max"] < 1e-4
        assert "xrpo/alloc/n_q/max" not in m  # no planner: every prompt gets rollout.n
        # switched off here (estimator `extra`, icl.enable=false): exactly zero, not missing
        assert all(m[k] == 0 for k in ICL_KEYS + SHARPENING_KEYS), {k: m.get(k) for k in ICL_KEYS + SHARPENING_KEYS}
        assert m["xrpo/novelty/memory_prompts"] > 0
    assert metrics[1]["xrpo/prefix/guided_rows"] == 0  # nothing queued before step 1
    assert metrics[1]["xrpo/guided/queued"] > 0
    assert metrics[2]["xrpo/prefix/guided_rows_masked"] == metrics[2]["xrpo/prefix/guided_rows"] > 0
    assert metrics[2]["xrpo/prefix/masked_tokens_other_rows"] == 0


def test_heldout_accuracy_counts_accepted_programs(code_model_dir):
    """The code study's measurement on the real model and sandbox: greedy, mean@k and pass@k agree
    with re-judging the same sampled programs, and pass@k >= mean@k on every problem."""
    from transformers import AutoTokenizer

    from xrpo_verl.local import learning

    if bwrap_available() is not None:
        pytest.skip("bubblewrap unavailable")
    tokenizer = AutoTokenizer.from_pretrained(code_model_dir)
    model = learning.load_actor(code_model_dir)
    problems = code_task.train_and_heldout(32, 5)[1][:6]
    found = code_rl.heldout_accuracy(model, tokenizer, problems, k=3, max_new_tokens=48, seed=7)
    assert set(found) == {"greedy", "mean@3", "pass@3"}
    for mean, best, greedy in zip(*(found[k].per_problem for k in ("mean@3", "pass@3", "greedy")), strict=True):
        assert mean in (0, 1 / 3, 2 / 3, 1) and best in (0, 1) and greedy in (0, 1)
        assert best >= mean and (best == 1) == (mean > 0)
    # the same seed samples the same programs: re-judged one by one, the rates agree
    rows = code_rl.judged_samples(model, tokenizer, problems, 3, 48, seed=7, concurrency=1)
    assert [sum(r["acc"] for r in row) / 3 for row in rows] == pytest.approx(list(found["mean@3"].per_problem))
