"""Launch, print or check a GPU recipe: `python recipes/launch.py math/xrpo --model qwen3_1.7b [--check|--print]`.

A recipe is `recipes/<family>/<method>.yaml`; the model variant `recipes/models/<model>.yaml`
adds the model path and the hardware (GPUs, tensor parallelism, micro-batch token budgets). The
file format and the order of `extends` are `xrpo_verl/recipe_files.py`, shared with the CPU recipes.

Overrides are applied in the order: extends..., the recipe, the model file, the command line.
`--check` composes the Hydra config on CPU and runs verl's own `validate_config`, the dataclass
conversions of verl's config sections and our start-up checks: what CI runs for every recipe.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path

from xrpo_verl import recipe_files

RECIPE_ROOT = Path(__file__).resolve().parent
_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")
# `+key=value` adds a key that verl's schema lacks, so Hydra cannot catch a typo in it; only
# these free-form sections may be extended that way (each is read by code that rejects unknown keys
# or passes it to transformers / Ray as is).
FREE_FORM_PREFIXES = (
    "reward.reward_kwargs.",  # parsed by xrpo_verl.rewards.manager.parse_reward_kwargs (unknown keys raise)
    "actor_rollout_ref.model.override_config.",  # HF config overrides
    "ray_kwargs.ray_init.",  # ray.init(**kwargs)
)
# Switches our code reads from its process environment. A Ray cluster started with `ray start` does
# not give its workers the launching shell's environment, so those set here travel in the job's
# runtime_env to every Ray process (the TaskRunner, the workers, the reward loop).
RAY_ENV_SWITCHES = ("XRPO_ROUND_TIMEOUT_S", "XRPO_MICRO_BATCHES", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def recipe_path(name: str) -> Path:
    """`math/xrpo` -> recipes/math/xrpo.yaml (a name may also end in .yaml)."""
    return recipe_files.recipe_path(RECIPE_ROOT, name)


def available_models() -> list[str]:
    return sorted(p.stem for p in (RECIPE_ROOT / "models").glob("*.yaml"))


def available_recipes() -> list[str]:
    """Every launchable recipe (`<family>/<method>`); files starting with `_` are shared bases."""
    return sorted(
        f"{p.parent.name}/{p.stem}"
        for fam in ("math", "code")
        for p in (RECIPE_ROOT / fam).glob("*.yaml")
        if not p.stem.startswith("_")
    )


def substitute(text: str, env: dict[str, str], where: str, depth: int = 0) -> str:
    """Replace ${UPPER_CASE} placeholders (values may hold placeholders too); lower-case `${...}`
    (OmegaConf interpolation, e.g. ${oc.env:X}) is left alone for verl to resolve."""
    if depth > 8:
        raise ValueError(f"{where}: placeholders nest deeper than 8 levels (a cycle?) in {text!r}")

    def repl(m: re.Match) -> str:
        if m.group(1) not in env:
            raise ValueError(
                f"{where}: placeholder ${{{m.group(1)}}} has no value; set it in the environment "
                f"or in an `env:` block (known: {sorted(env)})"
            )
        return substitute(str(env[m.group(1)]), env, where, depth + 1)

    return _PLACEHOLDER.sub(repl, text)


def resolve(recipe: str, model: str, extra: list[str] = (), environ: dict[str, str] | None = None) -> dict:
    """Everything needed to launch: config_name, config_dir, overrides (placeholders filled), hardware."""
    if model not in available_models():
        raise ValueError(f"unknown model variant {model!r}; available: {available_models()}")
    layers = recipe_files.layers([recipe_path(recipe), recipe_path(f"models/{model}")], RECIPE_ROOT)
    env: dict[str, str] = {}
    hardware, raw = None, []
    for path, data in layers:
        env.update({k: str(v) for k, v in (data.get("env") or {}).items()})
        hardware = data.get("hardware", hardware)
        raw += [(str(path.relative_to(RECIPE_ROOT)), o) for o in data.get("overrides", [])]
    config_name = recipe_files.config_name(layers)
    environ = dict(os.environ if environ is None else environ)
    # Declared names take the environment's value; undeclared ones (e.g. HOME) may only be used
    # inside env defaults and come from the environment as they are.
    env = {**environ, **env, **{k: v for k, v in environ.items() if k in env}, "MODEL": model}
    if config_name is None:
        raise ValueError(f"recipe {recipe!r} sets no config_name; one of {list(recipe_files.CONFIG_NAMES)}")
    if not hardware:
        raise ValueError(f"model file {model}.yaml must state its hardware")
    overrides = [substitute(o, env, where) for where, o in raw] + runtime_env_overrides(environ) + list(extra)
    for o in overrides:
        check_override(o)
    return {
        "recipe": recipe,
        "model": model,
        "config_name": config_name,
        "config_dir": config_dir(config_name),
        "overrides": overrides,
        "hardware": substitute(hardware, env, f"{model}.yaml"),
        "env": env,
    }


def runtime_env_overrides(environ: dict[str, str]) -> list[str]:
    """`+ray_kwargs.ray_init.runtime_env.env_vars.K='V'` for each of RAY_ENV_SWITCHES set in `environ`."""
    out = []
    for key in RAY_ENV_SWITCHES:
        if key in environ:
            value = environ[key]
            if "'" in value or "\\" in value:
                raise ValueError(f"{key}={value!r}: quotes and backslashes cannot travel in a Hydra override")
            out.append(f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}='{value}'")  # quoted: Ray wants str
    return out


def check_override(override: str) -> None:
    """Reject malformed overrides and `+key` additions outside FREE_FORM_PREFIXES."""
    key, sep, _ = override.partition("=")
    if not sep or not key.strip("+~"):
        raise ValueError(f"override {override!r} is not of the form key=value")
    if key.startswith("+") and not key.startswith("++"):
        bare = key.lstrip("+")
        if not bare.startswith(FREE_FORM_PREFIXES):
            raise ValueError(
                f"override {override!r} adds key {bare!r} outside verl's schema; a typo there would "
                f"pass unnoticed. Allowed '+' prefixes: {list(FREE_FORM_PREFIXES)}"
            )


def config_dir(config_name: str) -> str:
    if config_name == "xrpo_trainer":
        from xrpo_verl.verl_adapters.config import CONFIG_DIR

        return CONFIG_DIR
    import verl.trainer.config

    return os.path.dirname(verl.trainer.config.__file__)


def compose(resolved: dict):
    """The Hydra config exactly as `main_ppo` would see it (a bad key fails here)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=resolved["config_dir"], version_base=None):
        return hydra_compose(config_name=resolved["config_name"], overrides=resolved["overrides"])


def validate(cfg) -> None:
    """verl's start-up checks plus ours, on CPU; raises on the first problem."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    # verl converts these sections to its dataclasses inside the workers; do it now so a bad value
    # (e.g. an unknown rollout mode) fails here rather than after the GPUs are allocated.
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    algo = OmegaConf.to_container(cfg.algorithm, resolve=True)
    method = {k: algo.pop(k) for k in ("xrpo", "extra") if k in algo}
    omega_conf_to_dataclass(OmegaConf.create(algo))
    if cfg.trainer.v1.trainer_mode == "xrpo":
        from xrpo_verl.verl_adapters.config import validate_trainer_config

        # the encoder's device is checked where it runs (the trainer's start-up), not on this machine
        validate_trainer_config(cfg, check_device=False)
    elif method:
        raise ValueError(
            f"algorithm.{'/'.join(method)} is set but trainer.v1.trainer_mode="
            f"{cfg.trainer.v1.trainer_mode!r} ignores it; use config_name: xrpo_trainer"
        )
    if cfg.reward.reward_manager.name == "xrpo":
        from xrpo_verl.rewards.manager import parse_reward_kwargs

        kwargs = cfg.reward.get("reward_kwargs", None)
        parse_reward_kwargs(OmegaConf.to_container(kwargs, resolve=True) if kwargs is not None else None)


def check_services(cfg) -> None:
    """What must answer before a launch: the sandbox servers of code.backend=remote, checked from
    this node in seconds (each reward worker checks again from its own node at start-up)."""
    if cfg.reward.reward_manager.name != "xrpo":
        return
    from omegaconf import OmegaConf

    from xrpo_verl.rewards.manager import parse_reward_kwargs

    kwargs = cfg.reward.get("reward_kwargs", None)
    parse_reward_kwargs(
        OmegaConf.to_container(kwargs, resolve=True) if kwargs is not None else None
    ).code.check_service()


def command(resolved: dict) -> list[str]:
    return [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "--config-path",
        resolved["config_dir"],
        "--config-name",
        resolved["config_name"],
        *resolved["overrides"],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help=f"one of {available_recipes()}")
    parser.add_argument("--model", default="qwen3_1.7b", help=f"model variant, one of {available_models()}")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compose and validate on CPU, then exit")
    mode.add_argument("--print", action="store_true", help="print the command, then exit")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, applied last")
    args = parser.parse_intermixed_args(argv)  # overrides may follow the flags
    resolved = resolve(args.recipe, args.model, args.overrides)
    print(f"# recipe {args.recipe} / model {args.model}\n# hardware: {resolved['hardware']}", flush=True)
    if args.check:
        validate(compose(resolved))
        print("config OK")
        return 0
    cmd = command(resolved)
    if args.print:
        print(" \\\n  ".join(shlex.quote(c) for c in cmd))
        return 0
    from xrpo_verl.rewards.code import SandboxFailure

    try:
        check_services(compose(resolved))
    except SandboxFailure as e:  # one line saying what to start, not a traceback
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.execv(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
