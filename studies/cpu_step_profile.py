"""Where a CPU run's time goes: start-up to step 1, and CPU seconds per steady step per process.

Not a test. Launches the CPU step benchmark's run (`benchmarks/test_bench_cpu_step.py`: the arith tiny model,
4 prompts x 4 rollouts, 24 new tokens, bypass mode) through `launch.launch`, and reads every
process of the run from /proc between two steady steps: on a 2-core machine shared with other
jobs, the wall time of a step follows the CPU its processes ask for, so the per-process CPU is
what to cut. Reports the launch-to-step-1 time, verl's per-stage `timing_s/*` medians and the CPU
seconds per step of each process (Ray actors by their `ray::` name).

    python studies/cpu_step_profile.py --out outputs/cpu_profile [hydra overrides...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

CLK = os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def cpu_by_process(root: int) -> dict[tuple[int, str], float]:
    """{(pid, name): user+system CPU seconds} of `root` and all its descendants."""
    found = {}
    for pid in descendants(root):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        name = cmd if cmd.startswith("ray::") else Path(cmd).name + " " + stat.split("(")[1].split(")")[0]
        found[(pid, name[:48])] = (int(fields[11]) + int(fields[12])) / CLK
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="outputs/cpu_profile")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--from-step", type=int, default=4, help="first steady step measured (after its line)")
    p.add_argument(
        "--ray-defaults", action="store_true", help="Ray's own settings (no launch.LEAN_RAY_ENV, dashboard on)"
    )
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    import json

    from xrpo_verl.lab import arith, launch, tiny_model

    if args.ray_defaults:
        launch.LEAN_RAY_ENV = {}
        args.overrides = ["++ray_kwargs.ray_init.include_dashboard=True", *args.overrides]

    out = Path(args.out)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    out.mkdir(parents=True)
    model_dir = tiny_model.build()
    train = arith.write_parquet(out / "train.parquet", 256, seed=11, split="train")
    val = arith.write_parquet(out / "val.parquet", 16, seed=12, split="test")
    run = launch.CpuRun(
        str(model_dir),
        str(train),
        str(val),
        str(out / "run"),
        steps=args.steps,
        prompts_per_step=4,
        n=4,
        max_response_length=24,
        lr=1e-4,
    )
    extra = ["algorithm.rollout_correction.bypass_mode=True", *args.overrides]
    marks: dict[int, float] = {}
    snaps: dict[int, dict] = {}
    start = time.time()
    launcher_pid = os.getpid()

    def on_line(line: str) -> None:
        parsed = launch.parse_step_line(line) if "step:" in line else None
        if parsed and parsed[1]:
            step = parsed[0]
            marks.setdefault(step, time.time() - start)
            if step in (args.from_step, args.steps - 1):
                snaps[step] = cpu_by_process(launcher_pid)

    result = launch.launch(run, "grpo", extra, timeout_s=1800, on_line=on_line)
    if result.returncode != 0:
        print(result.stdout[-3000:])
        return 1
    metrics = launch.read_metrics(run.metrics_path)
    steady = [s for s in sorted(metrics) if s > 1]
    summary = {
        "launch_to_step1_s": marks.get(1),
        "step_times_s": [metrics[s]["timing_s/step"] for s in sorted(metrics)],
    }
    print(
        f"launch to step 1's metrics line: {marks.get(1, float('nan')):.1f} s; step 1 itself "
        f"{metrics[1]['timing_s/step']:.1f} s"
    )
    keys = sorted(k for k in metrics[2] if k.startswith("timing_s/"))
    print(
        "steady medians: " + "  ".join(f"{k[9:]} {statistics.median(metrics[s][k] for s in steady):.2f}" for k in keys)
    )
    a, b = snaps.get(args.from_step), snaps.get(args.steps - 1)
    if a and b:
        n = args.steps - 1 - args.from_step
        rows = sorted(((b[k] - a.get(k, 0.0)) / n, k[1]) for k in b)
        print(
            f"CPU s per step, steps {args.from_step + 1}..{args.steps - 1} "
            f"(wall {(marks[args.steps - 1] - marks[args.from_step]) / n:.2f} s per step):"
        )
        for cpu, name in reversed(rows):
            if cpu >= 0.005:
                print(f"  {cpu:6.3f}  {name}")
        print(f"  {sum(c for c, _ in rows):6.3f}  total")
        summary["cpu_s_per_step"] = [[name, cpu] for cpu, name in reversed(rows)]
        summary["cpu_s_per_step_total"] = sum(c for c, _ in rows)
        summary["wall_s_per_step"] = (marks[args.steps - 1] - marks[args.from_step]) / n
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
