"""The `verl.plugins` entry point: our names in verl's registries, each filled when verl loads it.

`import verl` in any process (driver, Ray workers, reward workers) imports this module. Importing
our trainer and agent loops here would load most of verl's trainer (and choose verl's device
platform) in every process, before verl itself needs any of it. Instead, each registration runs
right after verl imports the module that holds its registry: verl always imports that module
before it looks a name up, so the name is there when asked for, and a process that never asks
(a reward worker, a data loader) never pays for it. See `docs/architecture.md`.

verl swallows plugin load errors at DEBUG level, so `tests/verl_adapters/test_plugin.py` checks
the registries from a fresh process. The CPU platform (`xrpo_verl/cpu/`) has an entry point of
its own, `xrpo_verl.cpu.register`, listed before this one: adapters never import upward.
"""

from __future__ import annotations

import importlib
import sys
from functools import partial

from xrpo_verl.verl_adapters.after_import import after_import, initializing

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
        if any(initializing(m) for n, m in list(sys.modules.items()) if n.startswith(_ADAPTERS) and n != __name__):
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


def _register(verl_module_name: str, module) -> None:
    if verl_module_name in REGISTERED:  # install() ran twice before the module loaded
        return
    REGISTERED.append(verl_module_name)
    REGISTRATIONS[verl_module_name](module)


def install() -> None:
    """Register now where verl's registry module is loaded already, and on load everywhere else."""
    for name in REGISTRATIONS:
        if name not in REGISTERED:
            after_import(name, partial(_register, name))


install()
