"""The CPU switch and the shims' targets in the installed verl."""

import json
import os
import subprocess
import sys

import pytest
import torch

# ---- the CPU switch ----------------------------------------------------------------------------
_PROBE = """
import json, sys, verl
# verl modules the shims patch or fill, but which `import verl` alone must not load: most processes
# of a run never import them, and they cost each process seconds (after_import.py)
LAZY = ("verl.utils.fsdp_utils", "verl.trainer.ppo.v1.replay_buffer", "verl.workers.rollout.replica",
        "verl.workers.rollout.base")
loaded_by_import_verl = [m for m in LAZY if m in sys.modules]
from verl.plugin.platform import PlatformRegistry
from verl.workers.rollout.base import _ROLLOUT_REGISTRY
from verl.workers.rollout.replica import RolloutReplicaRegistry
import verl.utils.distributed as d
import verl.utils.fsdp_utils as fsdp_utils
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
print(json.dumps({"flags": {"cpu_platform": "cpu" in PlatformRegistry.registered_names(),
                            "hf_replica": "hf" in RolloutReplicaRegistry._registry,
                            "hf_adapter": ("hf", "async") in _ROLLOUT_REGISTRY,
                            "gloo_patch": getattr(d.initialize_global_process_group_ray, "_xrpo_cpu", False),
                            "unpinned_offload": getattr(fsdp_utils.CPUOffloadPolicy, "_xrpo_cpu", False),
                            "short_poll": getattr(ReplayBuffer._wait_for_next_poll, "_xrpo_cpu", False)},
                  "loaded_by_import_verl": loaded_by_import_verl}))
"""


@pytest.mark.slow  # a fresh interpreter or a model build
@pytest.mark.parametrize(
    "switch,expected,external",
    [
        ("0", False, None),
        ("1", True, "xrpo_verl.cpu.register"),
        ("1", True, "xrpo_verl.local.register"),
        ("1", True, None),
    ],
)
def test_cpu_switch_controls_every_registration(switch, expected, external):
    """Off: `import verl` (which loads our entry points) leaves verl untouched. On: all in place,
    through VERL_USE_EXTERNAL_MODULES as the launchers set it (or as scripts written before the
    platform moved out of `xrpo_verl.local` do), or through the CPU entry point alone; the patched
    modules are patched once something imports them, and `import verl` alone loads none."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_USE_EXTERNAL_MODULES")
    }
    env["XRPO_VERL_CPU"] = switch
    if external:  # as launch.cpu_env does: independent of the other plugin modules importing
        env["VERL_USE_EXTERNAL_MODULES"] = external
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["flags"] == {k: expected for k in seen["flags"]}
    assert seen["loaded_by_import_verl"] == []  # patched when they load, not loaded to be patched


def test_the_cpu_entry_point_loads_before_our_registrations():
    from importlib.metadata import entry_points

    names = [ep.name for ep in entry_points(group="verl.plugins") if ep.value.startswith("xrpo_verl.")]
    assert names == ["xrpo_cpu", "xrpo_verl"]


def test_cpu_switch_rejects_unknown_values(monkeypatch):
    from xrpo_verl.cpu import switches

    monkeypatch.setenv("XRPO_VERL_CPU", "yes")
    with pytest.raises(ValueError, match="XRPO_VERL_CPU='yes'"):
        switches.cpu_enabled()


def test_shim_targets_exist_in_installed_verl():
    """Each shim patches a verl 0.9.1 internal by name; fail loudly if one moved."""
    import verl
    import verl.utils.distributed as dist_utils
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.utils.import_utils as import_utils
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    assert verl.__version__ == "0.9.1"
    assert callable(dist_utils.initialize_global_process_group_ray)
    assert fsdp_utils.CPUOffloadPolicy is not None and transformer_impl.CPUOffloadPolicy is not None
    assert callable(import_utils.is_trl_available)
    assert callable(ReplayBuffer._wait_for_next_poll)
    assert callable(transformer_impl.prepare_micro_batches)  # wrapped by name in this module
    assert ("cuda", "nvidia") in EngineRegistry._engines["language_model"][
        "fsdp2"
    ] or "cuda" in EngineRegistry._engines["language_model"]["fsdp2"]


def test_cpu_device_module_reports_a_string_name_and_rejects_unknown_calls():
    from xrpo_verl.cpu.shims import CpuDeviceModule

    dev = CpuDeviceModule()
    assert dev.get_device_name() == "CPU"  # flops_counter does `key in device_name`
    assert dev.is_available() and dev.device_count() == 1
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    state = dev.get_rng_state()
    a = torch.rand(3)
    dev.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    with pytest.raises(AttributeError, match="no_such_call"):
        dev.no_such_call()
