"""The CPU paths' `verl.plugins` entry point, loaded by `import verl` in every process.

Inert unless a switch of `switches.py` is on: then it installs the CPU shims (`shims.py`) and
registers the `hf` rollout backend (`actor_rollout_ref.rollout.name=hf`); with the vLLM switch it
adds the shims verl's vLLM rollout needs on vLLM's CPU build (`vllm_cpu.py`, `.venv-vllm` only).
With both switches off, importing it costs two environment lookups. The launchers also name it in
`VERL_USE_EXTERNAL_MODULES`, which verl imports before any entry point, so the CPU platform is
registered even if another plugin fails to import (verl logs plugin errors at DEBUG only).
"""

import os

from xrpo_verl.cpu.switches import CPU_SWITCH, cpu_enabled, vllm_cpu_enabled


def enable() -> None:
    """Install the CPU shims and the `hf` rollout in this process (idempotent)."""
    os.environ[CPU_SWITCH] = "1"
    from xrpo_verl.cpu import shims, vllm_cpu

    try:
        vllm_cpu.check_environment()
    except vllm_cpu.WrongEnvironment as wrong:
        # SystemExit, not the exception: verl swallows plugin import errors (logged at DEBUG), and the
        # run would fail later inside a Ray worker. One line naming the environment to use instead.
        raise SystemExit(f"xrpo_verl: {wrong}") from None
    shims.apply()
    register_hf_rollout()
    if vllm_cpu_enabled():
        vllm_cpu.apply()


def _load_hf_replica():
    from xrpo_verl.cpu.hf_rollout import HFReplica

    return HFReplica


def register_hf_rollout() -> None:
    """`rollout.name=hf` in both registries verl consults, each when verl loads it (the rollout
    modules import transformers' model classes, which most processes of a run never need);
    hf_rollout.py loads only when used."""
    from xrpo_verl.verl_adapters.after_import import after_import
    from xrpo_verl.verl_adapters.verl_internals import rollout_registry

    def fill_replicas(replica) -> None:
        replica.RolloutReplicaRegistry.register("hf", _load_hf_replica)

    def fill_adapters(_base) -> None:
        rollout_registry()[("hf", "async")] = "xrpo_verl.cpu.hf_rollout.HFServerAdapter"

    after_import("verl.workers.rollout.replica", fill_replicas)
    after_import("verl.workers.rollout.base", fill_adapters)


if cpu_enabled() or vllm_cpu_enabled():
    enable()
