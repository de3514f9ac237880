"""Fast checks of xrpo_verl.local: the hf server, the CPU switch, the shims' targets, data, model."""

import asyncio
import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

from xrpo_verl.local import arith, tiny_model
from xrpo_verl.local.hf_rollout import HFServer, SamplingSettings, max_new_tokens, trim_response


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


def _forward_logps(model, prompt, response):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0]
    logps = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), -1)
    return logps.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def test_batched_generate_returns_forward_pass_logprobs(micro_model_dir):
    """Concurrent requests of different prompt lengths share one left-padded generate call, and
    each returned log-prob equals the unpadded forward pass of that sequence (T=1, no warpers)."""
    server = HFServer(str(micro_model_dir), prompt_length=64, response_length=12, max_model_len=76, max_batch=64)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    prompts = [_prompt_ids(tok, q) for q in ("1+2=?", "9-3=?", "4+4=?")]
    prompts.append(prompts[0] + prompts[1])  # a longer prompt forces left padding
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def run_all():
        return await asyncio.gather(*[server.generate(p, dict(params), request_id=str(i)) for i, p in enumerate(prompts)])

    torch.manual_seed(0)
    outputs = asyncio.run(run_all())
    assert server.stats() == {"generate_calls": 1, "requests": 4}
    for prompt, out in zip(prompts, outputs, strict=True):
        assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
        ref = _forward_logps(server.model, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.log_probs), ref, atol=1e-4), (out.log_probs, ref.tolist())


def test_weight_update_replaces_the_policy(micro_model_dir):
    server = HFServer(str(micro_model_dir), prompt_length=64, response_length=8, max_model_len=72, max_batch=8)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    prompt = _prompt_ids(tok, "2+5=?")
    torch.manual_seed(1)
    other = Qwen2ForCausalLM(server.model.config).eval()  # different random weights, same shapes
    # named_parameters() would drop the tied lm_head alias; the server takes the full state dict.
    assert server.update_weights_from_state_dict(other.state_dict(), global_steps=3) == len(other.state_dict())
    out = asyncio.run(server.generate(prompt, {"temperature": 1.0, "logprobs": True}, request_id="a"))
    assert out.extra_fields["global_steps"] == 3
    assert torch.allclose(torch.tensor(out.log_probs), _forward_logps(other, prompt, out.token_ids), atol=1e-4)
    original = AutoModelForCausalLM.from_pretrained(micro_model_dir).eval()
    assert not torch.allclose(torch.tensor(out.log_probs), _forward_logps(original, prompt, out.token_ids), atol=1e-3)
    with pytest.raises(ValueError, match="not in the rollout model"):
        server.update_weights_from_state_dict({"no.such.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape"):
        server.update_weights_from_state_dict({"model.norm.weight": torch.zeros(3)})


# ---- the CPU switch ----------------------------------------------------------------------------
_PROBE = """
import json, verl
from verl.plugin.platform import PlatformRegistry
from verl.workers.rollout.base import _ROLLOUT_REGISTRY
from verl.workers.rollout.replica import RolloutReplicaRegistry
import verl.utils.distributed as d
print(json.dumps({"cpu_platform": "cpu" in PlatformRegistry.registered_names(),
                  "hf_replica": "hf" in RolloutReplicaRegistry._registry,
                  "hf_adapter": ("hf", "async") in _ROLLOUT_REGISTRY,
                  "gloo_patch": getattr(d.initialize_global_process_group_ray, "_xrpo_cpu", False)}))
"""


@pytest.mark.parametrize("switch,expected", [("0", False), ("1", True)])
def test_cpu_switch_controls_every_registration(switch, expected):
    """Off: `import verl` (which loads our entry point) leaves verl untouched. On: all in place."""
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_USE_EXTERNAL_MODULES")}
    env["XRPO_VERL_CPU"] = switch
    if switch == "1":  # as launch.cpu_env does: independent of the other plugin modules importing
        env["VERL_USE_EXTERNAL_MODULES"] = "xrpo_verl.local.register"
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    flags = json.loads(out.stdout.strip().splitlines()[-1])
    assert flags == {k: expected for k in flags}


def test_cpu_switch_rejects_unknown_values(monkeypatch):
    from xrpo_verl.local import register

    monkeypatch.setenv("XRPO_VERL_CPU", "yes")
    with pytest.raises(ValueError, match="XRPO_VERL_CPU='yes'"):
        register.cpu_enabled()


def test_shim_targets_exist_in_installed_verl():
    """Each shim patches a verl 0.9.1 internal by name; fail loudly if one moved."""
    import verl
    import verl.utils.distributed as dist_utils
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.utils.import_utils as import_utils
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    assert verl.__version__ == "0.9.1"
    assert callable(dist_utils.initialize_global_process_group_ray)
    assert fsdp_utils.CPUOffloadPolicy is not None and transformer_impl.CPUOffloadPolicy is not None
    assert callable(import_utils.is_trl_available)
    assert callable(ReplayBuffer._wait_for_next_poll)
    assert ("cuda", "nvidia") in EngineRegistry._engines["language_model"]["fsdp2"] or "cuda" in EngineRegistry._engines["language_model"]["fsdp2"]


def test_cpu_device_module_reports_a_string_name_and_rejects_unknown_calls():
    from xrpo_verl.local.shims import CpuDeviceModule

    dev = CpuDeviceModule()
    assert dev.get_device_name() == "CPU"  # flops_counter does `key in device_name`
    assert dev.is_available() and dev.device_count() == 1
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    state = dev.get_rng_state()
    a = torch.rand(3)
    dev.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    with pytest.raises(AttributeError, match="no_such_call"):
        dev.no_such_call()


# ---- data and model ----------------------------------------------------------------------------
def test_arith_rows_and_score():
    problems = arith.sample_problems(50, seed=3)
    assert problems == arith.sample_problems(50, seed=3)
    assert all(0 <= p.a <= 12 and 0 <= p.b <= 12 and p.op in "+-" for p in problems)
    assert arith.Problem(7, "-", 9).answer == -2 and arith.Problem(7, "+", 9).question == "7+9=?"
    row = arith.verl_rows([arith.Problem(3, "+", 4)], "train")[0]
    assert row["prompt"] == [{"role": "user", "content": "3+4=?"}] and row["reward_model"]["ground_truth"] == "7"
    score = arith.compute_score
    assert score("xrpo_arith", "\\boxed{7}", "7")["score"] == 1.0
    assert score("xrpo_arith", "\\boxed{5} then \\boxed{-2}", "-2")["score"] == 1.0  # the last box counts
    assert score("xrpo_arith", "7", "7") == {"score": 0.0, "acc": 0.0, "formatted": 0.0}
    assert score("xrpo_arith", "\\boxed{x}", "7")["score"] == 0.0
    with pytest.raises(ValueError, match="integer"):
        score("xrpo_arith", "\\boxed{7}", "seven")
    with pytest.raises(ValueError, match="max_operand"):
        arith.ArithConfig(max_operand=0)
    with pytest.raises(ValueError, match="ops"):
        arith.ArithConfig(ops=("*",))


def test_mixed_problems_put_a_hard_one_at_every_kth_row(tmp_path):
    mixed = arith.mixed_problems(40, seed=5, hard_every=2)
    assert mixed == arith.mixed_problems(40, seed=5, hard_every=2)
    easy, hard = mixed[0::2], mixed[1::2]
    assert all(max(p.a, p.b) <= 12 for p in easy)
    assert all(max(p.a, p.b) <= 99 for p in hard) and max(max(p.a, p.b) for p in hard) > 12
    import pandas as pd

    rows = pd.read_parquet(arith.write_parquet(tmp_path / "m.parquet", 40, seed=5, split="train", hard_every=2))
    assert [r[0]["content"] for r in rows["prompt"]] == [p.question for p in mixed]
    with pytest.raises(ValueError, match="hard_every"):
        arith.mixed_problems(4, seed=5, hard_every=0)


def test_tiny_model_build_is_deterministic_and_cached(tmp_path):
    config = tiny_model.TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, sft_steps=3, sft_batch_size=4)
    dirs = [tiny_model.build(config, root=tmp_path / name, verbose=False) for name in ("a", "b")]
    digests = [hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest() for d in dirs]
    assert digests[0] == digests[1]
    assert (dirs[0] / "tokenizer.json").read_text() == (dirs[1] / "tokenizer.json").read_text()
    marker = dirs[0] / tiny_model.DONE_MARKER
    mtime = marker.stat().st_mtime_ns
    assert tiny_model.build(config, root=tmp_path / "a", verbose=False) == dirs[0]  # cache hit: no rebuild
    assert marker.stat().st_mtime_ns == mtime
    tok = AutoTokenizer.from_pretrained(dirs[0])
    tokens = tok.tokenize("12+7=?")
    assert tokens[:2] == ["1", "2"]  # digits are single tokens
    text = tok.apply_chat_template([{"role": "user", "content": "1+1=?"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\n1+1=?<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="num_heads"):
        tiny_model.TinyModelConfig(hidden_size=30, num_heads=4)


def test_default_tiny_model_has_about_5m_parameters():
    config = tiny_model.TinyModelConfig(sft_steps=0)
    model = tiny_model.build_model(config, tiny_model.build_tokenizer(config))
    assert 4.5e6 < sum(p.numel() for p in model.parameters()) < 5.5e6
