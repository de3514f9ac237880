"""Negative control for the weight-sync test, loaded through VERL_USE_EXTERNAL_MODULES in every Ray
process: verl's own vLLM ServerAdapter, except that the weight push numbered XRPO_VLLM_SKIP_PUSH
(0 is the initial push, k the one after step k) drains the actor's tensors without sending them.
The steps before it and after it are the positive checks of the same run."""

import os

from verl.workers.rollout.base import _ROLLOUT_REGISTRY

_ROLLOUT_REGISTRY[("vllm", "async")] = "vllm_skip_push.SkipPushAdapter"


def __getattr__(name):
    if name != "SkipPushAdapter":
        raise AttributeError(name)
    from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter

    class SkipPushAdapter(ServerAdapter):
        pushes = 0

        async def update_weights(self, weights, global_steps=None, wire_format="named_tensors", **kw):
            push = SkipPushAdapter.pushes
            SkipPushAdapter.pushes += 1
            if push != int(os.environ["XRPO_VLLM_SKIP_PUSH"]):
                return await super().update_weights(weights, global_steps=global_steps, wire_format=wire_format, **kw)
            for _ in weights:  # FSDP's full_tensor() gathers are collectives: every rank drains
                pass
            print(f"[vllm_skip_push] weight push {push} skipped (global_steps={global_steps})", flush=True)

    globals()["SkipPushAdapter"] = SkipPushAdapter
    return SkipPushAdapter
