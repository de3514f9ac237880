"""`python -m xrpo_verl.lab <command>`: the toy lab's command line, one entry for its commands.

- `demo`: train a tiny model through verl's trainer on CPU and measure it before and after
  (`make demo`; `--task addition|testbed|code`);
- `train`: run a CPU recipe on the learning setting, nothing measured (`recipes/cpu/run.sh`);
- `build`: build (or reuse) a tiny model and print its directory;
- `pack`: pack a built model's files into the package's assets, to ship it (`tiny_model.SHIPPED`).
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from xrpo_verl.lab import demo, launch, learning_setting, tiny_model


def _demo(args) -> int:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(1)
    task = demo.TASKS[args.task](args)
    return demo.run(task, args.recipe or task.default_recipe, args.seed, args.out)


def _train(args) -> int:
    setting = replace(learning_setting.LearningSetting(), steps=args.steps)
    if args.prompts_per_step:
        setting = replace(setting, prompts_per_step=args.prompts_per_step)
    if args.n:
        setting = replace(setting, n=args.n)
    result = launch.launch(learning_setting.cpu_run(args.out, setting), args.recipe, args.overrides, echo=True)
    print(f"exit code {result.returncode}; log: {Path(args.out) / 'trainer.log'}")
    return result.returncode


def _build(args) -> int:
    print(tiny_model.build(tiny_model.TinyModelConfig(seed=args.seed, sft_steps=args.sft_steps), root=args.root))
    return 0


def _pack(args) -> int:
    archive = tiny_model.pack(args.model_dir)
    size = archive.stat().st_size / 1e6
    print(f"{archive} ({size:.1f} MB): {args.model_dir.name} {tiny_model.weights_sha256(args.model_dir)}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m xrpo_verl.lab",
        description="The toy lab: tiny models, tasks and settings on which verl's trainer runs on CPU.",
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="{demo,train,build,pack}")

    cmd = commands.add_parser("demo", help="RL on CPU through verl's trainer, measured before and after (make demo)")
    cmd.add_argument(
        "--task",
        default="addition",
        choices=sorted(demo.TASKS),
        help="addition (math), testbed (math, the premise testbed) or code (sandbox rewards)",
    )
    cmd.add_argument(
        "--recipe",
        default=None,
        help="xrpo_verl/lab/recipes/<recipe>.yaml (grpo, dapo, xrpo, extra, xrpo_extra, ...); "
        "default grpo, xrpo for testbed and code",
    )
    cmd.add_argument("--steps", type=int, default=None, help="training steps (default: the task's setting)")
    cmd.add_argument("--lr", type=float, default=None, help="actor learning rate (default: the task's setting)")
    cmd.add_argument("--seed", type=int, default=0, help="seed of the training data order (data.seed)")
    cmd.add_argument("--out", type=Path, default=Path("outputs/demo"), help="output directory")
    cmd.add_argument("--sandbox", default="bwrap", choices=("bwrap", "docker"), help="--task code: sandbox backend")
    cmd.set_defaults(run=_demo)

    cmd = commands.add_parser("train", help="a CPU recipe through verl's main_ppo on the learning setting")
    cmd.add_argument("--recipe", default="grpo", help="xrpo_verl/lab/recipes/<recipe>.yaml")
    cmd.add_argument("--steps", type=int, default=2)
    cmd.add_argument("--out", default="outputs/cpu_run")
    cmd.add_argument("--prompts-per-step", type=int, default=None, help="default: the learning setting's")
    cmd.add_argument("--n", type=int, default=None, help="default: the learning setting's")
    cmd.add_argument("overrides", nargs="*", help="extra Hydra overrides, applied last")
    cmd.set_defaults(run=_train)

    cmd = commands.add_parser("build", help="build (or reuse) a tiny model; prints its directory")
    cmd.add_argument("--seed", type=int, default=0, help="seed of corpus, init and warm-up")
    cmd.add_argument("--sft-steps", type=int, default=tiny_model.TinyModelConfig.sft_steps, help="warm-up steps")
    cmd.add_argument(
        "--root", type=Path, default=None, help="cache root (default: $XRPO_VERL_CACHE or ~/.cache/xrpo_verl)"
    )
    cmd.set_defaults(run=_build)

    cmd = commands.add_parser(
        "pack",
        help="pack a built model's files into the package's assets (to ship it, add its key and weights' "
        "sha256 to tiny_model.SHIPPED)",
    )
    cmd.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    cmd.set_defaults(run=_pack)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    return args.run(args)
