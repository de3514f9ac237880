"""`import verl` alone, in a fresh process, must run our plugin registration, and stay cheap.

verl loads `verl.plugins` entry points inside `verl/__init__.py` and swallows load errors at
DEBUG level, so a broken plugin would otherwise go unnoticed until a config lookup fails. Our names
are filled into each registry when verl loads it (plugin.py), so `import verl` itself must load no
more of verl than it does without us, and must not fix verl's device platform.
"""

import json
import os
import subprocess
import sys

import pytest

# One fresh interpreter per environment serves every test of it: what `import verl` alone loaded,
# then what the registries hold once verl loads them.
PROBE = r"""
import json, sys
import verl  # nothing of ours is imported explicitly
import verl.plugin.platform.platform_manager as pm
light = {
    "verl_modules": sorted(m for m in sys.modules if m.startswith("verl")),
    "ours_heavy": sorted(m for m in sys.modules if m.startswith("xrpo_verl.verl_adapters.")
                         and m not in ("xrpo_verl.verl_adapters", "xrpo_verl.verl_adapters.plugin",
                                       "xrpo_verl.verl_adapters.after_import")),
    "platform_chosen": pm._current_platform is not None,
}
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
plugin = sys.modules.get("xrpo_verl.verl_adapters.plugin")
print(json.dumps({
    "plugin_loaded": plugin is not None,
    "at_import_verl": light,
    "registered": list(getattr(plugin, "REGISTERED", [])),
    "wanted": list(getattr(plugin, "REGISTRATIONS", [])),
    "adv_estimators": sorted(ADV_ESTIMATOR_REGISTRY),
    "reward_managers": sorted(REWARD_MANAGER),
    "agent_loops": sorted(_agent_loop_registry),
    "trainers": sorted(TRAINER_REGISTRY),
}))
"""


def _probe(**env_overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("XRPO_VERL_CPU", "VERL_USE_EXTERNAL_MODULES")}
    env.update(env_overrides)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def with_plugin():
    return _probe()


@pytest.fixture(scope="module")
def without_plugins():
    return _probe(VERL_USE_EXTERNAL_PLUGINS="none")


@pytest.mark.slow  # a fresh interpreter or a model build
def test_import_verl_alone_registers_every_name(with_plugin):
    seen = with_plugin
    assert seen["plugin_loaded"], "the verl.plugins entry point was not loaded by `import verl`"
    assert sorted(seen["registered"]) == sorted(seen["wanted"]), "a registry was loaded without our names"
    assert {"xrpo", "extra", "xrpo_extra"} <= set(seen["adv_estimators"])
    assert "xrpo" in seen["reward_managers"]
    assert {"xrpo_icl", "extra_prefix"} <= set(seen["agent_loops"])
    assert "xrpo" in seen["trainers"]


@pytest.mark.slow  # a fresh interpreter or a model build
def test_cpu_mode_registers_every_name_with_the_cpu_entry_point_loaded_first():
    """The CPU entry point loads before ours and watches verl's imports too (after_import.py).
    When its shims still imported verl's trainer package before the plugin's watcher existed, the
    plugin had to register at once from inside its own import (it once skipped that, and
    main_ppo's TaskRunner failed with "Unknown trainer 'xrpo'")."""
    seen = _probe(XRPO_VERL_CPU="1", VERL_USE_EXTERNAL_MODULES="xrpo_verl.cpu.register")
    assert sorted(seen["registered"]) == sorted(seen["wanted"])
    assert "xrpo" in seen["trainers"] and {"xrpo", "extra", "xrpo_extra"} <= set(seen["adv_estimators"])


@pytest.mark.slow  # a fresh interpreter or a model build
def test_disabling_verl_plugins_removes_our_names(without_plugins):
    """Negative control: the names come from the entry point, not from some other import."""
    seen = without_plugins
    assert not seen["plugin_loaded"]
    assert not {"xrpo", "extra", "xrpo_extra"} & set(seen["adv_estimators"])
    assert "xrpo" not in seen["reward_managers"]


@pytest.mark.slow  # a fresh interpreter or a model build
def test_import_verl_loads_no_more_of_verl_with_the_plugin(with_plugin, without_plugins):
    """Before: our entry point imported the trainer and agent loops, 171 verl modules instead of 23."""
    light, baseline = with_plugin["at_import_verl"], without_plugins["at_import_verl"]
    assert set(light["verl_modules"]) <= set(baseline["verl_modules"])
    assert light["ours_heavy"] == []
    # verl's platform is chosen when verl first needs a device, so a VERL_PLATFORM set after
    # `import verl` still counts.
    assert not light["platform_chosen"]


def test_agent_loop_paths_named_by_the_plugin_are_the_registered_classes():
    import verl.trainer.ppo.v1  # noqa: F401 (verl loads its registries before ours, as in a verl run)
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry

    from xrpo_verl.verl_adapters import agent_loops, plugin

    for name, target in plugin.AGENT_LOOPS.items():
        assert _agent_loop_registry[name] == {"_target_": target}
        module, _, cls = target.rpartition(".")
        assert module == agent_loops.__name__ and issubclass(getattr(agent_loops, cls), AgentLoopBase)


ORDER_PROBE = r"""
import json
from xrpo_verl.verl_adapters import agent_loops  # ours first: it loads verl's trainer package itself
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
before = "xrpo" in TRAINER_REGISTRY
from xrpo_verl.verl_adapters import trainer
print(json.dumps({"before": before, "after": TRAINER_REGISTRY.get("xrpo") is trainer.XrpoTrainer}))
"""


@pytest.mark.slow  # a fresh interpreter or a model build
def test_importing_our_agent_loops_first_does_not_break_the_import():
    """Our agent loops import verl's trainer package, whose registration would import our trainer,
    which imports the half-done agent loops: the plugin must skip that and leave it to our trainer."""
    out = subprocess.run([sys.executable, "-c", ORDER_PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["after"]
