"""Agent loops `xrpo_icl` / `extra_prefix` and the session-offset worker, on verl's real agent-loop classes.

The LLM server is the one fake here (no vLLM on CPU): it records the prompt ids it is given and
returns fixed tokens, so the test can check exactly what the server saw and what the loop returns.
The tokenizer is the project's locally trained BPE with a ChatML template.
"""

import asyncio

import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from xrpo_verl.lab.tiny_model import TinyModelConfig, build_tokenizer
from xrpo_verl.verl_adapters import agent_loops as al

GEN = [11, 12, 13]


class RecordingServer:
    """Stands in for verl's LLMServerClient: records requests, returns GEN with log-probs -0.5."""

    def __init__(self):
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append({"prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)})
        return TokenOutput(token_ids=list(GEN), log_probs=[-0.5] * len(GEN), extra_fields={"min_global_steps": 1})


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(TinyModelConfig())


def _run(cls, tokenizer, server, mode="with_icl", **kwargs):
    """Build the loop inside the event loop (verl's AgentLoopBase captures the running loop) and run it."""

    async def go():
        return await _loop(cls, tokenizer, server, mode).run({"temperature": 1.0}, **kwargs)

    return asyncio.run(go())


def _loop(cls, tokenizer, server, mode="with_icl"):
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 200, "response_length": 10}},
            "data": {},
            "algorithm": {"xrpo": {"icl": {"mode": mode}}},
        }
    )
    return cls(
        trainer_config=DictConfigWrap(cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
    )


MSGS = [{"role": "user", "content": "What is 2+3?"}]
ICL = "Here are examples of solved problems.\n\nProblem: 1+1\nSolution: 2\n\nNow solve the following problem.\nWhat is 2+3?"


def _ids(tok, messages):
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)


def test_registered_names():
    assert _agent_loop_registry[al.ICL_AGENT]["_target_"].endswith("XrpoICLAgentLoop")
    assert _agent_loop_registry[al.PREFIX_AGENT]["_target_"].endswith("ExtraPrefixAgentLoop")


def test_prefix_loop_masks_prefix_and_generates_after_it(tokenizer):
    server = RecordingServer()
    prefix = [21, 22, 23, 24]
    out = _run(al.ExtraPrefixAgentLoop, tokenizer, server, raw_prompt=MSGS, **{al.COL_PREFIX_IDS: prefix})
    sent = server.calls[0]
    assert sent["prompt_ids"][-4:] == prefix  # generation continues from prompt ⊕ prefix
    assert sent["sampling_params"]["max_tokens"] == 10 - 4  # response budget minus the prefix
    assert out.prompt_ids == sent["prompt_ids"][:-4]
    assert out.response_ids == prefix + GEN  # the reward sees prefix + suffix
    assert out.response_mask == [0, 0, 0, 0, 1, 1, 1]  # the loss sees the suffix only
    assert out.response_logprobs == [0.0] * 4 + [-0.5] * 3
    assert out.num_turns == 2 and "num_turns" in out.as_dict()


def test_prefix_loop_rejects_empty_or_too_long_prefix(tokenizer):
    with pytest.raises(ValueError, match="non-empty"):
        _run(al.ExtraPrefixAgentLoop, tokenizer, RecordingServer(), raw_prompt=MSGS, **{al.COL_PREFIX_IDS: []})
    with pytest.raises(ValueError, match="no room"):
        _run(
            al.ExtraPrefixAgentLoop,
            tokenizer,
            RecordingServer(),
            raw_prompt=MSGS,
            **{al.COL_PREFIX_IDS: list(range(10))},
        )


@pytest.mark.parametrize("mode", ["with_icl", "strip_icl"])
def test_icl_loop_generates_from_rendered_prompt(tokenizer, mode):
    server = RecordingServer()
    out = _run(al.XrpoICLAgentLoop, tokenizer, server, mode, raw_prompt=MSGS, **{al.COL_ICL_PROMPT: ICL})
    augmented = _ids(tokenizer, [{"role": "user", "content": ICL}])
    plain = _ids(tokenizer, MSGS)
    assert server.calls[0]["prompt_ids"] == augmented  # sampling always under the ICL context
    assert out.prompt_ids == (augmented if mode == "with_icl" else plain)  # what the loss is conditioned on
    assert out.response_ids == GEN and out.response_mask == [1, 1, 1]


def test_icl_loop_without_examples_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="xrpo_icl_prompt"):
        _run(al.XrpoICLAgentLoop, tokenizer, RecordingServer(), raw_prompt=MSGS)


def test_worker_shifts_session_ids_by_the_row_offset(monkeypatch):
    """Round 2 of uid u with offset 4 must write sessions 4.., not overwrite round 1's 0.."""
    seen = []

    async def record(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        seen.append((agent_name, kwargs))

    monkeypatch.setattr(AgentLoopWorker, "_run_agent_loop", record)
    worker = object.__new__(al.XrpoAgentLoopWorker)
    for i in range(2):
        asyncio.run(worker._run_agent_loop({}, {}, agent_name="xrpo_icl", session_id=i, uid="u", **{al.COL_OFFSET: 4}))
    asyncio.run(worker._run_agent_loop({}, {}, agent_name="x", session_id=0, uid="v"))
    assert [kw["session_id"] for _, kw in seen] == [4, 5, 0]
    assert all(al.COL_OFFSET not in kw for _, kw in seen)  # popped: never stored in TransferQueue


def test_worker_takes_over_every_method_of_verls_tq_worker():
    """If verl's AgentLoopWorkerTQ gains a method, XrpoAgentLoopWorker must take it over too."""
    tq_cls = al._TQ_WORKER
    own = {k for k, v in vars(tq_cls).items() if callable(v) and k != "__init__"}
    assert own == set(al.TQ_WORKER_METHODS)
    for name in al.TQ_WORKER_METHODS:
        assert getattr(al.XrpoAgentLoopWorker, name) is getattr(tq_cls, name)


def test_small_submissions_go_round_the_workers_not_to_the_first_ones(monkeypatch):
    """Three polls of 3, 2 and 8 prompts over 4 workers: each starts where the last ended (verl's
    manager would give workers 0 and 1 a chunk every poll and worker 3 one only in the last)."""
    import torch
    from tensordict import TensorDict

    class Worker:
        def __init__(self):
            self.rows = []
            self.generate_sequences = self

        def remote(self, chunk):
            self.rows.append(len(chunk))

    monkeypatch.setattr(al.ray, "get", lambda refs: refs)  # the workers are local here
    manager = object.__new__(al.XrpoAgentLoopManager)
    manager.agent_loop_workers, manager._next_worker = [Worker() for _ in range(4)], 0
    for rows in (3, 2, 8):
        manager.generate_sequences(TensorDict({"x": torch.zeros(rows)}, batch_size=[rows]))
    assert [w.rows for w in manager.agent_loop_workers] == [[1, 1, 2], [1, 2], [1, 2], [1, 2]]
    assert al.spread(2, 4, 3) == ([3, 0], 1)
    with pytest.raises(ValueError, match="5 chunks for 4 workers"):
        al.spread(5, 4, 0)
