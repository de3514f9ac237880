"""Code RL end to end: verl's `main_ppo` (XRPO trainer mode) trains on rewards judged in the sandbox.

One run per backend, 2 steps of 4 prompts of the tiny code task (`xrpo_verl.lab.code_task`):
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
  WA, so every planted row whose program passes the statement's own tests (re-judged here) must
  score 0; a row scores 1 only when its program passes the hidden tests (a sampled `a+b+2` does);
- SE (Docker run): a thread kills the sandbox containers while the run judges; the backend retries
  on a fresh container (sandbox/backends/docker.py) or the scorer retries the SE, so no row has
  verdict SE and the run completes (xrpo_verl/rewards/code.py: SE is retried, else the run stops,
  never scored 0); the retry is seen in the trainer log or the logged retries;
- nothing is left behind: no sandbox process, container, held uid lease or temp dir (Ray ends the
  reward worker without atexit; on Docker the pool's reaper cleans up after it). The run's sandboxes
  use resources of its own (`reward_kwargs.code.backend_options`): a block of uids reserved for it
  host-wide and a work root of its own, and only those are checked, so the sandboxes of tests that
  another xdist worker runs meanwhile can neither fail the check nor be killed by it;
- ExTra (bubblewrap run): no planner, ICL and sharpening log exactly 0, and the all-fail prompts of
  step 1 (the planted ones among them) come back at step 2 as guided rows with masked prefixes.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import pytest

from sandbox.backends.bwrap import BwrapConfig, bwrap_available
from sandbox.backends.docker import LABEL, docker_available
from sandbox.backends.uids import default_lock_dir, lock_path
from xrpo_verl.lab import code_rl, code_task, launch
from xrpo_verl.lab.launch import read_metrics
from xrpo_verl.rewards.code import VERDICTS, CodeRewardConfig, compute_score

pytestmark = pytest.mark.slow

STEPS, PROMPTS, N = 2, 4, 4
RECIPE = {"bwrap": "extra", "docker": "xrpo"}
SANDBOX_VERDICTS = ("AC", "WA", "TLE", "MLE", "RE", "CE", "OLE")
DOCKER_RETRY_LOG = "retrying on a fresh one"


def _unavailable(backend: str) -> str | None:
    return bwrap_available() if backend == "bwrap" else docker_available()


# Blocks of uids for the runs of this file, one reserved per run (see _reserve_uids): outside the
# backends' default ranges (60000-61999) and the ranges other tests name, so only this run's
# sandboxes ever run as them.
UID_BLOCKS, UID_SPAN = range(62000, 64048, 256), 256


@dataclass
class OwnSandbox:
    """What the run's sandboxes may use: uids [base, base + span) leased through the host-wide lock
    dir, and a work root for their work, job and pool dirs. Its state is what the run leaks."""

    base: int
    lock_dir: str
    work_root: str
    span: int = UID_SPAN

    @property
    def uids(self) -> range:
        return range(self.base, self.base + self.span)

    def backend_options(self) -> str:
        """The Hydra override that gives the reward workers' sandboxes these resources."""
        opts = f"uid_base:{self.base},uid_span:{self.span},lock_dir:'{self.lock_dir}',work_root:'{self.work_root}'"
        return f"+reward.reward_kwargs.code.backend_options={{{opts}}}"

    def lock_files(self) -> list[str]:
        return [p for uid in self.uids if os.path.exists(p := lock_path(self.lock_dir, uid))]

    def containers(self) -> dict[str, int]:
        """The run's sandbox containers, by id, with the uid each runs its submissions as."""
        if shutil.which("docker") is None:
            return {}
        fmt = f'{{{{.ID}}}} {{{{.Label "{LABEL}.uid"}}}}'
        out = subprocess.run(
            ["docker", "ps", "-a", "--filter", f"label={LABEL}", "--format", fmt],
            capture_output=True,
            text=True,
            check=False,
        )
        rows = (line.split() for line in out.stdout.splitlines())
        return {row[0]: int(row[1]) for row in rows if len(row) == 2 and row[1].isdigit() and int(row[1]) in self.uids}

    def state(self) -> dict[str, set]:
        """Temp dirs (in the work root, or named by one of the uids in the system temp dir),
        processes (running as one of the uids, or naming the work root: bwrap, Docker's reaper),
        held uid locks, containers (labelled with one of the uids)."""
        tmp = tempfile.gettempdir()
        dirs = {os.path.join(self.work_root, name) for name in os.listdir(self.work_root)}
        dirs |= {
            p
            for uid in self.uids
            for kind in ("sbx", "job")
            for p in glob.glob(os.path.join(tmp, f"xrpo-{kind}-{uid}-*"))
        }
        procs = set()
        for pid, owner in _processes():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if owner in self.uids or self.work_root.encode() in cmdline:
                command = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
                procs.add(f"{pid} (uid {owner}): {command}")
        held = set()
        for lock in self.lock_files():
            with open(lock, "a") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(f, fcntl.LOCK_UN)
                except OSError:
                    held.add(lock)
        return {"dirs": dirs, "procs": procs, "held uid locks": held, "containers": set(self.containers())}


def _processes():
    """(pid, uid) of each process on this host but this one; those that end mid-walk are left out."""
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                yield int(pid), os.stat(f"/proc/{pid}").st_uid
            except OSError:
                continue


@contextlib.contextmanager
def _reserve_uids():
    """An OwnSandbox for this run: the first block of UID_BLOCKS whose reservation lock (a file
    beside the uid locks of the host-wide lock dir) this process gets, held until the run is
    checked, so a second run of this file on the host takes another block. The uids themselves are
    still leased through the host-wide lock dir, so no other process can ever run as them."""
    lock_dir = default_lock_dir(BwrapConfig().cache_dir)
    os.makedirs(lock_dir, mode=0o755, exist_ok=True)
    work_root = tempfile.mkdtemp(prefix="xrpo-e2e-code-rl-")  # the sandbox uids must pass through it:
    os.chmod(work_root, 0o711)  # pytest's own tmp dirs are 0700
    for base in UID_BLOCKS:
        fd = os.open(os.path.join(lock_dir, f"e2e-code-rl-{base}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            own = OwnSandbox(base, lock_dir, work_root)
            # the block is ours: the free lock files of an earlier run go, so those after the run
            # show its own leases (a held one stays, and fails the check)
            for lock in set(own.lock_files()) - own.state()["held uid locks"]:
                os.unlink(lock)
            yield own
        finally:
            os.close(fd)
            shutil.rmtree(work_root, ignore_errors=True)
        return
    shutil.rmtree(work_root, ignore_errors=True)
    pytest.fail(f"every uid block {list(UID_BLOCKS)} is reserved by another run of this file")


def _uids_running() -> set[int]:
    """The uids that own a process on this host (a container's processes show here as its uid)."""
    return {owner for _, owner in _processes()}


class ContainerKiller(threading.Thread):
    """Kills the run's sandbox containers, `gap_s` apart, each while it judges, until the trainer's
    output shows a kill retried (or `max_kills`): a container runs its batch as the container's uid
    and idles as another, so one with a process of its uid is mid-batch. Killing an idle one could
    go unnoticed (the pool may never hand it out again), and so can a kill that lands after the
    runner streamed the batch's last result: nothing of it is lost, so nothing is retried. Hence
    the killer does not stop at its first kill, but at the first one that shows."""

    def __init__(self, own: OwnSandbox, max_kills: int = 6, gap_s: float = 8.0):
        super().__init__(daemon=True)
        self.own, self.max_kills, self.gap_s = own, max_kills, gap_s
        self.killed: list[str] = []
        self.stop = threading.Event()
        self.retried = threading.Event()

    def see(self, line: str) -> None:
        """`launch`'s on_line: a retry in the session, or one counted by the reward's judge."""
        step = launch.parse_step_line(line)
        if DOCKER_RETRY_LOG in line or (step and step[1].get("reward/sandbox/retries", 0) > 0):
            self.retried.set()

    def run(self):
        while len(self.killed) < self.max_kills and not self.retried.is_set() and not self.stop.wait(0.1):
            ours = {cid: uid for cid, uid in self.own.containers().items() if cid not in self.killed}
            running = _uids_running()
            busy = sorted(cid for cid, uid in ours.items() if uid in running)
            if busy:
                subprocess.run(["docker", "kill", busy[0]], capture_output=True, check=False)
                self.killed.append(busy[0])
                self.stop.wait(self.gap_s)


def _problems(path: Path) -> dict[str, dict]:
    rows = pd.read_parquet(path)
    return {json.loads(e["problem"])["id"]: json.loads(e["problem"]) for e in rows["extra_info"]}


@pytest.fixture(scope="module")
def code_model_dir() -> Path:
    from xrpo_verl.lab import tiny_model

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
    with _reserve_uids() as own:
        killer = ContainerKiller(own) if backend == "docker" else None
        extra = [
            f"trainer.rollout_data_dir={root / 'rollouts'}",
            "algorithm.xrpo.icl.max_example_tokens=48",  # a reference program is ~26 tokens
            own.backend_options(),
        ]
        start = time.time()
        if killer:
            killer.start()
        result = launch.launch(cpu, RECIPE[backend], extra, timeout_s=900, on_line=killer.see if killer else None)
        if killer:
            killer.stop.set()
            killer.join()
        wall = time.time() - start
        assert result.returncode == 0, result.stdout[-6000:]
        # the reward workers leased from the run's own block: the check below looks at what they used
        assert own.lock_files(), f"no uid of {own.uids} was leased: backend_options did not reach the sandbox"
        # Ray ends the reward worker without close(): the Docker pool's reaper removes its containers
        # and temp root once the worker is gone (sandbox/backends/docker.py). Give it a moment. What
        # the run's own sandbox still holds at the deadline is a leak.
        deadline = time.time() + 60
        left = own.state()
        while any(left.values()) and time.time() < deadline:
            time.sleep(1)
            left = own.state()
    dumped = {}
    for step in range(1, STEPS + 1):
        lines = (root / "rollouts" / f"{step}.jsonl").read_text().splitlines()
        dumped[step] = [json.loads(line) for line in lines if line.strip()]
    kills = f", {len(killer.killed)} container(s) killed, retry seen: {killer.retried.is_set()}" if killer else ""
    print(f"\n{backend} run: {wall:.0f}s wall{kills}")
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
        honest = code_task.problem_dict(code_task.CodeProblem(*row["gts"].split("/")[2:]))
        assert honest["id"] == problems[row["gts"]]["id"].removeprefix("planted/")
        follows = compute_score(code_task.DATA_SOURCE, row["output"], None, {"problem": honest}, config)["acc"]
        hidden = compute_score(code_task.DATA_SOURCE, row["output"], None, {"problem": problems[row["gts"]]}, config)
        # the tiny model samples at T = 1 and can write the tested `a+b+2`: the hidden tests decide
        assert row["score"] == hidden["acc"], (row["output"], hidden["verdict"])
        if follows:
            assert row["score"] == 0.0, row["output"]
        honest_ac += follows
    scored = sum(row["score"] for row in planted)
    print(
        f"planted rows: {len(planted)}, {honest_ac:.0f} follow the statement and scored 0, {scored:.0f} passed the tests"
    )


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


_HOLDER = r"""
import sys
from sandbox.backends.bwrap import BwrapBackend, BwrapConfig
base, span, lock_dir, work_root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
own = BwrapBackend(BwrapConfig(workers=1, uid_base=base, uid_span=span, lock_dir=lock_dir, work_root=work_root))
other = BwrapBackend(BwrapConfig(workers=1))  # as another xdist worker's sandbox: the default range
with own.session(), other.session():  # their work dirs exist while the sessions are open
    print(own.uids[0], other.uids[0], flush=True)
    sys.stdin.readline()
"""


def test_the_leak_check_sees_what_the_run_leaves_and_nothing_else():
    """The check can fail: a process that holds a lease of the run's block, a work dir in its work
    root and a process running as one of its uids are all seen; the same on the default range, as
    another xdist worker's sandboxes, are not."""
    if reason := bwrap_available():
        pytest.skip(f"bubblewrap unavailable: {reason}")
    with _reserve_uids() as own:
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(own.base), str(own.span), own.lock_dir, own.work_root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        sleepers = []
        try:
            ours, other = map(int, holder.stdout.readline().split())
            sleepers = [subprocess.Popen(["sleep", "60"], user=uid) for uid in (ours, other)]
            left = own.state()
            assert left["held uid locks"] == {lock_path(own.lock_dir, ours)}
            assert len(left["dirs"]) == 1 and os.path.basename(next(iter(left["dirs"]))).startswith(f"xrpo-sbx-{ours}-")
            # the sleeper as the run's uid, and the holder, whose command line names the work root
            assert {int(p.split()[0]) for p in left["procs"]} == {sleepers[0].pid, holder.pid}, left["procs"]
        finally:
            for p in sleepers:
                p.kill()
                p.wait()
            holder.stdin.close()
            holder.wait(timeout=60)
        assert not any(own.state().values())  # once the holder closed, nothing of the run is left


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

    from xrpo_verl.lab import learning_setting

    if bwrap_available() is not None:
        pytest.skip("bubblewrap unavailable")
    tokenizer = AutoTokenizer.from_pretrained(code_model_dir)
    model = learning_setting.load_actor(code_model_dir)
    problems = code_task.train_and_heldout(32, 5)[1][:6]
    found = code_rl.heldout_accuracy(model, tokenizer, problems, k=3, max_new_tokens=48, seed=7)
    assert set(found) == {"greedy", "mean@3", "pass@3"}
    for mean, best, greedy in zip(*(found[k].per_problem for k in ("mean@3", "pass@3", "greedy")), strict=True):
        assert mean in (0, 1 / 3, 2 / 3, 1) and best in (0, 1) and greedy in (0, 1)
        assert best >= mean and (best == 1) == (mean > 0)
    # the same seed samples the same programs: re-judged one by one, the rates agree
    rows = code_rl.judged_samples(model, tokenizer, problems, 3, 48, seed=7, concurrency=1)
    assert [sum(r["acc"] for r in row) / 3 for row in rows] == pytest.approx(list(found["mean@3"].per_problem))
