"""ExTra prefix selection: hand-built token/entropy arrays, smoothing, memory and guided queue."""

import pickle

import numpy as np
import pytest

from xrpo_verl import prefix as prefix_lib
from xrpo_verl.prefix import (
    GuidedPrompt,
    GuidedQueue,
    PrefixMemory,
    group_candidates,
    is_hard,
    prefix_mean_entropies,
    select_prefix,
    smoothed_scores,
    step_boundaries,
)

NL = 10  # newline token id


def test_is_hard_thresholds():
    """Pins issue 11 point 4: the default is the paper's hard prompt (no correct rollout); the released
    code's pass rate <= 1/n is an option."""
    assert is_hard([0, 0, 0]) and not is_hard([0, 1, 0])
    assert is_hard([0, 0, 0], "all_fail") and not is_hard([0, 1, 0], "all_fail")
    assert is_hard([0, 1, 0], "at_most_one") and not is_hard([1, 1, 0], "at_most_one")
    assert is_hard([-1, -1], "all_fail")  # DAPO +-1 rewards
    assert is_hard([0.5, 0.2], "all_fail", success_cutoff=0.9)


def _lines(T, newline_at):
    ids = [1] * T
    for p in newline_at:
        ids[p] = NL
    return ids


def test_step_boundaries_follow_the_released_rules():
    """Released _update_prefix_memory: (a) the first newline boundary is always kept, (b) a later one
    only >= min_gap after the last kept, (c) the last kept one is dropped when more than one was kept."""
    ids = _lines(100, (4, 9, 40, 50, 80, 99))  # boundaries just after: 5, 10, 41, 51, 81, 100
    # (a) 5 kept although < 32 from 0; (b) 10, 51, 100 too close; (c) 81, the last kept, dropped
    assert step_boundaries(ids, {NL}, min_gap=32) == [5, 41]
    assert step_boundaries(ids, {NL}, min_gap=5) == [5, 10, 41, 51, 81]
    # (c) the last kept boundary goes whether or not the response ends on it
    assert step_boundaries([1, NL, 1, NL, 1], {NL}, min_gap=1) == [2]
    assert step_boundaries([1, NL, 1, NL], {NL}, min_gap=1) == [2]
    # a lone boundary is kept when a suffix remains, at any distance from 0
    assert step_boundaries([1, NL, 1], {NL}, min_gap=32) == [2]
    assert step_boundaries([1, 2, 3], {NL}) == []


def test_a_lone_boundary_at_the_end_is_dropped():
    """Deviation [I]: the released code keeps a lone boundary at T, a 'prefix' that is the whole response."""
    assert step_boundaries([1, 1, NL], {NL}, min_gap=1) == []
    assert step_boundaries(_lines(50, (49,)), {NL}) == []
    assert step_boundaries(_lines(50, (10, 49)), {NL}) == [11]  # more than one: rule (c) drops 50


def test_thinning_takes_floor_i_n_over_k():
    """(d) n > K boundaries: keep b[floor(i n / K)], i < K (the released int(i * n / 15));
    round(linspace(0, n-1, K)) would end on 156."""
    many = ([1] * 3 + [NL]) * 40  # boundaries 4, 8, ..., 160; 160 is the last kept: 39 left
    want = [4 * (i * 39 // 15 + 1) for i in range(15)]
    assert want == [4, 12, 24, 32, 44, 56, 64, 76, 84, 96, 108, 116, 128, 136, 148]
    assert step_boundaries(many, {NL}, min_gap=4, max_candidates=15) == want


def test_the_length_cap_runs_before_thinning_and_is_off_at_frac_one():
    """Deviation [I]: boundaries past max_len go before thinning, so the 20 short ones (4..80) are
    thinned to 15 rather than keeping the 8 of the released 15 that are short. max_len >= T
    (max_prefix_frac = 1.0) gives the released boundaries."""
    many = ([1] * 3 + [NL]) * 40
    assert step_boundaries(many, {NL}, min_gap=4, max_len=80) == [
        4, 8, 12, 20, 24, 28, 36, 40, 44, 52, 56, 60, 68, 72, 76,
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    for _ in range(200):
        T = int(rng.integers(2, 400))
        ids = np.where(rng.random(T) < 0.05, NL, 1).tolist()
        assert step_boundaries(ids, {NL}, min_gap=8, max_len=T) == step_boundaries(ids, {NL}, min_gap=8)
    ids = _lines(100, (4, 9, 40, 50, 80, 99))
    assert step_boundaries(ids, {NL}, min_gap=32, max_len=100) == [5, 41]
    assert step_boundaries(ids, {NL}, min_gap=5, max_len=45) == [5, 10, 41]


def test_prefix_mean_entropies_by_hand():
    h = np.array([1.0, 3.0, 2.0, 0.0, 4.0])
    assert np.allclose(prefix_mean_entropies(h, [1, 2, 4]), [1.0, 2.0, 1.5])


def test_smoothing_identical_embeddings_gives_uniform_mean_and_orthogonal_keeps_scores():
    s = np.array([1.0, 2.0, 6.0])
    same = np.tile(np.array([[0.6, 0.8]]), (3, 1))
    assert np.allclose(smoothed_scores(s, same, 0.1), 3.0)
    eye = np.eye(3)
    # orthogonal: weights e^{10} vs e^{0}; nearly the raw scores
    w_self = np.exp(10) / (np.exp(10) + 2)
    assert np.allclose(smoothed_scores(s, eye, 0.1), w_self * s + (1 - w_self) / 2 * (s.sum() - s))


def test_select_prefix_returns_lowest_smoothed_score():
    e = np.eye(3)
    choice = select_prefix(np.array([2.0, 0.5, 1.0]), e, tau=0.1)
    assert choice.index == 1 and choice.score == 0.5 and choice.spread > 1.0
    # smoothing overturns the raw argmin (index 2): its semantic twin has a high score, so its
    # smoothed score is ~(0.2 + 1.0)/2 = 0.6, while the (0.3, 0.3) twins stay at ~0.3
    v = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=float)
    c = select_prefix(np.array([0.3, 0.3, 0.2, 1.0]), v, tau=0.1)
    assert c.index == 0 and c.smoothed == pytest.approx(0.3, abs=1e-3)


def test_candidates_come_from_every_rollouts_steps_with_the_length_filter_before_thinning():
    """Pins issue 11 point 3: candidates are the intermediate steps of the whole group (not of one
    anchor rollout), a prefix shared by rollouts is kept once, and the 0.5*L length filter runs before
    the thinning to max_candidates."""
    a = [1, NL, 2, NL, 3, NL, 4]  # boundaries 2, 4, 6; 6 is the last kept: dropped
    b = [1, NL, 5, 5, NL, 6, NL]  # 2, 5, 7: shares the first step with a, then its own
    ha, hb = np.array([1.0, 1.0, 0.0, 0.0, 9.0, 9.0, 9.0]), np.array([1.0, 1.0, 4.0, 4.0, 4.0, 9.0, 9.0])
    got = group_candidates([a, b], [ha, hb], {NL}, min_gap=1)
    assert [(c.row, c.prefix_ids, c.score) for c in got] == [
        (0, (1, NL), 1.0),
        (0, (1, NL, 2, NL), 0.5),
        (1, (1, NL, 5, 5, NL), 2.8),
    ]
    long = ([1] * 3 + [NL]) * 40  # 40 steps of 4 tokens, 160 tokens
    got = group_candidates([long], [np.ones(160)], {NL}, min_gap=4, max_candidates=15, max_len=80)
    assert [len(c.prefix_ids) for c in got] == [4, 8, 12, 20, 24, 28, 36, 40, 44, 52, 56, 60, 68, 72, 76]


def test_prefix_memory_ring_select_and_state():
    m = PrefixMemory(capacity=2)
    m.add("q", [1, 2], 0.9, np.array([1.0, 0.0]))
    m.add("q", [3], 0.5, np.array([0.0, 1.0]))
    m.add("q", [4], 0.7, np.array([0.0, 1.0]))  # evicts [1, 2]
    assert [e.prefix_ids for e in m.entries("q")] == [[3], [4]]
    entry, choice = m.select("q", tau=0.1)
    assert entry.prefix_ids == [3] and choice.index == 0  # select_prefix over the memory: one path
    assert m.select("other") is None
    m2 = PrefixMemory()
    m2.load_state_dict(pickle.loads(pickle.dumps(m.state_dict())))
    assert [e.prefix_ids for e in m2.entries("q")] == [[3], [4]] and m2.capacity == 2


def test_a_prefix_seen_again_is_appended_with_its_new_entropy():
    """Released rule: the memory is a deque that takes duplicates, so a prefix re-scored in a later
    step enters again with the current policy's entropy (keeping the first entry would select on a
    stale one)."""
    m = PrefixMemory(capacity=3)
    m.add("q", [1, 2], 0.9, np.array([1.0, 0.0]))
    m.add("q", [3], 0.6, np.array([0.0, 1.0]))
    m.add("q", [1, 2], 0.1, np.array([1.0, 0.0]))  # seen again, now confident
    assert [(e.prefix_ids, e.score) for e in m.entries("q")] == [([1, 2], 0.9), ([3], 0.6), ([1, 2], 0.1)]
    # [1, 2]'s neighbourhood: (0.9 e^10 + 0.6 + 0.1 e^10) / (2 e^10 + 1) ~ 0.5 < [3]'s ~ 0.6
    # (with the first entry kept, [1, 2] would score 0.9 and [3] would be chosen)
    entry, choice = m.select("q", tau=0.1)
    e10 = np.exp(10.0)
    assert entry.prefix_ids == [1, 2] and choice.index == 0
    assert choice.smoothed == pytest.approx((0.9 * e10 + 0.6 + 0.1 * e10) / (2 * e10 + 1))
    m.add("q", [4], 0.7, np.array([0.0, 1.0]))  # the ring evicts the stale [1, 2] first
    assert [(e.prefix_ids, e.score) for e in m.entries("q")] == [([3], 0.6), ([1, 2], 0.1), ([4], 0.7)]


def test_guided_queue_keeps_newest_and_carries_ground_truth():
    q = GuidedQueue(capacity=2)
    for i in range(3):
        q.push(
            GuidedPrompt(
                [1, 2],
                [7, i],
                original_prompt_id=f"p{i}",
                uid=f"g{i}",
                source_row={
                    "reward_model": {"ground_truth": f"ans{i}"},
                    "data_source": "math",
                    "extra_info": {"index": i},
                },
            )
        )
    assert len(q) == 2
    state = pickle.loads(pickle.dumps(q.state_dict()))
    out = q.pop_many(5)
    assert [g.source_row["reward_model"]["ground_truth"] for g in out] == ["ans1", "ans2"] and len(q) == 0
    assert out[0].input_ids() == [1, 2, 7, 1] and out[0].input_ids(3) == [1, 2, 7]
    r = GuidedQueue()
    r.load_state_dict(state)
    assert [g.source_row["extra_info"]["index"] for g in r.pop_many(1)] == [1]


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: is_hard([], "all_fail"), "empty"),
        (lambda: is_hard([0.0], "none"), "threshold"),
        (lambda: is_hard([float("nan")]), "finite"),
        (lambda: step_boundaries([1], set()), "newline_ids"),
        (lambda: prefix_mean_entropies(np.ones(3), [4]), "boundaries"),
        (lambda: smoothed_scores(np.ones(2), np.eye(2), 0.0), "tau"),
        (lambda: smoothed_scores(np.ones(2), np.ones((2, 2)), 0.1), "L2-normalised"),
        (lambda: select_prefix(np.ones(0), np.ones((0, 2))), "no prefix candidates"),
        (lambda: group_candidates([[1]], [], {NL}), "entropy rows"),
        (lambda: GuidedQueue(0), "capacity"),
        (lambda: GuidedQueue().push("x"), "GuidedPrompt"),
    ],
)
def test_bad_input_raises(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def test_prefix_memory_shares_a_responses_tokens_and_keeps_sharing_through_a_checkpoint():
    m = PrefixMemory(capacity=8)
    response = list(range(1, 1001))
    emb = np.eye(4)[:3]
    m.add_group("q", [response], [(0, 100, 0.3), (0, 500, 0.2), (0, 900, 0.1)], emb)
    assert [len(e.prefix_ids) for e in m.entries("q")] == [100, 500, 900]
    assert m.entries("q")[1].prefix_ids == response[:500]
    # one 3-byte copy of the response up to its longest kept prefix; per entry its source and b (int32),
    # MTE (float64) and a float16 embedding
    assert m.nbytes() == 900 * 3 + 3 * (4 + 4 + 8 + 4 * 2)
    m2 = PrefixMemory()
    m2.load_state_dict(pickle.loads(pickle.dumps(m.state_dict())))
    assert m2.nbytes() == m.nbytes()
    assert [e.prefix_ids for e in m2.entries("q")] == [e.prefix_ids for e in m.entries("q")]
    entry, _ = m2.select("q", tau=0.1)
    assert entry.prefix_ids == response[:900]


def test_a_response_leaves_the_memory_with_its_last_prefix():
    m = PrefixMemory(capacity=2)
    m.add_group("q", [[1, 2, 3]], [(0, 1, 0.5), (0, 2, 0.4)], np.eye(2))
    m.add_group("q", [[7, 8]], [(0, 1, 0.3), (0, 2, 0.2)], np.eye(2))
    assert [e.prefix_ids for e in m.entries("q")] == [[7], [7, 8]]
    assert m.nbytes() == 2 * 3 + 2 * (4 + 4 + 8 + 2 * 2)  # [1, 2, 3] is gone


def test_prefix_memory_bounds_its_prompts_least_recently_hard_first():
    m = PrefixMemory(capacity=2, max_prompts=2)
    for key in ("a", "b"):
        m.add(key, [1], 0.5, np.array([1.0, 0.0]))
    m.add_group("a", [[1]], [], np.zeros((0, 2)))  # "a" hard again with nothing new: recent again
    m.add("c", [2], 0.5, np.array([0.0, 1.0]))
    assert len(m) == 2 and m.entries("b") == [] and m.entries("a") and m.evicted_prompts == 1


def test_a_checkpoint_of_the_former_layout_loads():
    old = {"capacity": 2, "memory": {"q": [([3], 0.5, np.array([0.0, 1.0])), ([4], 0.7, np.array([1.0, 0.0]))]}}
    m = PrefixMemory()
    m.load_state_dict(old)
    assert [(e.prefix_ids, e.score) for e in m.entries("q")] == [([3], 0.5), ([4], 0.7)]


def test_token_ids_pack_into_three_bytes_and_back():
    rng = np.random.default_rng(0)
    ids = np.concatenate([[0, 1, 255, 256, 65535, 65536, 151_935, 2**24 - 1], rng.integers(0, 2**24, size=1000)])
    packed = prefix_lib._pack_ids(ids)
    assert packed.dtype == np.uint8 and packed.nbytes == 3 * ids.size
    assert np.array_equal(prefix_lib._unpack_ids(packed), ids)
    wide = prefix_lib._pack_ids([5, 2**24])  # past 3 bytes: kept as int32
    assert wide.dtype == np.int32 and prefix_lib._unpack_ids(wide).tolist() == [5, 2**24]


def test_a_checkpoint_of_the_entry_tuple_layout_loads():
    """The layout before the array one: int32 sources and one (source, b, MTE, embedding) tuple an entry."""
    m = PrefixMemory(capacity=4)
    e = np.eye(4)[:3]
    m.add_group("q", [list(range(10, 40)), [7, 8, 9]], [(0, 5, 0.3), (1, 2, 0.2), (0, 30, 0.1)], e)
    sources = {0: np.arange(10, 40, dtype=np.int32), 1: np.array([7, 8], dtype=np.int32)}
    entries = [(0, 5, 0.3, e[0].astype(np.float16)), (1, 2, 0.2, e[1].astype(np.float16))]
    entries.append((0, 30, 0.1, e[2].astype(np.float16)))
    old = {"capacity": 4, "max_prompts": None, "evicted_prompts": 0}
    old["prompts"] = {"q": {"sources": sources, "entries": entries, "next_source": 2}}
    loaded = PrefixMemory()
    loaded.load_state_dict(pickle.loads(pickle.dumps(old)))
    assert [(x.prefix_ids, x.score) for x in loaded.entries("q")] == [(x.prefix_ids, x.score) for x in m.entries("q")]
    assert loaded.nbytes() == m.nbytes() and loaded.select("q")[1] == m.select("q")[1]
