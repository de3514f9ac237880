"""Every patch that lets verl 0.9.1 train on a machine without an accelerator (and one that makes it cheaper there).

`apply()` runs only when the CPU switch is on (`register.py`); nothing here changes verl on a
GPU machine. Each shim names the verl code it works around (paths relative to the installed
`verl/` package, line numbers of the 0.9.1 wheel). The private names among them are listed in
`xrpo_verl/verl_adapters/verl_internals.py` with every other one we use; `apply()` checks only the
version (the full check imports verl's trainer, which must not load before the CPU platform does),
and `test_shim_targets_exist_in_installed_verl` fails loudly when one of the internals moves.
"""

import contextlib
import os

import torch

from xrpo_verl.verl_adapters.after_import import after_import
from xrpo_verl.verl_adapters.micro_batches import cut_by_padding
from xrpo_verl.verl_adapters.verl_internals import PINNED_VERL as SUPPORTED_VERL

# The V1 ReplayBuffer polls TransferQueue every 2 s (trainer/ppo/v1/replay_buffer.py:144,409), a
# period sized for GPU steps: a CPU step of the tiny models would mostly wait for the next poll
# (RESULTS.md, "CPU step"). A poll is cheap, so a short interval ends the wait soon after the data
# is there.
CPU_POLL_INTERVAL_S = 0.05

# Environment that verl reads before the shims can act; `register.py` sets these defaults.
CPU_ENV = {
    # plugin/platform/platform_manager.py:92 picks the platform by name; ours is "cpu".
    "VERL_PLATFORM": "cpu",
    # workers/engine/base.py:405 - the FSDP engines are registered for cuda/npu only; the FSDP2
    # code path itself runs on CPU tensors once the platform says "cpu" and the backend is gloo.
    "VERL_ENGINE_DEVICE": "cuda",
    "VERL_ENGINE_VENDOR": "nvidia",
}


class CpuDeviceModule:
    """Stands in for `torch.cuda` as `platform.device_module` (utils/device.py:get_torch_device).

    Only what verl calls on it exists; an unknown name raises AttributeError naming it, so a new
    call site fails at its own line instead of receiving a silent dummy.
    """

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def get_device_name(self, device=None) -> str:
        # utils/flops_counter.py:75-85 does `key in device_name`; it must be a string.
        return "CPU"

    def set_device(self, device) -> None:
        pass

    def synchronize(self, device=None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def ipc_collect(self) -> None:
        pass

    def set_per_process_memory_fraction(self, fraction, device=None) -> None:
        pass

    def mem_get_info(self, device=None) -> tuple[int, int]:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        avail = os.sysconf("SC_AVPHYS_PAGES") * page_size
        return avail, pages * page_size

    def memory_allocated(self, device=None) -> int:
        return 0

    def max_memory_allocated(self, device=None) -> int:
        return 0

    def memory_reserved(self, device=None) -> int:
        return 0

    def max_memory_reserved(self, device=None) -> int:
        return 0

    def reset_peak_memory_stats(self, device=None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def get_rng_state(self, device=None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device=None) -> None:
        torch.set_rng_state(state)

    def __getattr__(self, name: str):
        # Streams and events: torch.cpu has no-op versions (current_stream, stream, Stream, Event).
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        raise AttributeError(f"CpuDeviceModule has no {name!r}: verl called torch.<device>.{name} on the CPU platform")


def _platform_class():
    """Build the CPU `PlatformBase` subclass (plugin/platform/platform_base.py).

    Without it verl falls back to the CUDA platform: NCCL is requested and
    `fsdp2_load_full_state_dict` moves the model to `cuda` (utils/fsdp_utils.py:507).
    """
    from verl.plugin.platform import PlatformBase

    device_module = CpuDeviceModule()

    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: device_module)

        def is_available(self) -> bool:
            return True

        def current_device(self) -> str:
            # `model.to(get_device_id())` must land on the CPU.
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index) -> None:
            pass

        def synchronize(self, device_index=None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "XRPO_VERL_CPU_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            # RayResourcePool bundles ask for {ray_resource_name(): 1} and _check_resource_available
            # reads only the node's "GPU"/"NPU" (single_controller/ray/base.py:144-148, 226-230), so
            # the CPU run declares fake GPUs: +ray_kwargs.ray_init.num_gpus=<ranks>.
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self):
            return None

    return PlatformCPU


def _register_platform() -> None:
    from verl.plugin.platform import PlatformRegistry

    PlatformRegistry.register(platform="cpu")(_platform_class())


def _force_gloo() -> None:
    """utils/distributed.py:89 builds `cpu:gloo,{device}:{backend}`, i.e. `cpu:gloo,cpu:gloo` on
    the CPU platform, which torch rejects as a duplicate device type. Force plain gloo.

    engine_workers.py imports the function by name, so this must run before that module is
    imported (it runs at `import verl`); an already-imported copy is patched too.
    """
    import sys

    import verl.utils.distributed as dist_utils

    original = dist_utils.initialize_global_process_group_ray
    if getattr(original, "_xrpo_cpu", False):
        return

    def initialize_gloo(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend="gloo")

    initialize_gloo._xrpo_cpu = True
    dist_utils.initialize_global_process_group_ray = initialize_gloo
    engine_workers = sys.modules.get("verl.workers.engine_workers")
    if engine_workers is not None:
        engine_workers.initialize_global_process_group_ray = initialize_gloo


def _unpinned_offload_policy(fsdp_utils) -> None:
    """Forward-only FSDP2 engines (the ref model) always get `CPUOffloadPolicy(pin_memory=True)`
    (workers/engine/fsdp/transformer_impl.py:459-462); pinning needs an accelerator and raises
    inside `fully_shard`. transformer_impl imports the name from utils/fsdp_utils.py, so replace
    it there, as soon as that module loads, with a subclass that never pins.
    """
    import sys

    base = fsdp_utils.CPUOffloadPolicy
    if getattr(base, "_xrpo_cpu", False):
        return

    class UnpinnedCPUOffloadPolicy(base):
        _xrpo_cpu = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    fsdp_utils.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    impl = sys.modules.get("verl.workers.engine.fsdp.transformer_impl")
    if impl is not None:
        impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def _short_replay_poll(replay_buffer) -> None:
    """trainer/ppo/v1/replay_buffer.py:409 sleeps `poll_interval` (2.0 s, not in config)."""
    ReplayBuffer = replay_buffer.ReplayBuffer
    original = ReplayBuffer._wait_for_next_poll
    if getattr(original, "_xrpo_cpu", False):
        return

    def wait_for_next_poll(self, partition_id, last_debug_time):
        self.poll_interval = min(self.poll_interval, CPU_POLL_INTERVAL_S)
        return original(self, partition_id, last_debug_time)

    wait_for_next_poll._xrpo_cpu = True
    ReplayBuffer._wait_for_next_poll = wait_for_next_poll


def _padded_micro_batches(impl) -> None:
    """workers/engine/fsdp/transformer_impl.py:737 cuts a mini-batch into micro-batches of
    `micro_batch_size_per_gpu` rows, each padded to its longest row (the CPU runs cannot pack rows:
    no varlen attention). Not a platform patch but a cost one: cut by padded positions instead
    (`micro_batches.cut_by_padding`), so an ICL row does not widen a micro-batch of short rows."""
    if not getattr(impl.prepare_micro_batches, "_xrpo_padded_cuts", False):
        impl.prepare_micro_batches = cut_by_padding(impl.prepare_micro_batches)


def _trl_value_head_guard() -> None:
    """models/transformers/monkey_patch.py:352-356 imports `AutoModelForCausalLMWithValueHead`
    whenever `trl` is importable; trl 1.x has neither `trl.experimental.ppo` nor the top-level
    name, so building any FSDP actor fails with ImportError. Report trl as available only when
    that class can be imported. monkey_patch.py and utils/model.py import the function by
    name, so replace it in utils/import_utils.py before they load (i.e. at `import verl`).
    """
    import importlib
    import sys

    import verl.utils.import_utils as import_utils

    original = import_utils.is_trl_available
    if getattr(original, "_xrpo_cpu", False):
        return

    def trl_value_head_available() -> bool:
        if not original():
            return False
        for module in ("trl.experimental.ppo", "trl"):
            try:
                if hasattr(importlib.import_module(module), "AutoModelForCausalLMWithValueHead"):
                    return True
            except ImportError:
                continue
        return False

    trl_value_head_available._xrpo_cpu = True
    import_utils.is_trl_available = trl_value_head_available
    for name in ("verl.models.transformers.monkey_patch", "verl.utils.model"):
        module = sys.modules.get(name)
        if module is not None:
            module.is_trl_available = trl_value_head_available


def check_verl_version() -> None:
    import verl

    if verl.__version__ != SUPPORTED_VERL:
        raise RuntimeError(
            f"xrpo_verl.cpu shims target verl {SUPPORTED_VERL}, found {verl.__version__}: "
            "re-check every shim in xrpo_verl/cpu/shims.py against the new verl"
        )


def apply() -> None:
    """Install every CPU shim in this process. Idempotent."""
    check_verl_version()
    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    _trl_value_head_guard()  # first: the imports below may load monkey_patch.py
    _register_platform()
    _force_gloo()
    # Patched when they load: most processes of a run (reward, agent-loop and TransferQueue
    # workers) never import them, and importing them costs each process a second or two.
    after_import("verl.utils.fsdp_utils", _unpinned_offload_policy)
    after_import("verl.trainer.ppo.v1.replay_buffer", _short_replay_poll)
    after_import("verl.workers.engine.fsdp.transformer_impl", _padded_micro_batches)
