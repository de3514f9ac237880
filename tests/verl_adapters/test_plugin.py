"""`import verl` alone, in a fresh process, must run our plugin registration.

verl loads `verl.plugins` entry points inside `verl/__init__.py` and swallows load errors at
DEBUG level, so a broken plugin would otherwise go unnoticed until a config lookup fails.
"""

import json
import os
import subprocess
import sys

PROBE = r"""
import json, sys
import verl  # nothing of ours is imported explicitly
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
plugin = sys.modules.get("xrpo_verl.verl_adapters.plugin")
print(json.dumps({
    "plugin_loaded": plugin is not None,
    "modules_loaded": list(getattr(plugin, "LOADED", [])),
    "modules_wanted": list(getattr(plugin, "REGISTRATION_MODULES", [])),
    "adv_estimators": sorted(ADV_ESTIMATOR_REGISTRY),
    "reward_managers": sorted(REWARD_MANAGER),
    "agent_loops": sorted(_agent_loop_registry),
    "trainers": sorted(TRAINER_REGISTRY),
}))
"""


def _probe(**env_overrides):
    env = {**os.environ, **env_overrides}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_verl_alone_registers_every_name():
    seen = _probe()
    assert seen["plugin_loaded"], "the verl.plugins entry point was not loaded by `import verl`"
    assert seen["modules_loaded"] == seen["modules_wanted"], "a registration module is missing"
    assert {"xrpo", "extra", "xrpo_extra"} <= set(seen["adv_estimators"])
    assert "xrpo" in seen["reward_managers"]
    assert {"xrpo_icl", "extra_prefix"} <= set(seen["agent_loops"])
    assert "xrpo" in seen["trainers"]


def test_disabling_verl_plugins_removes_our_names():
    """Negative control: the names come from the entry point, not from some other import."""
    seen = _probe(VERL_USE_EXTERNAL_PLUGINS="none")
    assert not seen["plugin_loaded"]
    assert not {"xrpo", "extra", "xrpo_extra"} & set(seen["adv_estimators"])
    assert "xrpo" not in seen["reward_managers"]
