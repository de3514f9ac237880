"""ExTra's verl side: `queue_prefixes` over a hand-built batch, with a hashing stand-in encoder.

The production path is `group_candidates` -> `PrefixMemory.add` -> `PrefixMemory.select` ->
`prefix.select_prefix`, the function tests/test_prefix.py checks by hand.
"""

import torch

from xrpo_verl.config import ExTraConfig, XRPOConfig
from xrpo_verl.verl_adapters.batch_view import BatchView
from xrpo_verl.verl_adapters.config import PluginSettings
from xrpo_verl.verl_adapters.prefixes import queue_prefixes
from xrpo_verl.verl_adapters.state import PluginState

NL, EOS = 10, 2


def _state(encoder, **prefix):
    extra = ExTraConfig.from_dict({"prefix": {"min_gap": 1, **prefix}})
    s = PluginSettings(xrpo=XRPOConfig(), extra=extra, adv_estimator="xrpo_extra", norm_adv_by_std=True, rollout_n=16)
    return PluginState(s, embedder_factory=lambda cfg: encoder), extra.prefix


def _view(responses, entropies, scores, uids, kinds):
    b, t = len(responses), max(map(len, responses))
    ent = torch.zeros(b, t)
    rm = torch.zeros(b, t)
    for i, (r, h) in enumerate(zip(responses, entropies)):
        ent[i, : len(h)] = torch.tensor(h)
        rm[i, len(r) - 1] = scores[i]
    return BatchView(
        uids=uids,
        keys=[f"key_{u}" for u in uids],
        kinds=kinds,
        raw_prompts=[None] * b,
        responses=[torch.tensor(r) for r in responses],
        prompts=[torch.tensor([7, 8]) for _ in responses],
        entropy=ent,
        mask=torch.ones(b, t),
        rm_scores=rm,
        old_log_probs=torch.zeros(b, t),
        valid=torch.ones(b, dtype=torch.bool),
        acc=torch.tensor(scores, dtype=torch.float32),
    )


def _queue(view, state, cfg, source_rows, *, decode=lambda ids: " ".join(map(str, ids)), max_prefix_len=100):
    return queue_prefixes(
        view,
        cfg=cfg,
        state=state,
        source_rows=source_rows,
        newline_ids={NL},
        end_ids={EOS},
        decode=decode,
        max_prefix_len=max_prefix_len,
    )


def test_hard_group_queues_the_lowest_entropy_step_of_any_rollout(hash_encoder):
    """Pins issue 11 point 3: candidates come from every rollout of the group (the released code took
    one anchor's steps), trailing EOS is not a step, the last step is never a prefix (the released
    rule), and the selection is `select_prefix` over the memory."""
    state, cfg = _state(hash_encoder)
    responses = [
        [1, NL, 3, 3, NL, 4, NL, 8, EOS],  # steps end at 2, 5 and 7; the last is dropped
        [1, NL, 5, NL, 6, NL, 8, EOS],  # shares step 1; its own step 2 ends at 4
        [1, NL, 9, EOS],  # group u2: a success, not hard
    ]
    entropies = [[2.0] * 5 + [1.0] * 4, [2.0, 2.0, 0.1, 0.1] + [3.0] * 4, [1.0] * 4]
    view = _view(responses, entropies, [0.0, 0.0, 1.0], ["u1", "u1", "u2"], ["base", "round", "base"])
    rows = {"u1": {"reward_model": {"ground_truth": "5"}, "data_source": "d", "uid": "u1"}}
    got = _queue(view, state, cfg, rows)
    assert got.hard_prompts == 1 and got.queued == 1 and got.candidates == [3]
    gp = state.guided_queue.pop_many(1)[0]
    # MTE: [1, NL] 2.0; [1, NL, 3, 3, NL] 2.0; [1, NL, 5, NL] (2 + 2 + 0.1 + 0.1)/4 = 1.05, the argmin
    assert gp.prefix_ids == [1, NL, 5, NL] and gp.original_prompt_id == "key_u1"
    assert gp.source_row == {"reward_model": {"ground_truth": "5"}, "data_source": "d"}  # its own, uid dropped
    assert gp.prompt_ids == [7, 8]
    assert got.chosen_shortest == 0 and got.chosen_lowest_raw == 1 and got.tied == 0
    m = got.metrics()
    assert m["xrpo/prefix/candidates/mean"] == 3.0 and m["xrpo/guided/queued"] == 1.0


def test_prefixes_the_encoder_reads_alike_tie_without_counting_as_a_collapse(hash_encoder):
    """Distinct token ids that decode to one text get one embedding: the smoothing weighs them
    uniformly, every smoothed score is the mean, and the first candidate wins. That tie is by
    construction; `smoothing_tied` counts only ties over scores and texts that differ."""
    state, cfg = _state(hash_encoder)
    responses = [[1, NL, 3, 3, NL, 4, NL, 8, EOS], [1, NL, 5, NL, 6, NL, 8, EOS]]
    entropies = [[2.0] * 5 + [1.0] * 4, [2.0, 2.0, 0.1, 0.1] + [3.0] * 4]
    view = _view(responses, entropies, [0.0, 0.0], ["u1", "u1"], ["base", "round"])
    rows = {"u1": {"reward_model": {"ground_truth": "5"}, "data_source": "d"}}
    got = _queue(view, state, cfg, rows, decode=lambda ids: "one text")
    # raw MTEs 2.0, 2.0, 1.05 (as above), smoothed all (2 + 2 + 1.05) / 3: the first, [1, NL], wins
    assert state.guided_queue.pop_many(1)[0].prefix_ids == [1, NL]
    assert got.chosen_lowest_raw == 0 and got.tied == 0


def test_length_filter_and_guided_or_icl_rows_are_not_candidates(hash_encoder):
    state, cfg = _state(hash_encoder)
    responses = [[1, NL, 3, 3, NL, 4], [1, 1, 1, NL, 5, 5]]
    view = _view(responses, [[1.0] * 6, [0.0] * 6], [0.0, 0.0], ["u1", "u1"], ["base", "icl"])
    rows = {"u1": {"reward_model": {"ground_truth": "1"}, "data_source": "d"}}
    got = _queue(view, state, cfg, rows, decode=str, max_prefix_len=3)
    # the icl row's lower entropies are conditioned on its examples: not a candidate; 5 > max_prefix_len
    assert got.candidates == [1] and state.guided_queue.pop_many(1)[0].prefix_ids == [1, NL]


class _CountingEncoder:
    """The hashing stand-in, counting calls and texts."""

    def __init__(self, inner):
        self.inner, self.calls, self.texts = inner, 0, 0

    def encode(self, texts):
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode(texts)


def test_one_encoder_call_a_step_for_every_hard_prompt_and_only_the_candidates_the_ring_keeps(hash_encoder):
    enc = _CountingEncoder(hash_encoder)
    state, cfg = _state(enc, max_prefixes_per_prompt=2)
    responses = [[1, NL, 2, NL, 3, NL, 4, EOS], [5, NL, 6, NL, 7, NL, 8, EOS], [9, NL, 9, EOS]]
    view = _view(responses, [[1.0] * 8, [1.0] * 8, [1.0] * 4], [0.0, 0.0, 0.0], ["u1", "u2", "u3"], ["base"] * 3)
    rows = {u: {"reward_model": {"ground_truth": "0"}, "data_source": "d"} for u in ("u1", "u2", "u3")}
    got = _queue(view, state, cfg, rows)
    assert got.hard_prompts == 3 and got.queued == 3
    assert enc.calls == 1  # three hard prompts, one call
    # u1 and u2 have 2 candidates each ([.., NL] at 2 and 4), u3 one: every one fits a ring of 2
    assert enc.texts == 5 and got.candidates == [2, 2, 1]
    state2, cfg2 = _state(_CountingEncoder(hash_encoder), max_prefixes_per_prompt=1)
    enc2 = state2.extra_embedder()
    assert _queue(view, state2, cfg2, rows).candidates == [1, 1, 1]  # the newest candidate of each, no more
    assert state2.prefix_memory.entries("key_u1")[0].prefix_ids == [1, NL, 2, NL]
    del enc2


def test_the_prefix_memory_holds_at_most_memory_prompts_the_least_recently_hard_out(hash_encoder):
    state, cfg = _state(hash_encoder, memory_prompts=2)
    rows = {f"u{i}": {"reward_model": {"ground_truth": "0"}, "data_source": "d"} for i in range(3)}
    for i in range(3):
        view = _view([[1, NL, i + 2, NL, 3, EOS]], [[1.0] * 6], [0.0], [f"u{i}"], ["base"])
        got = _queue(view, state, cfg, rows)
    assert len(state.prefix_memory) == 2 and got.memory_prompts == 2 and got.evicted_prompts == 1
    assert state.prefix_memory.entries("key_u0") == []  # hard first, dropped first
    assert got.memory_mb > 0 and got.metrics()["xrpo/prefix/memory/evicted_prompts"] == 1.0


def test_only_the_tail_the_encoder_sees_is_decoded(hash_encoder):
    state, cfg = _state(hash_encoder, embed_tail_tokens=3)
    decoded = []

    def decode(ids):
        decoded.append(list(ids))
        return " ".join(map(str, ids))

    responses = [[1, 2, 3, 4, NL, 5, NL, 6, EOS]]
    view = _view(responses, [[1.0] * 9], [0.0], ["u1"], ["base"])
    rows = {"u1": {"reward_model": {"ground_truth": "0"}, "data_source": "d"}}
    got = _queue(view, state, cfg, rows, decode=decode)
    assert got.queued == 1
    # one candidate (the step ending at 5; the last step is never a prefix): its last 3 tokens only
    assert decoded == [[3, 4, NL]]
    assert state.guided_queue.pop_many(1)[0].prefix_ids == [1, 2, 3, 4, NL]  # the guided prefix stays whole


def test_carried_counts_the_entries_of_earlier_steps_the_selection_still_ran_over(hash_encoder):
    """A prompt hard twice with 2 candidates a visit: a ring of 3 carries 1 entry of the first visit
    into the second's selection, a ring of 2 carries none (the second visit refills it)."""
    rows = {"u": {"reward_model": {"ground_truth": "0"}, "data_source": "d"}}
    for capacity, carried in ((3, 1.0), (2, 0.0)):
        state, cfg = _state(hash_encoder, max_prefixes_per_prompt=capacity)
        for visit in range(2):
            view = _view([[1, NL, visit + 2, NL, 3, NL, 4, EOS]], [[1.0] * 8], [0.0], ["u"], ["base"])
            got = _queue(view, state, cfg, rows)
        assert got.candidates == [2] and got.memory == [min(capacity, 4)]
        assert got.metrics()["xrpo/prefix/memory/carried/mean"] == carried
