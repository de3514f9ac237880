"""Length order inside mini-batches (`micro_batches.py`): the permutation, and the padding it saves."""

import random

import pytest

from xrpo_verl.verl_adapters.micro_batches import (
    MICRO_BATCHES_ENV,
    cut_by_padding,
    padded_cuts,
    padded_positions,
    padding_share,
    sorted_within_blocks,
)


def test_sorted_within_blocks_by_hand():
    # two mini-batches of 4: [9, 3, 3, 1] and [2, 8, 5, 7]; ties keep their order
    assert sorted_within_blocks([9, 3, 3, 1, 2, 8, 5, 7], 4) == [3, 1, 2, 0, 4, 6, 7, 5]


def test_every_block_keeps_its_rows_and_is_sorted():
    rng = random.Random(0)
    lengths = [rng.randint(1, 300) for _ in range(96)]
    order = sorted_within_blocks(lengths, 32)
    assert sorted(order) == list(range(96))
    for start in range(0, 96, 32):
        block = order[start : start + 32]
        assert set(block) == set(range(start, start + 32))  # the mini-batch's rows, so its gradient
        assert [lengths[i] for i in block] == sorted(lengths[start : start + 32])


def test_rows_not_divisible_into_blocks_is_an_error():
    with pytest.raises(ValueError, match="blocks of 4"):
        sorted_within_blocks([1, 2, 3], 4)
    with pytest.raises(ValueError):
        sorted_within_blocks([1, 2], 0)


def test_padded_positions_by_hand():
    # micro-batches [5, 1] and [2, 2] pad to 5 and 2: 2*5 + 2*2
    assert padded_positions([5, 1, 2, 2], 2) == 14
    assert padded_positions([5, 1, 2], 2) == 10 + 2  # a short last micro-batch
    assert padding_share([5, 1, 2, 2], 2) == pytest.approx(1 - 10 / 14)
    assert padding_share([], 4) == 0.0


def test_one_long_row_pads_its_micro_batch_only_once_sorted():
    """An XRPO step's shape: 63 rows of ~90 tokens and one ICL row of 280, micro-batches of 8."""
    lengths = [90] * 63
    lengths.insert(5, 280)
    unsorted = padded_positions(lengths, 8)
    order = sorted_within_blocks(lengths, 64)
    ordered = padded_positions([lengths[i] for i in order], 8)
    assert unsorted == 7 * 8 * 90 + 8 * 280  # the long row sits in the first micro-batch either way
    assert ordered == unsorted  # one long row: the same cost, now in the last micro-batch
    # with one micro-batch for the whole step (the old CPU setting) every row pays for it
    assert padded_positions(lengths, 64) == 64 * 280
    # eight long rows (an ICL group) scattered one per micro-batch pad everything; sorted, one
    scattered = [280 if i % 8 == 0 else 90 for i in range(64)]
    order = sorted_within_blocks(scattered, 64)
    assert padded_positions(scattered, 8) == 64 * 280
    assert padded_positions([scattered[i] for i in order], 8) == 7 * 8 * 90 + 8 * 280


def _response_logps(model, rows, width):
    """Per-token log-probs of each row's response, the rows right-padded to `width` (B, T_resp)."""
    import torch
    from verl.utils.torch_functional import logprobs_from_logits

    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, (prompt, response, _) in enumerate(rows):
        seq = prompt + response
        ids[b, : len(seq)] = torch.tensor(seq)
        mask[b, : len(seq)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits  # (B, W, V)
    t_resp = max(len(r[1]) for r in rows)
    out = torch.zeros(len(rows), t_resp)
    resp_mask = torch.zeros(len(rows), t_resp)
    for b, (prompt, response, _) in enumerate(rows):
        p, n = len(prompt), len(response)
        out[b, :n] = logprobs_from_logits(logits[b, p - 1 : p + n - 1], ids[b, p : p + n])
        resp_mask[b, :n] = 1
    return out, resp_mask


def _accumulated_grad(model, rows, micro, batch_num_tokens, cuts=None):
    """verl's accumulation: each micro-batch (`micro` rows, or the given `cuts`) padded to its own
    width, its token-mean loss divided by `batch_num_tokens` (engine: the mini-batch's), one
    backward per micro-batch."""
    import torch
    from verl.trainer.ppo.core_algos import agg_loss

    model.zero_grad()
    for cut in cuts or [range(start, min(start + micro, len(rows))) for start in range(0, len(rows), micro)]:
        chunk = rows[cut.start : cut.stop]
        logp, resp_mask = _response_logps(model, chunk, max(len(p) + len(r) for p, r, _ in chunk))
        adv = torch.tensor([a for _, _, a in chunk]).unsqueeze(-1)
        tokens = int(resp_mask.sum()) if batch_num_tokens is None else batch_num_tokens
        loss = agg_loss(loss_mat=-adv * logp, loss_mask=resp_mask, loss_agg_mode="token-mean", batch_num_tokens=tokens)
        loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_sorted_micro_batches_give_the_one_micro_batch_gradient():
    """A step's shape (short rows and a few long ICL-like rows) on a small Qwen2: the policy gradient
    with one padded micro-batch equals the one accumulated over length-sorted micro-batches of 4,
    each padded to its own width, under verl's token-mean divided by the mini-batch's tokens."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    model = Qwen2ForCausalLM(cfg).double()
    rng = random.Random(1)
    rows = []
    for i in range(16):
        prompt_len = 40 if i % 5 == 2 else rng.randint(4, 8)  # rows 2, 7, 12: the long prompts
        rows.append(
            (
                [rng.randrange(1, 64) for _ in range(prompt_len)],
                [rng.randrange(1, 64) for _ in range(rng.randint(3, 9))],
                rng.uniform(-1, 1),
            )
        )
    total = sum(len(r) for _, r, _ in rows)
    torch.set_default_dtype(torch.float64)
    try:
        one = _accumulated_grad(model, rows, micro=16, batch_num_tokens=total)
        order = sorted_within_blocks([len(p) + len(r) for p, r, _ in rows], 16)
        sorted_rows = [rows[i] for i in order]
        many = _accumulated_grad(model, sorted_rows, micro=4, batch_num_tokens=total)
        widths = [len(p) + len(r) for p, r, _ in sorted_rows]
        cuts = padded_cuts(widths, max_rows=8, call_cost=16)
        by_padding = _accumulated_grad(model, sorted_rows, micro=8, batch_num_tokens=total, cuts=cuts)
        # dividing by each micro-batch's own tokens (not verl's rule) would weight rows unequally
        wrong = _accumulated_grad(model, sorted_rows, micro=4, batch_num_tokens=None)
    finally:
        torch.set_default_dtype(torch.float32)
    assert torch.allclose(many, one, rtol=1e-9, atol=1e-12)
    assert torch.allclose(by_padding, one, rtol=1e-9, atol=1e-12)
    assert not torch.allclose(wrong, one, rtol=1e-3, atol=1e-6)
    assert padded_positions(widths, 4) < padded_positions(widths, 16)  # and it pads less
    # the three long rows (prompts of 40) get a micro-batch of their own
    assert len(cuts[-1]) == 3 and min(widths[i] for i in cuts[-1]) > max(widths[i] for i in range(cuts[-1].start))


# ---- micro-batches cut by padded positions ---------------------------------------------------------
def _cost(lengths, cuts, call_cost):
    return sum(len(c) * max(lengths[i] for i in c) + call_cost for c in cuts)


def test_padded_cuts_by_hand():
    # 14 short rows and 2 ICL rows, sorted: fixed micro-batches of 16 pad all to 230 (3680 + 128);
    # two micro-batches cost 14 * 16 + 2 * 230 + 2 * 128 = 940
    lengths = [16] * 14 + [230] * 2
    assert padded_cuts(lengths, max_rows=16, call_cost=128) == [range(0, 14), range(14, 16)]
    # equal lengths: the fewest micro-batches of at most max_rows
    assert padded_cuts([60] * 64, max_rows=16, call_cost=128) == [range(s, s + 16) for s in range(0, 64, 16)]
    # a call dearer than the padding it saves: one micro-batch
    assert padded_cuts([10, 12, 14], max_rows=16, call_cost=128) == [range(0, 3)]
    assert padded_cuts([], max_rows=4) == []
    with pytest.raises(ValueError, match="max_rows"):
        padded_cuts([1], max_rows=0)


def test_padded_cuts_never_cost_more_than_fixed_ones_and_keep_every_row_once():
    rng = random.Random(3)
    for _ in range(200):
        n, cap = rng.randint(1, 70), rng.randint(1, 16)
        lengths = sorted(rng.choice([rng.randint(20, 90), rng.randint(150, 260)]) for _ in range(n))
        cuts = padded_cuts(lengths, max_rows=cap, call_cost=128)
        assert [i for c in cuts for i in c] == list(range(n))  # consecutive, in order, each row once
        assert all(1 <= len(c) <= cap for c in cuts)
        fixed = [range(s, min(s + cap, n)) for s in range(0, n, cap)]
        assert _cost(lengths, cuts, 128) <= _cost(lengths, fixed, 128)


def _engine_batch(lengths, micro, dynamic=False):
    """A mini-batch as verl's FSDP engine receives it: nested input ids, the micro-batch size."""
    import torch
    from verl.utils import tensordict_utils as tu

    rows = [torch.arange(1, n + 1) for n in lengths]
    data = tu.get_tensordict(
        {"input_ids": tu.nested_tensor_from_tensor_list(rows), "row": torch.arange(len(lengths))},
        non_tensor_dict={"use_dynamic_bsz": dynamic, "micro_batch_size_per_gpu": micro, "max_token_len_per_gpu": 4096},
    )
    return data


def test_verls_prepare_micro_batches_cut_by_padding(monkeypatch):
    """verl's own `prepare_micro_batches`, wrapped: a sorted mini-batch with two long rows is cut
    apart from its short rows, the rows stay in order (outputs concatenate back, no indices);
    dynamic batch sizes and XRPO_MICRO_BATCHES=fixed keep verl's cut."""
    from verl.workers.engine.utils import prepare_micro_batches

    lengths = [20] * 14 + [230] * 2
    prepare = cut_by_padding(prepare_micro_batches)
    micro_batches, indices = prepare(_engine_batch(lengths, micro=16))
    assert indices is None
    assert [mb["row"].tolist() for mb in micro_batches] == [list(range(14)), [14, 15]]
    assert [mb["input_ids"].offsets().diff().tolist() for mb in micro_batches] == [[20] * 14, [230, 230]]
    # verl's fixed cut: one micro-batch of 16 padded rows
    monkeypatch.setenv(MICRO_BATCHES_ENV, "fixed")
    fixed, _ = prepare(_engine_batch(lengths, micro=16))
    assert [mb["row"].tolist() for mb in fixed] == [list(range(16))]
    monkeypatch.delenv(MICRO_BATCHES_ENV)
    dynamic, dyn_indices = prepare(_engine_batch(lengths, micro=16, dynamic=True))
    assert dyn_indices is not None  # verl's balanced partition, with its indices to restore order
    assert sorted(i for mb in dynamic for i in mb["row"].tolist()) == list(range(16))
