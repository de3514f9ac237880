"""Trainer helpers that decide whether ICL can trigger and what the prefix metrics report.

Regression: with the CPU tiny model the rendered ICL prompt (~150 tokens for K=2) never fit the
64-token prompt cap, so every all-fail prompt fell back to zero-shot and `xrpo/icl/triggers` stayed 0.
"""

import torch

from xrpo_verl.icl import ICLExample, render_icl_prompt
from xrpo_verl.local.tiny_model import TinyModelConfig, build_tokenizer
from xrpo_verl.verl_adapters.batch_view import BatchView, prefix_mask_metrics
from xrpo_verl.verl_adapters.trainer import icl_token_budget


def _tok():
    return build_tokenizer(TinyModelConfig())


def test_icl_budget_is_the_rollout_cap_minus_the_chat_template():
    tok = _tok()
    messages = [{"role": "user", "content": "57+88=?"}]
    count = lambda t: len(tok.encode(t, add_special_tokens=False))
    templated = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    overhead = count(templated) - count("57+88=?")
    assert overhead > 0
    budget = icl_token_budget(tok, messages, "57+88=?", count, 192)
    assert budget == 192 - overhead
    # the rendered user turn within that budget, once templated, fits the rollout's cap exactly or below
    ex = [ICLExample("a", "3+4=?", "3+4\n=7\n\\boxed{7}", 1, 9), ICLExample("b", "5-2=?", "5-2\n=3\n\\boxed{3}", 1, 9)]
    text = render_icl_prompt(ex, "57+88=?", count_tokens=count, max_example_tokens=16, max_prompt_tokens=budget).text
    assert text != "57+88=?"
    user = [{"role": "user", "content": text}]
    assert count(tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)) <= 192
    # ...while the old cap of 64 tokens cannot hold even one example: zero-shot, no trigger
    assert (
        render_icl_prompt(
            ex,
            "57+88=?",
            count_tokens=count,
            max_example_tokens=16,
            max_prompt_tokens=icl_token_budget(tok, messages, "57+88=?", count, 64),
        ).text
        == "57+88=?"
    )


def _view(resp_lens, masks, kinds):
    T = max(resp_lens)
    mask = torch.zeros(len(resp_lens), T)
    for i, m in enumerate(masks):
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    B = len(resp_lens)
    return BatchView(
        uids=[str(i) for i in range(B)],
        keys=["k"] * B,
        kinds=kinds,
        raw_prompts=[None] * B,
        responses=[torch.arange(n) for n in resp_lens],
        prompts=None,
        entropy=None,
        mask=mask,
        rm_scores=torch.zeros(B, T),
        old_log_probs=torch.zeros(B, T),
        valid=torch.tensor([True, True, True, False]),
    )


def test_prefix_mask_metrics_count_masked_response_tokens_per_kind():
    view = _view(
        [5, 4, 6, 3],
        [[0, 0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0]],
        ["guided", "base", "guided", "guided"],
    )  # the last row is verl padding: ignored
    m = prefix_mask_metrics(view)
    assert m == {
        "xrpo/prefix/guided_rows": 2.0,
        "xrpo/prefix/guided_rows_masked": 2.0,
        "xrpo/prefix/masked_prefix_tokens": 5.0,
        "xrpo/prefix/masked_tokens_other_rows": 0.0,
    }
    unmasked = _view([5, 4, 6, 3], [[1] * 5, [1, 1, 1, 0], [1] * 6, [1] * 3], ["guided", "base", "guided", "base"])
    m = prefix_mask_metrics(unmasked)
    assert m["xrpo/prefix/guided_rows_masked"] == 0.0 and m["xrpo/prefix/masked_tokens_other_rows"] == 1.0


def test_rollout_correction_weights_for_our_estimators_are_verls():
    """Pins issue 11 point 7: our estimators replace verl's `_compute_advantage`, which is where verl
    computes the rollout-correction IS weights and rejection mask; the old code skipped them silently.
    `apply_rollout_correction` is what `_xrpo_write_advantages` runs; token IS weights are
    exp(old - rollout) truncated at the threshold, 0 outside the mask."""
    from omegaconf import OmegaConf

    from xrpo_verl.verl_adapters.trainer import apply_rollout_correction

    cfg = OmegaConf.create({"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": None})
    old = torch.tensor([[-1.0, -2.0, -1.0], [-0.5, -0.5, -3.0]])
    rollout = torch.tensor([[-1.5, -1.0, -1.0], [-0.5, -2.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w, new_mask, metrics = apply_rollout_correction(cfg, old, rollout, mask)
    want = torch.clamp(torch.exp(old - rollout), max=2.0) * mask
    assert torch.allclose(w * mask, want, atol=1e-6)
    assert torch.equal(new_mask, mask) and "rollout_corr/rollout_is_mean" in metrics
    off, _, _ = apply_rollout_correction(OmegaConf.create({"rollout_is": None}), old, rollout, mask)
    assert off is None  # verl's default: metrics only, no weights


def test_reward_infos_read_from_transfer_queue_rows(monkeypatch):
    """The trainer reads reward_extra_info where verl's agent loop stores it: TransferQueue's
    `extra_fields` column, built by verl's own list_of_dict_to_tensordict (TQ itself is replaced
    by a dict lookup; the e2e test in tests/e2e/test_code_rl.py reads the real one)."""
    from types import SimpleNamespace

    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from xrpo_verl.verl_adapters import trainer as trainer_module

    infos = [
        {"verdict": "AC", "attempts": 1, "sandbox_s": 0.5, "sandbox_start": 1.0, "sandbox_end": 1.5},
        {"verdict": "WA", "attempts": 2, "sandbox_s": 0.5, "sandbox_start": 1.25, "sandbox_end": 2.0},
        {"verdict": "", "attempts": 0, "sandbox_s": 0.0, "sandbox_start": 0.0, "sandbox_end": 0.0},
    ]
    rows = [{"extra_fields": {"reward_extra_info": info, "min_global_steps": 1}} for info in infos]
    stored = list_of_dict_to_tensordict(rows)

    def kv_batch_get(keys, partition_id, select_fields):
        assert select_fields == ["extra_fields"] and partition_id == "train" and keys == ["a", "b", "c"]
        return stored

    monkeypatch.setattr(trainer_module.tq, "kv_batch_get", kv_batch_get)
    batch = SimpleNamespace(keys=["a", "b", "c"], partition_id="train", tags=[{}, {}, {"is_padding": True}])
    got = trainer_module.XrpoTrainer._reward_infos(batch)
    assert got == infos[:2]  # the padding row is left out
