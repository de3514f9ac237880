"""`make demo` (`python -m xrpo_verl.lab demo`): RL on CPU through verl's real trainer, end to end,
and the model visibly learns.

1. builds (or reuses) the tiny Qwen2 model, warmed up on multi-digit column addition only partly
   (`xrpo_verl.lab.learning_setting`);
2. writes the training sums and a disjoint held-out set as verl parquet;
3. trains with `python -m verl.trainer.main_ppo`, showing one progress line (step, reward,
   rollouts per prompt, ICL flips) instead of the trainer's log (kept in trainer.log); while verl
   starts up, measures held-out accuracy (greedy, and mean of k samples at the training
   temperature);
4. measures the trained model the same way and prints before/after with standard errors, and
   writes a PNG of training reward against step.

`--task testbed` (`make demo TASK=testbed`): XRPO on the premise testbed (`xrpo_verl.lab.testbed`),
the setting where each exploration part has what it is built on; its model is shipped with the
package (`tiny_model.SHIPPED`), the same on every machine, and unpacked the first time.

`--task code` (`make demo TASK=code`): the same stages (`run`) on the tiny code task
(`xrpo_verl.lab.code_rl`): the reward of every response is the sandbox's verdict on hidden tests
(bubblewrap, or Docker with `--sandbox docker`), XRPO on by default; the pass rate is k programs
sampled at T=1 per held-out problem, judged in the sandbox; a table adds the verdict counts and
the sandbox time of each step. A task is a `Task`: its setting, data, measurement, and what the
summary adds for it (the code task's table and sandbox share live in `code_rl`).
"""

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from xrpo_verl.lab import code_rl, launch, learning_setting, testbed
from xrpo_verl.lab.launch import read_metrics

# Metrics of the `xrpo` trainer mode (xrpo_verl/verl_adapters/step_metrics.py); absent for GRPO.
N_MIN, N_MAX = "xrpo/alloc/n_q/min", "xrpo/alloc/n_q/max"
ICL_FLIPS, ZERO_SHOT_FLIPS = "xrpo/icl/flips", "xrpo/icl/zero_shot_flips"
NOVELTY_SHARE = "xrpo/novelty/bonus_share"
GUIDED_ROLLOUTS, GUIDED_SUCCESS = "xrpo/guided/rollouts", "xrpo/guided/success_rate"
REWARD = "critic/score/mean"


class Progress:
    """One status line updated per training step: a bar on a terminal, a line every `every` steps otherwise.

    Besides step, reward and speed it shows what each exploration part did, where it is on: the
    planner's spread of rollouts per prompt, the all-fail prompts ICL flipped (and those zero-shot
    resampling flipped beside it), the novelty bonus's share of |A|, the guided suffixes that
    succeeded."""

    def __init__(self, total: int, n: int, stream=sys.stdout, every: int = 10, parts: dict[str, bool] | None = None):
        self.total, self.n, self.stream, self.every = total, n, stream, every
        self.parts = parts  # `launch.recipe_parts`; None: a part is on where its metrics are logged
        self.tty = stream.isatty()
        self.start = time.time()
        self.first_step_at: float | None = None
        self.rewards: list[float] = []
        self.flips = self.zero_shot_flips = 0
        self.novelty: list[float] = []
        self.guided = self.guided_successes = 0
        self.holding, self.held = False, None

    def mechanisms(self, metrics: dict[str, float]) -> str:
        """The exploration parts' running totals, for the parts that are on (the trainer mode logs
        every part's metrics, zeros for those that are off)."""

        def on(part: str, key: str) -> bool:
            return key in metrics and (self.parts is None or self.parts.get(part, False))

        if on("planner", N_MIN):
            parts = [f"rollouts/prompt {metrics[N_MIN]:.0f}-{metrics[N_MAX]:.0f}"]
        else:
            parts = [f"rollouts/prompt {self.n}"]
        if on("icl", ICL_FLIPS):
            self.flips += round(metrics[ICL_FLIPS])
            self.zero_shot_flips += round(metrics.get(ZERO_SHOT_FLIPS, 0.0))
            parts.append(f"ICL flips {self.flips:3d} (zero-shot {self.zero_shot_flips})")
        if on("novelty", NOVELTY_SHARE):
            self.novelty.append(metrics[NOVELTY_SHARE])
            parts.append(f"novelty {sum(self.novelty) / len(self.novelty):.1%} of |A|")
        if on("prefix", GUIDED_ROLLOUTS):
            rollouts = round(metrics[GUIDED_ROLLOUTS])
            self.guided += rollouts
            self.guided_successes += round(rollouts * metrics.get(GUIDED_SUCCESS, 0.0))
            parts.append(f"guided {self.guided_successes}/{self.guided}")
        return "  ".join(parts)

    def line(self, step: int, metrics: dict[str, float]) -> str:
        if REWARD in metrics:
            self.rewards.append(metrics[REWARD])
        recent = self.rewards[-10:]
        width = 24
        done = round(width * step / self.total)
        per_step = (time.time() - self.first_step_at) / max(1, step - 1) if self.first_step_at else 0.0
        return (
            f"[{'#' * done}{'.' * (width - done)}] step {step:3d}/{self.total}  "
            f"reward {metrics.get(REWARD, float('nan')):.2f} (last 10: {sum(recent) / max(1, len(recent)):.2f})  "
            f"{self.mechanisms(metrics)}  {per_step:.1f} s/step"
        )

    def hold(self) -> None:
        """Keep step lines back (only the latest is kept) until `release`."""
        self.holding, self.held = True, None

    def release(self) -> None:
        self.holding = False
        if self.held is not None:
            self.stream.write(self.held + "\n")
            self.stream.flush()

    def __call__(self, raw: str) -> None:
        parsed = launch.parse_step_line(raw)
        if parsed is None or REWARD not in parsed[1]:
            return
        step, metrics = parsed
        if self.first_step_at is None:
            self.first_step_at = time.time()
        text = self.line(step, metrics)
        if self.holding:
            self.held = text
            return
        if self.tty:
            self.stream.write("\r" + text)
            if step == self.total:
                self.stream.write("\n")
        elif step % self.every == 0 or step in (1, self.total):
            self.stream.write(text + "\n")
        self.stream.flush()


def report(before: dict, after: dict, recipe: str, steps: int) -> str:
    rows = [
        f"held-out accuracy, {len(next(iter(before.values())).per_problem)} problems never trained on "
        f"({recipe}, {steps} steps; ± is the standard error over problems)"
    ]
    for name in before:
        delta, se = learning_setting.paired_change(before[name].per_problem, after[name].per_problem)
        rows.append(
            f"  {name:8s} before {before[name]}   after {after[name]}   change {delta:+.3f} ± {se:.3f}"
            f" ({delta / se if se else float('inf'):.1f} SE)"
        )
        rows.append(
            f"           problems never solved {before[name].never:3d} -> {after[name].never:3d}, "
            f"always solved {before[name].always:3d} -> {after[name].always:3d}"
        )
    return "\n".join(rows)


def plot(metrics: dict[int, dict], before: dict, after: dict, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted(s for s in metrics if REWARD in metrics[s])
    rewards = [metrics[s][REWARD] for s in steps]
    smooth = [sum(rewards[max(0, i - 9) : i + 1]) / len(rewards[max(0, i - 9) : i + 1]) for i in range(len(rewards))]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(steps, rewards, color="C0", alpha=0.3, lw=1, label="train reward (batch mean)")
    ax.plot(steps, smooth, color="C0", lw=2, label="train reward (10-step mean)")
    last = steps[-1] if steps else 1
    for i, name in enumerate(before):
        ax.errorbar(
            [0, last],
            [before[name].mean, after[name].mean],
            yerr=[before[name].se, after[name].se],
            marker="s",
            ls="--",
            color=f"C{i + 1}",
            capsize=3,
            label=f"held-out {name}",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class Task:
    """What the five stages need of a task; `TASKS` builds each from the command line's arguments."""

    name: str
    default_recipe: str
    model_text: str  # what the tiny model was warmed up on, for stage 1
    setting: Any  # learning_setting.LearningSetting or code_rl.CodeSetting
    prepare: Callable  # (out_dir, setting) -> (model_dir, train, heldout)
    cpu_run: Callable  # (out_dir, setting, save_freq) -> launch.CpuRun
    measure: Callable  # (model_dir, checkpoint, setting) -> ({name: Accuracy}, {extra summary fields})
    xrpo_extra: tuple[str, ...] = ()  # Hydra overrides of the task's runs on our trainer config
    table: Callable | None = None  # per-step table of the trainer's metrics, printed in stage 5
    summary: Callable | None = None  # (metrics by step) -> ({summary.json fields}, a line printed in stage 5)


def _measure_sums(model_dir: Path, checkpoint: Path | None, setting) -> tuple[dict, dict]:
    """`Task.measure` of the addition tasks: held-out accuracy, with no extra summary fields."""
    return learning_setting.measure(model_dir, checkpoint, setting), {}


def _addition(args) -> Task:
    defaults = learning_setting.LearningSetting()
    setting = learning_setting.LearningSetting(steps=args.steps or defaults.steps, lr=args.lr or defaults.lr)
    return Task(
        "addition",
        "grpo",
        "column addition",
        setting,
        learning_setting.prepare,
        learning_setting.cpu_run,
        _measure_sums,
    )


def _testbed(args) -> Task:
    """The premise testbed (`testbed.py`): addition with two answer styles and families whose offset
    only examples reveal, on a model warmed up with few-shot prompts; XRPO by default."""
    setting = replace(testbed.SETTING, steps=args.steps or testbed.SETTING.steps, lr=args.lr or testbed.SETTING.lr)
    return Task(
        "testbed",
        "xrpo",
        "column addition in two styles and 16 families, with few-shot prompts",
        setting,
        learning_setting.prepare,
        learning_setting.cpu_run,
        _measure_sums,
    )


def _code(args) -> Task:
    defaults = code_rl.CodeSetting(backend=args.sandbox)
    setting = replace(defaults, steps=args.steps or defaults.steps, lr=args.lr or defaults.lr)
    return Task(
        "code",
        "xrpo",
        "short stdin Python programs",
        setting,
        code_rl.prepare,
        code_rl.cpu_run,
        code_rl.measure,
        xrpo_extra=code_rl.XRPO_OVERRIDES,
        table=code_rl.verdict_table,
        summary=code_rl.train_summary,
    )


TASKS = {"addition": _addition, "testbed": _testbed, "code": _code}


def run_overrides(task: Task, recipe: str, seed: int) -> list[str]:
    """The Hydra overrides of the demo's run: the data order, and the task's xrpo settings on recipes
    of our trainer config (verl's own GRPO config has no `algorithm.xrpo` to set)."""
    ours = bool(launch.load_recipe(recipe).get("config_name"))
    return [f"data.seed={seed}", *(task.xrpo_extra if ours else ())]


def run(task: Task, recipe: str, seed: int, out_root: Path) -> int:
    """The five stages: model, training with the base model measured meanwhile, measurement, summary."""
    import torch

    start, setting = time.time(), task.setting
    print(f"[1/5] tiny model, warmed up on {task.model_text} (built once, then cached)", flush=True)
    out = out_root / (recipe if task.name == "addition" else f"{task.name}_{recipe}")
    if out.exists():
        shutil.rmtree(out)  # a fresh run: the file logger appends and checkpoints would resume
    model_dir, _, _ = task.prepare(out, setting)
    print(
        f"      {model_dir}\n[2/5] {recipe} through verl's main_ppo on CPU: {setting.steps} steps x "
        f"{setting.prompts_per_step} prompts x {setting.n} rollouts (trainer log: {out / 'trainer.log'})",
        flush=True,
    )
    run = task.cpu_run(out, setting, save_freq=setting.steps)  # keep the final weights to measure
    progress = Progress(setting.steps, setting.n, parts=launch.recipe_parts(recipe))
    progress.hold()  # until the accuracy before training is printed
    # verl's start-up (Ray, workers, engine) leaves a core idle for a minute or more: the base
    # model is measured meanwhile, in this process, while a thread follows the trainer's output.
    stop = threading.Event()  # set if the measurement fails: the trainer is killed at its next line

    def follow(line: str) -> None:
        if stop.is_set():
            raise RuntimeError("measuring the base model failed; the trainer is stopped")
        progress(line)

    with ThreadPoolExecutor(1) as pool:
        extra = run_overrides(task, recipe, seed)
        training = pool.submit(launch.launch, run, recipe, extra, timeout_s=3600, on_line=follow)
        try:
            before, before_extra = task.measure(model_dir, None, setting)
        except BaseException:
            stop.set()
            raise
        print("[3/5] held-out accuracy before training (measured while verl starts)", flush=True)
        print("      " + "   ".join(f"{k} {v}" for k, v in before.items()), *before_extra.values(), flush=True)
        progress.release()
        result = training.result()
    if result.returncode != 0:
        print(f"\ntraining failed (exit {result.returncode}); last lines of {out / 'trainer.log'}:", file=sys.stderr)
        print("\n".join(result.stdout.splitlines()[-40:]), file=sys.stderr)
        return result.returncode

    print("[4/5] held-out accuracy after training", flush=True)
    torch.set_num_threads(min(4, len(os.sched_getaffinity(0))))  # the trainer has exited: the cores are free
    after, after_extra = task.measure(model_dir, run.ckpt_dir / f"global_step_{setting.steps}" / "actor", setting)
    print("[5/5] summary", flush=True)
    metrics = read_metrics(run.metrics_path)
    if task.table is not None:
        print(task.table(metrics))
    print(report(before, after, recipe, setting.steps))
    for key in before_extra:
        print(f"held-out {key} before {before_extra[key]}\n{' ' * (len(key) + 10)}after  {after_extra[key]}")
    png = plot(metrics, before, after, out / "learning.png", f"{recipe} on the tiny {task.name} task (CPU, verl)")
    summary = {
        "task": task.name,
        "recipe": recipe,
        "seed": seed,
        "setting": {k: v for k, v in asdict(setting).items() if k != "model"},
        "before": {k: [v.mean, v.se] for k, v in before.items()},
        "after": {k: [v.mean, v.se] for k, v in after.items()},
        "change": {
            k: list(learning_setting.paired_change(before[k].per_problem, after[k].per_problem)) for k in before
        },
        **{f"{k}_before": v for k, v in before_extra.items()},
        **{f"{k}_after": v for k, v in after_extra.items()},
        "step_seconds": [metrics[s].get("timing_s/step") for s in sorted(metrics)],
    }
    if task.summary is not None:
        fields, line = task.summary(metrics)
        summary.update(fields)
        print(line)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"plot: {png}\ntotal time: {time.time() - start:.0f}s")
    return 0
