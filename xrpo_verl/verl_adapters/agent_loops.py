"""Agent loops `xrpo_icl` and `extra_prefix`, and the agent-loop manager the xrpo rounds need.

Both loops reuse verl's `SingleTurnAgentLoop` so their outputs carry exactly the fields of plain
rows (TransferQueue silently drops a field that some rows lack). They only change what the
server sees, through a thin client wrapper:

- `xrpo_icl` (XRPO §2.3): the user turn is replaced by the rendered ICL prompt (column
  `xrpo_icl_prompt`). `with_icl` trains on that prompt; `strip_icl` generates from it but keeps
  the original prompt ids, so the loss sees the hint-free prompt (off-policy ablation).
- `extra_prefix` (ExTra §3.2): generation continues from `prompt ⊕ prefix` (column
  `xrpo_prefix_ids`, exact token ids); the response is `prefix ⊕ suffix` with `response_mask`
  0 over the prefix and 1 over the suffix, so the reward sees both and the loss only the suffix.

`XrpoAgentLoopWorker` shifts `session_id` by the row column `xrpo_session_offset`: verl keys
trajectories `{uid}_{session_id}_{i}` with session ids from 0, so a second round for the same
uid would overwrite round 1 (see docs/multiround.md, sessions).
"""

from __future__ import annotations

from typing import Any

import ray
import transfer_queue as tq
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.workers.rollout.replica import TokenOutput

from xrpo_verl.verl_adapters.config import AGENT_LOOP_MANAGER, TRAINER_MODE, read_method_configs

ICL_AGENT = "xrpo_icl"
PREFIX_AGENT = "extra_prefix"

# Row columns our trainer puts on every submitted row (defaults on plain rows keep fields homogeneous).
COL_OFFSET = "xrpo_session_offset"
COL_ICL_PROMPT = "xrpo_icl_prompt"
COL_PREFIX_IDS = "xrpo_prefix_ids"


def replace_user_turn(messages: list[dict], new_text: str) -> list[dict]:
    """Chat messages with the content of the last user turn replaced by `new_text`."""
    messages = [dict(m) for m in messages]
    for m in reversed(messages):
        if m.get("role") == "user":
            m["content"] = new_text
            return messages
    raise ValueError(f"ICL rendering needs a user turn in raw_prompt; roles found: {[m.get('role') for m in messages]}")


class _RedirectingClient:
    """Wraps the LLM client: generate from other prompt ids and/or prepend a forced prefix to the output."""

    def __init__(
        self,
        inner,
        *,
        prompt_ids: list[int] | None = None,
        prefix_ids: list[int] | None = None,
        max_new_tokens: int | None = None,
    ):
        self._inner = inner
        self._prompt_ids = prompt_ids
        self._prefix = list(prefix_ids or [])
        self._max_new_tokens = max_new_tokens

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs):
        ids = list(self._prompt_ids if self._prompt_ids is not None else prompt_ids) + self._prefix
        params = dict(sampling_params)
        if self._max_new_tokens is not None:
            params["max_tokens"] = self._max_new_tokens
        out: TokenOutput = await self._inner.generate(request_id, prompt_ids=ids, sampling_params=params, **kwargs)
        if not self._prefix:
            return out
        log_probs = [0.0] * len(self._prefix) + list(out.log_probs) if out.log_probs else None
        return out.model_copy(update={"token_ids": self._prefix + list(out.token_ids), "log_probs": log_probs})

    def __getattr__(self, name):
        return getattr(self._inner, name)


@register(ICL_AGENT)
class XrpoICLAgentLoop(SingleTurnAgentLoop):
    """Single turn from the ICL-rendered prompt; the row keeps its uid, so it joins the original group."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        icl_text = kwargs.get(COL_ICL_PROMPT) or ""
        if not icl_text:
            raise ValueError(f"agent loop {ICL_AGENT!r} needs a non-empty {COL_ICL_PROMPT!r} column")
        augmented = replace_user_turn(list(kwargs["raw_prompt"]), icl_text)
        mode = read_method_configs(self.config.algorithm)[0].icl.mode
        if mode == "with_icl":
            return await super().run(sampling_params, **{**kwargs, "raw_prompt": augmented})
        # strip_icl: sample under the ICL context, train as if the plain prompt had produced it.
        augmented_ids = await self.ct_build_initial_tokens(augmented)
        self.server_manager = _RedirectingClient(self.server_manager, prompt_ids=augmented_ids)
        return await super().run(sampling_params, **kwargs)


@register(PREFIX_AGENT)
class ExtraPrefixAgentLoop(SingleTurnAgentLoop):
    """Suffix rollouts after a forced prefix; `response_mask` is 0 on the prefix, 1 on the suffix."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        prefix = [int(t) for t in (kwargs.get(COL_PREFIX_IDS) or [])]
        if not prefix:
            raise ValueError(f"agent loop {PREFIX_AGENT!r} needs a non-empty {COL_PREFIX_IDS!r} column")
        budget = int(self.response_length) - len(prefix)
        if budget < 1:
            raise ValueError(
                f"prefix of {len(prefix)} tokens leaves no room in rollout.response_length={self.response_length}"
            )
        self.server_manager = _RedirectingClient(self.server_manager, prefix_ids=prefix, max_new_tokens=budget)
        output = await super().run(sampling_params, **kwargs)
        if output.response_ids[: len(prefix)] != prefix:
            raise RuntimeError("the prefix tokens did not survive the token merge; refusing to mask the wrong tokens")
        output.response_mask = [0] * len(prefix) + list(output.response_mask[len(prefix) :])
        output.num_turns = 2
        return output


_TQ_WORKER = AgentLoopWorkerTQ.__ray_actor_class__
# The TQ worker's own methods, reused as they are. A plain subclass of `_TQ_WORKER` fails inside Ray
# ("super(type, obj): obj must be an instance or subtype of type" from its __init__'s zero-arg
# super), so the worker derives from AgentLoopWorker and takes these functions over; a test pins
# this list against verl, so an upstream change fails loudly instead of silently dropping a method.
TQ_WORKER_METHODS = ("generate_sequences", "_run_prompt", "_agent_loop_postprocess")


class XrpoAgentLoopWorker(AgentLoopWorker):
    """verl's `AgentLoopWorkerTQ` whose session ids start at the row's `xrpo_session_offset` (0 if absent)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)  # as AgentLoopWorkerTQ.__init__ (agent_loop_tq.py:54-57)
        tq.init()
        self.background_tasks = set()

    generate_sequences = _TQ_WORKER.generate_sequences
    _run_prompt = _TQ_WORKER._run_prompt
    _agent_loop_postprocess = _TQ_WORKER._agent_loop_postprocess

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        offset = int(kwargs.pop(COL_OFFSET, 0) or 0)
        kwargs["session_id"] = int(kwargs["session_id"]) + offset
        return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs)


def spread(n_chunks: int, n_workers: int, start: int) -> tuple[list[int], int]:
    """Workers for the chunks of one submission, from `start` round the ring; and the next start.

    verl's manager gives chunk i of a submission to worker i, so the rounds' small submissions (a few
    prompts a poll) would all land on the first workers.
    """
    if not 0 <= n_chunks <= n_workers:
        raise ValueError(f"{n_chunks} chunks for {n_workers} workers")
    return [(start + i) % n_workers for i in range(n_chunks)], (start + n_chunks) % n_workers


class XrpoAgentLoopManager(AgentLoopManagerTQ):
    """`AgentLoopManagerTQ` that starts `XrpoAgentLoopWorker`s (selected by trainer mode `xrpo`) and
    spreads each submission's chunks over them from where the last one ended (`spread`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(XrpoAgentLoopWorker)
        self._next_worker = 0

    def generate_sequences(self, prompts) -> None:
        workers = self.agent_loop_workers
        chunks = prompts.chunk(min(len(prompts), len(workers))) if len(prompts) else ()
        order, self._next_worker = spread(len(chunks), len(workers), self._next_worker)
        ray.get([workers[w].generate_sequences.remote(c) for w, c in zip(order, chunks, strict=True)])


def select_agent_loop_manager(config) -> None:
    """Use `XrpoAgentLoopManager` (session offsets); refuse a manager that would overwrite round 1."""
    from omegaconf import open_dict
    from verl.utils.import_utils import load_class_from_fqn

    agent_cfg = config.actor_rollout_ref.rollout.agent
    current = agent_cfg.get("agent_loop_manager_class", None)
    if not current:
        with open_dict(config):
            agent_cfg.agent_loop_manager_class = AGENT_LOOP_MANAGER
        return
    cls = load_class_from_fqn(current, "AgentLoopManager")
    if not (isinstance(cls, type) and issubclass(cls, XrpoAgentLoopManager)):
        raise ValueError(
            f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={current!r} is not a subclass of "
            f"{AGENT_LOOP_MANAGER}; trainer mode {TRAINER_MODE!r} needs its session offsets (leave it empty)."
        )
