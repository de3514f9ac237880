"""Recipe files, read the one way both recipe sets use: the GPU recipes (`recipes/`, launched by
`recipes/launch.py`) and the CPU ones (`xrpo_verl/lab/recipes/`, launched by `xrpo_verl.lab.launch`).

A recipe file is YAML with these keys (any other is an error):

    description  one line
    hardware     where it runs (GPU model files)
    config_name  xrpo_trainer (our trainer mode, xrpo_verl/hydra_config/) or ppo_trainer (verl's own)
    extends      recipe files applied first, named relative to the recipe root, without `.yaml`
    env          defaults of `${UPPER_CASE}` placeholders (GPU recipes; the environment overrides them)
    overrides    Hydra overrides, in order (a later one wins)

`layers` orders the files of one or more recipes: every file after the files it extends, a base
shared by two parents once, at its first position, and a file that extends itself (directly or
through others) refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

RECIPE_KEYS = ("description", "hardware", "config_name", "extends", "env", "overrides")
CONFIG_NAMES = ("xrpo_trainer", "ppo_trainer")


def recipe_path(root: Path, name: str) -> Path:
    """`math/xrpo` under `root` -> root/math/xrpo.yaml (a name may also end in .yaml)."""
    return Path(root) / (name if name.endswith(".yaml") else f"{name}.yaml")


def read(path: Path) -> dict:
    """One recipe file, its keys and value types checked."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"recipe file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a recipe file is a mapping of {list(RECIPE_KEYS)}")
    unknown = sorted(set(data) - set(RECIPE_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; allowed: {list(RECIPE_KEYS)}")
    for key in ("overrides", "extends"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{path}: {key} must be a list of strings, got {value!r}")
    if data.get("config_name") not in (None, *CONFIG_NAMES):
        raise ValueError(f"{path}: config_name {data['config_name']!r} is not one of {list(CONFIG_NAMES)}")
    return data


def _chain(path: Path, root: Path, seen: tuple[Path, ...]) -> list[tuple[Path, dict]]:
    if path in seen:
        raise ValueError(f"recipe {path} extends itself through {[str(p) for p in seen]}")
    data = read(path)
    out: list[tuple[Path, dict]] = []
    for parent in data.get("extends", []):
        out += _chain(recipe_path(root, parent), root, seen + (path,))
    return out + [(path, data)]


def layers(paths: Iterable[Path], root: Path) -> list[tuple[Path, dict]]:
    """The files of `paths` and everything they extend, in the order their overrides apply."""
    out, seen = [], set()
    for path in paths:
        for layer_path, data in _chain(Path(path), Path(root), ()):
            if layer_path not in seen:
                seen.add(layer_path)
                out.append((layer_path, data))
    return out


def config_name(stack: list[tuple[Path, dict]]) -> str | None:
    """The last `config_name` the layers set (None: verl's own `ppo_trainer` through `main_ppo`'s default)."""
    name = None
    for _, data in stack:
        name = data.get("config_name", name)
    return name


def overrides(stack: list[tuple[Path, dict]]) -> list[str]:
    """Every layer's overrides, in order."""
    return [o for _, data in stack for o in data.get("overrides", [])]
