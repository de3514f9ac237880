"""Unit tests of the vLLM generation path, with a stand-in `vllm` module (this environment has no
vLLM): our side of its offline API (one request per problem with n = k and the problem's own seed,
outputs read back in order) and the clear error on a machine without a GPU. The real engine runs
in tests_vllm/test_eval_vllm.py (vLLM's CPU build, `make test-vllm`) and scripts/gpu_smoke.sh."""

from __future__ import annotations

import sys
import types

import pytest

from xrpo_verl.eval import generate as G


class _Out:
    def __init__(self, text, token_ids):
        self.text, self.token_ids = text, token_ids


def _fake_vllm(calls):
    mod = types.ModuleType("vllm")

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, **kw):
            calls["init"] = kw

        def chat(self, messages, params, use_tqdm):
            calls["chat"] = (messages, [p.kw for p in params])
            return [
                types.SimpleNamespace(
                    outputs=[_Out(f"{m[-1]['content']}#{j}", [0] * (j + 1)) for j in range(p.kw["n"])]
                )
                for m, p in zip(messages, params)
            ]

    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    return mod


def test_vllm_generator_requests_k_samples_per_problem_with_its_seed(monkeypatch):
    calls = {}
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(calls))
    sampling = G.SamplingConfig(k=3, temperature=0.6, top_p=0.95, max_new_tokens=64, seed=7)
    gen = G.VLLMGenerator("/models/m", sampling, tensor_parallel_size=2)
    assert calls["init"] == {"model": "/models/m", "tensor_parallel_size": 2, "seed": 7}
    msgs = [[{"role": "user", "content": "p0"}], [{"role": "user", "content": "p1"}]]
    out = gen.generate(msgs, seeds=[7, 8])
    assert calls["chat"][1] == [dict(n=3, temperature=0.6, top_p=0.95, max_tokens=64, seed=s) for s in (7, 8)]
    assert [[(x.text, x.num_tokens) for x in row] for row in out] == [
        [("p0#0", 1), ("p0#1", 2), ("p0#2", 3)],
        [("p1#0", 1), ("p1#1", 2), ("p1#2", 3)],
    ]


def test_vllm_backend_without_a_gpu_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm({}))  # importable, but torch sees no CUDA here
    with pytest.raises(ValueError, match="needs the vllm package and a CUDA GPU"):
        G.make_generator(str(tmp_path), G.SamplingConfig(k=2), backend="vllm")
