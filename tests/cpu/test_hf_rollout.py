"""The `hf` rollout server: verl's budget and sampling conventions, batched generate, weight sync."""

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

from xrpo_verl.cpu import hf_rollout
from xrpo_verl.cpu.hf_rollout import (
    HFEngineConfig,
    HFServer,
    SamplingSettings,
    length_buckets,
    max_new_tokens,
    trim_response,
)


# ---- pure helpers -----------------------------------------------------------------------------
def test_max_new_tokens_follows_vllm_budget_rule():
    # min(response_length, prompt_length + response_length - |prompt|), clamped to [1, room]
    assert max_new_tokens(10, prompt_length=64, response_length=16, max_model_len=80) == 16
    assert max_new_tokens(70, prompt_length=64, response_length=16, max_model_len=80) == 10
    assert max_new_tokens(79, prompt_length=64, response_length=16, max_model_len=80) == 1
    with pytest.raises(ValueError, match="no room"):
        max_new_tokens(80, prompt_length=64, response_length=16, max_model_len=80)


def test_sampling_settings_translate_verl_conventions():
    s = SamplingSettings.from_verl({"temperature": 0.7, "top_k": -1, "top_p": 0.9})
    assert (s.do_sample, s.temperature, s.top_k, s.top_p) == (True, 0.7, 0, 0.9)
    greedy = SamplingSettings.from_verl({"temperature": 0, "top_k": 5})
    assert (greedy.do_sample, greedy.top_k) == (False, 5)
    for bad, field in [({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_k": -2}, "top_k")]:
        with pytest.raises(ValueError, match=field):
            SamplingSettings.from_verl(bad)


def test_trim_response_keeps_first_eos_and_budget():
    assert trim_response([5, 6, 2, 7, 2], max_tokens=10, eos_ids={2}) == 3
    assert trim_response([5, 6, 7, 8], max_tokens=2, eos_ids={2}) == 2
    assert trim_response([5, 6], max_tokens=4, eos_ids={2}) == 2


# ---- the hf server on a real (micro) Qwen2 -------------------------------------------------------
def _prompt_ids(tok, question):
    text = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def _server(model_dir, prompt_length, response_length, max_batch=64, engine="generate"):
    """An hf server on `model_dir` whose whole context is prompt plus response."""
    return HFServer(
        str(model_dir),
        prompt_length=prompt_length,
        response_length=response_length,
        max_model_len=prompt_length + response_length,
        max_batch=max_batch,
        engine=HFEngineConfig(engine=engine),
    )


def _forward_logps(model, prompt, response):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0]
    logps = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), -1)
    return logps.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def test_batched_generate_returns_forward_pass_logprobs(micro_model_dir):
    """Concurrent requests of different prompt lengths share one left-padded generate call, and
    each returned log-prob equals the unpadded forward pass of that sequence (T=1, no warpers)."""
    server = _server(micro_model_dir, prompt_length=64, response_length=12)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    prompts = [_prompt_ids(tok, q) for q in ("1+2=?", "9-3=?", "4+4=?")]
    prompts.append(prompts[0] + prompts[1])  # a longer prompt forces left padding
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def run_all():
        return await asyncio.gather(
            *[server.generate(p, dict(params), request_id=str(i)) for i, p in enumerate(prompts)]
        )

    torch.manual_seed(0)
    outputs = asyncio.run(run_all())
    assert server.stats() == {"generate_calls": 1, "requests": 4}
    for prompt, out in zip(prompts, outputs, strict=True):
        assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
        ref = _forward_logps(server.model, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.log_probs), ref, atol=1e-4), (out.log_probs, ref.tolist())


def test_a_finished_row_returns_while_longer_rows_still_decode(micro_model_dir):
    """A row whose budget ends after 2 tokens is handed back during its `generate` call (the call
    counter has not moved yet), so its reward can be judged meanwhile; early or not, every row's
    log-probs equal the forward pass of its sequence."""
    server = _server(micro_model_dir, prompt_length=64, response_length=24)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    prompt = _prompt_ids(tok, "1+2=?")
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    budgets = [2, 24, 2, 24]

    async def one(i, budget):
        out = await server.generate(prompt, {**params, "max_tokens": budget}, request_id=str(i))
        return out, server.num_generate_calls

    async def run_all():
        return await asyncio.gather(*[one(i, b) for i, b in enumerate(budgets)])

    torch.manual_seed(0)
    results = asyncio.run(run_all())
    assert server.stats() == {"generate_calls": 1, "requests": 4}
    longest = max(len(out.token_ids) for out, _ in results)
    assert longest > 2  # the call went on past the short rows' budget
    for budget, (out, calls_seen) in zip(budgets, results, strict=True):
        assert 1 <= len(out.token_ids) <= budget
        if budget == 2:
            assert calls_seen == 0  # back before the call ended
        ref = _forward_logps(server.model, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.log_probs), ref, atol=1e-4), (out.log_probs, ref.tolist())


def test_requests_trickling_in_share_one_generate_call(micro_model_dir):
    """Requests spaced by less than the quiet gap (here 20 ms apart over 100 ms, as the agent loop's
    tokenizer threads and load-balancer calls spread a step's prompts) still form one batch; a
    fixed window from the first request split such a step into several decoding passes."""

    gap = hf_rollout.BATCH_QUIET_S * 0.4
    server = _server(micro_model_dir, prompt_length=64, response_length=4)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    prompt = _prompt_ids(tok, "1+2=?")
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}

    async def late(i):
        await asyncio.sleep(i * gap)
        return await server.generate(prompt, dict(params), request_id=str(i))

    async def run_all():
        return await asyncio.gather(*[late(i) for i in range(6)])

    outputs = asyncio.run(run_all())
    assert len(outputs) == 6
    assert server.stats() == {"generate_calls": 1, "requests": 6}


def test_length_buckets_by_hand():
    # 24 plain prompts and 8 ICL prompts: one call pads 32 rows to 200 (6400 + 512), two cost
    # 24 * 16 + 8 * 200 + 2 * 512 = 3008 positions
    calls = length_buckets([200] * 4 + [16] * 24 + [200] * 4, max_batch=64, call_cost=512)
    assert [sorted(c) for c in calls] == [list(range(4, 28)), [0, 1, 2, 3, 28, 29, 30, 31]]
    # 3 * 15 + 30 + 2 * 512 > 4 * 30 + 512: one call
    assert length_buckets([15, 30, 15, 15], max_batch=64, call_cost=512) == [[0, 2, 3, 1]]
    # equal lengths: the fewest calls of at most max_batch rows
    calls = length_buckets([10] * 10, max_batch=4, call_cost=512)
    assert len(calls) == 3 and max(map(len, calls)) <= 4 and sorted(sum(calls, [])) == list(range(10))
    assert length_buckets([], max_batch=4) == []
    with pytest.raises(ValueError, match="max_batch"):
        length_buckets([1], max_batch=0)


def test_a_long_prompt_gets_its_own_generate_call(micro_model_dir):
    """A prompt far longer than the rest is generated apart (its padding would widen every row),
    and its log-probs still match the forward pass."""
    server = _server(micro_model_dir, prompt_length=700, response_length=8)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    short = _prompt_ids(tok, "1+2=?")
    long = short * (600 // len(short))
    prompts = [short] * 8 + [long]
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def run_all():
        return await asyncio.gather(
            *[server.generate(p, dict(params), request_id=str(i)) for i, p in enumerate(prompts)]
        )

    outputs = asyncio.run(run_all())
    assert server.stats() == {"generate_calls": 2, "requests": 9}
    ref = _forward_logps(server.model, long, outputs[-1].token_ids)
    assert torch.allclose(torch.tensor(outputs[-1].log_probs), ref, atol=1e-4)


@pytest.mark.parametrize("engine", ["generate", "continuous"])
def test_weight_update_replaces_the_policy(micro_model_dir, engine):
    server = _server(micro_model_dir, prompt_length=64, response_length=8, max_batch=8, engine=engine)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    prompt = _prompt_ids(tok, "2+5=?")
    torch.manual_seed(1)
    other = Qwen2ForCausalLM(server.model.config).eval()  # different random weights, same shapes

    async def generate_update_generate():  # one event loop: the generate engine's batcher lives on it
        await server.generate(prompt, {"temperature": 1.0}, request_id="before")  # the engine is up
        # named_parameters() would drop the tied lm_head alias; the server takes the full state dict.
        assert server.update_weights_from_state_dict(other.state_dict(), global_steps=3) == len(other.state_dict())
        return await server.generate(prompt, {"temperature": 1.0, "logprobs": True}, request_id="a")

    out = asyncio.run(generate_update_generate())
    server.close()
    assert out.extra_fields["global_steps"] == 3
    assert torch.allclose(torch.tensor(out.log_probs), _forward_logps(other, prompt, out.token_ids), atol=1e-4)
    original = AutoModelForCausalLM.from_pretrained(micro_model_dir).eval()
    assert not torch.allclose(torch.tensor(out.log_probs), _forward_logps(original, prompt, out.token_ids), atol=1e-3)
    with pytest.raises(ValueError, match="not in the rollout model"):
        server.update_weights_from_state_dict({"no.such.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape"):
        server.update_weights_from_state_dict({"model.norm.weight": torch.zeros(3)})


# ---- the continuous engine (transformers' continuous batching) -----------------------------------
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def test_continuous_engine_gives_generate_engines_greedy_rows(micro_model_dir):
    """Prompts of different lengths arriving at different times, each with its own budget: the
    continuous engine returns, row for row, the greedy tokens of the padded `generate` engine, and
    log-probs equal to the unpadded forward pass of each sequence."""
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    short = [_prompt_ids(tok, q) for q in ("1+2=?", "9-3=?", "4+4=?")]
    prompts = [*short, short[0] + short[1] + short[2]]
    budgets = [3, 16, 9, 16]

    def serve(engine):
        server = _server(micro_model_dir, prompt_length=128, response_length=16, engine=engine)

        async def one(i):
            await asyncio.sleep(0.02 * i)
            return await server.generate(prompts[i], {**GREEDY, "max_tokens": budgets[i]}, request_id=str(i))

        async def run_all():
            return await asyncio.gather(*[one(i) for i in range(len(prompts))])

        outputs = asyncio.run(run_all())
        server.close()
        return server, outputs

    server, continuous = serve("continuous")
    _, padded = serve("generate")
    assert server.stats() == {"generate_calls": 0, "requests": 4}
    for prompt, budget, out, ref in zip(prompts, budgets, continuous, padded, strict=True):
        assert out.token_ids == ref.token_ids
        assert 1 <= len(out.token_ids) <= budget and len(out.log_probs) == len(out.token_ids)
        logps = _forward_logps(server.model, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.log_probs), logps, atol=1e-4), (out.log_probs, logps.tolist())


@pytest.mark.parametrize("engine", ["generate", "continuous"])
def test_a_late_request_joins_the_running_batch_only_on_the_continuous_engine(micro_model_dir, engine):
    """A 2-token request sent while a 200-token row decodes (after the generate engine's quiet gap,
    so it is not batched with it): the continuous engine admits it at the next decoding step and
    returns it long before the long row ends; the generate engine cannot start it until its running
    call has finished. (The EOS is set to an id the model never samples, so the long row runs its
    whole budget, which is all the micro model's positions allow.)"""
    server = _server(micro_model_dir, prompt_length=48, response_length=200, engine=engine)
    server.eos_ids = [server.model.config.vocab_size + 7]
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    prompt = _prompt_ids(tok, "1+2=?")
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}
    finished: list[str] = []

    async def request(name, budget, delay):
        await asyncio.sleep(delay)
        out = await server.generate(prompt, {**params, "max_tokens": budget}, request_id=name)
        finished.append(name)
        return out

    async def run_all():
        return await asyncio.gather(request("long", 200, 0.0), request("late", 2, 2 * hf_rollout.BATCH_QUIET_S))

    long, late = asyncio.run(run_all())
    server.close()
    assert len(long.token_ids) == 200 and len(late.token_ids) == 2
    assert finished == (["late", "long"] if engine == "continuous" else ["long", "late"])


def test_engine_settings_are_checked():
    assert HFEngineConfig.from_dict({"engine": "generate"}).engine == "generate"
    assert HFEngineConfig().engine == "generate"  # the engine the CPU records were made with
    with pytest.raises(ValueError, match="unknown key"):
        HFEngineConfig.from_dict({"engnie": "generate"})
    with pytest.raises(ValueError, match="cache_tokens"):
        HFEngineConfig(cache_tokens=0)
