"""Negative control for the weight-sync test (loaded via VERL_USE_EXTERNAL_MODULES in every Ray process):
after the initial push the hf adapter drains the weights but never sends them to the server."""

from verl.workers.rollout.base import _ROLLOUT_REGISTRY

_ROLLOUT_REGISTRY[("hf", "async")] = "cpu_nosync_control.NoSyncAdapter"


def __getattr__(name):
    if name != "NoSyncAdapter":
        raise AttributeError(name)
    from xrpo_verl.cpu.hf_rollout import HFServerAdapter

    class NoSyncAdapter(HFServerAdapter):
        pushes = 0

        async def update_weights(self, weights, wire_format="named_tensors", **kw):
            NoSyncAdapter.pushes += 1
            if NoSyncAdapter.pushes == 1:
                return await super().update_weights(weights, wire_format, **kw)
            for _ in weights:
                pass

    globals()["NoSyncAdapter"] = NoSyncAdapter
    return NoSyncAdapter
