"""The `verl.plugins` entry point: our names in verl's registries, each filled when verl loads it.

`import verl` in any process (driver, Ray workers, reward workers) imports this module. Importing
our trainer and agent loops here would load most of verl's trainer (and choose verl's device
platform) in every process, before verl itself needs any of it. Instead, each registration runs
right after verl imports the module that holds its registry: verl always imports that module
before it looks a name up, so the name is there when asked for, and a process that never asks
(a reward worker, a data loader) never pays for it. See `docs/architecture.md`.

verl swallows plugin load errors at DEBUG level, so `tests/verl_adapters/test_plugin.py` checks
the registries from a fresh process. The CPU paths (`xrpo_verl/local/`) have an entry point of
their own, `xrpo_verl.local.register`, listed before this one: adapters never import upward.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading

# Agent loops are registered by class path (verl instantiates them through Hydra), so naming them
# needs no import of ours; `register` in agent_loops.py files the same paths when it loads.
AGENT_LOOPS = {
    "xrpo_icl": "xrpo_verl.verl_adapters.agent_loops.XrpoICLAgentLoop",
    "extra_prefix": "xrpo_verl.verl_adapters.agent_loops.ExtraPrefixAgentLoop",
}


def _register_agent_loops(agent_loop_module) -> None:
    from xrpo_verl.verl_adapters.verl_internals import agent_loop_registry

    for name, target in AGENT_LOOPS.items():
        agent_loop_registry(agent_loop_module).setdefault(name, {"_target_": target})


_ADAPTERS = "xrpo_verl.verl_adapters."


def _importer(name: str):
    def register(_verl_module) -> None:
        # Our own modules import verl's: if one of ours is half-imported, this verl module was
        # loaded by it, and importing `name` now would import it again half-done. Skipped: that
        # import of ours registers the name itself when it completes (its decorators run then).
        if any(_initializing(m) for n, m in list(sys.modules.items()) if n.startswith(_ADAPTERS) and n != __name__):
            return
        importlib.import_module(name)

    return register


# verl module (holding a registry) -> what fills our names into it, run right after it loads.
REGISTRATIONS = {
    "verl.trainer.ppo.core_algos": _importer("xrpo_verl.verl_adapters.estimators"),  # xrpo, extra, xrpo_extra
    "verl.experimental.reward_loop.reward_manager": _importer("xrpo_verl.rewards.manager"),  # xrpo
    "verl.experimental.agent_loop.agent_loop": _register_agent_loops,  # xrpo_icl, extra_prefix
    "verl.trainer.ppo.v1": _importer("xrpo_verl.verl_adapters.trainer"),  # trainer mode xrpo
}

REGISTERED: list[str] = []
"""verl modules whose registries have our names so far, in the order they were filled."""

_lock = threading.RLock()


def _register(verl_module_name: str, module) -> None:
    with _lock:
        if verl_module_name in REGISTERED:
            return
        REGISTERED.append(verl_module_name)
    REGISTRATIONS[verl_module_name](module)


class _RegisterAfterExec(importlib.abc.Loader):
    """Wraps a verl module's own loader: executes the module, then fills our names into it."""

    def __init__(self, loader, name: str):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register(self._name, module)

    def __getattr__(self, attr):  # get_code, get_source, is_package, ... as the real loader
        return getattr(self._loader, attr)


class _RegistryWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hands back the real spec of a watched verl module with its loader wrapped."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in REGISTRATIONS or fullname in REGISTERED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RegisterAfterExec(spec.loader, fullname)
                return spec
        return None


def install() -> None:
    """Register now where verl's registry module is loaded already, and on load everywhere else."""
    if not any(isinstance(f, _RegistryWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegistryWatcher())
    for name in REGISTRATIONS:
        module = sys.modules.get(name)
        if module is not None and not _initializing(module):
            _register(name, module)


def _initializing(module) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


install()
