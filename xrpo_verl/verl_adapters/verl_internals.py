"""Every private name of verl 0.9.1 that xrpo-verl depends on, in one list, checked at start-up.

verl's public surface (registries' decorators, the trainer's hook methods) does not cover what a
multi-round trainer mode, two agent loops and a CPU rollout backend need, so some of our code
calls or overrides verl's underscore names. They are listed here (`PRIVATE_NAMES`) with the module
of ours that uses each; `check_verl()` imports each owner and fails with one message naming every
name that moved, and runs when our trainer starts (`XrpoTrainer.__init__`) and when the CPU shims
install (`cpu/shims.py`). `tests/verl_adapters/test_verl_internals.py` runs it against the
pinned verl, and greps our sources so that a new private name cannot be used without being listed.
"""

from __future__ import annotations

import importlib

PINNED_VERL = "0.9.1"

# owner (module, or module:Class) -> private names of it that we use -> "file of ours (under
# xrpo_verl/, or tests/...): why"
PRIVATE_NAMES: dict[str, dict[str, str]] = {
    "verl.experimental.agent_loop.agent_loop": {
        "_agent_loop_registry": "verl_adapters/verl_internals.py: agent_loop_registry(), for plugin.py",
    },
    "verl.experimental.agent_loop.agent_loop:AgentLoopWorker": {
        "_run_agent_loop": "verl_adapters/agent_loops.py: session ids shifted by the row's offset",
    },
    "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ": {
        "_run_prompt": "verl_adapters/agent_loops.py: the TQ worker's methods, taken over",
        "_agent_loop_postprocess": "verl_adapters/agent_loops.py: the TQ worker's methods, taken over",
    },
    "verl.trainer.ppo.v1.trainer_base:PPOTrainer": {
        "_next_train_batch": "verl_adapters/trainer.py: the step's dataloader prompts, handed to rounds.py",
        "_submit_batch_to_rollout": "verl_adapters/trainer.py: every round's submission, handed to rounds.py",
        "_compute_advantage": "verl_adapters/trainer.py: our estimators and memories",
        "_balance_batch": "verl_adapters/trainer.py: each mini-batch's rows sorted by length",
        "_compute_metrics": "verl_adapters/trainer.py: plugin and sandbox metrics",
        "_save_checkpoint": "verl_adapters/trainer.py: plugin state saved with the checkpoint",
        "_load_checkpoint": "verl_adapters/trainer.py: plugin state restored on resume",
    },
    "verl.single_controller.base.worker_group:WorkerGroup": {
        "_dispatch_info": "verl_adapters/trainer.py: the actor's data-parallel size, read after verl fills it",
    },
    "verl.workers.rollout.base": {
        "_ROLLOUT_REGISTRY": "verl_adapters/verl_internals.py: rollout_registry(), for cpu/register.py",
    },
    "verl.workers.rollout.replica:RolloutReplica": {
        "_server_handle": "cpu/hf_rollout.py: set by launch_servers, as verl's replicas do",
    },
    "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer": {
        "_wait_for_next_poll": "cpu/shims.py: a shorter TransferQueue poll on CPU",
    },
    "verl.workers.engine.base:EngineRegistry": {
        "_engines": "tests/cpu/test_shims.py: the FSDP2 engine the CPU platform borrows",
    },
}


def _owner(path: str):
    module, _, cls = path.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, cls) if cls else obj


def missing_names() -> list[str]:
    """`owner.name` for every listed private name the installed verl lacks."""
    out = []
    for owner, names in PRIVATE_NAMES.items():
        try:
            obj = _owner(owner)
        except (ImportError, AttributeError) as exc:
            out.append(f"{owner} ({type(exc).__name__}: {exc})")
            continue
        # instance attributes set in __init__ are declared on the class by verl only sometimes
        out += [f"{owner}.{n}" for n in names if not hasattr(obj, n) and n not in _INSTANCE_ATTRIBUTES]
    return out


# set on instances (not the class) by verl itself; their use is checked by the end-to-end tests
_INSTANCE_ATTRIBUTES = frozenset({"_server_handle", "_dispatch_info"})


def check_verl() -> None:
    """Raise RuntimeError unless the installed verl is the pinned one with every name we use."""
    import verl

    problems = []
    if verl.__version__ != PINNED_VERL:
        problems.append(f"verl {verl.__version__} is installed, xrpo-verl is built on {PINNED_VERL}")
    problems += [f"missing {name}" for name in missing_names()]
    if problems:
        raise RuntimeError(
            "xrpo-verl depends on private names of verl (xrpo_verl/verl_adapters/verl_internals.py): "
            + "; ".join(problems)
        )


def agent_loop_registry(agent_loop_module) -> dict:
    """verl's agent-loop registry (name -> {"_target_": class path})."""
    return agent_loop_module._agent_loop_registry


def rollout_registry() -> dict:
    """verl's (rollout name, mode) -> adapter class path registry."""
    from verl.workers.rollout import base

    return base._ROLLOUT_REGISTRY
