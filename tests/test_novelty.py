"""ExTra novelty memory: hand-made orthogonal/identical vectors, warm-up, ring buffer, state."""

import pickle

import numpy as np
import pytest
import torch

from xrpo_verl import novelty
from xrpo_verl.advantages import grpo_advantages, novelty_shaped_scores
from xrpo_verl.novelty import NOVELTY_EPS, NoveltyMemory, RewardVarianceEMA

E = np.eye(4, dtype=np.float32)


def _warm(mem, key, vecs):
    mem.update([key] * len(vecs), np.asarray(vecs, dtype=np.float32))


def test_zero_until_warmup_then_one_minus_max_cos():
    mem = NoveltyMemory(capacity=4, warmup=3)
    z = np.stack([E[2], E[3]])
    ok = np.array([True, True])
    _warm(mem, "p", [E[0]])
    assert np.all(mem.score(["p", "p"], z, ok) == 0)  # 1 stored + 1 sibling < warmup 3
    _warm(mem, "p", [E[0]])
    # orthogonal to memory and to each other: novelty 1
    assert np.allclose(mem.score(["p", "p"], z, ok), [1.0, 1.0])
    # a response at 60 degrees to the memory: 1 - cos = 0.5; its sibling is orthogonal to it
    v = np.array([0.5, np.sqrt(0.75), 0, 0], dtype=np.float32)
    assert np.allclose(mem.score(["p", "p"], np.stack([v, E[3]]), ok), [0.5, 1.0], atol=1e-6)


def test_first_visit_scores_against_this_steps_siblings():
    """Pins issue 11 point 1 (warm-up): with an empty memory, the released code's rule (memory must
    hold `warmup` entries) gave 0 to every response of a prompt's first visit, i.e. the whole first
    epoch. The reference set is now memory u siblings, so a first visit already scores."""
    mem = NoveltyMemory(capacity=16, warmup=1)
    v = np.array([0.6, 0.8, 0, 0], dtype=np.float32)
    nov = mem.score(["p", "p", "p"], np.stack([E[0], v, E[2]]), np.array([True, True, False]))
    assert np.allclose(nov, [1 - 0.6, 1 - 0.6, 0.0], atol=1e-6)  # nearest sibling at cos 0.6; wrong: 0
    z, ok = np.stack([E[0], v, E[2]]), np.ones(3, bool)
    assert NoveltyMemory(capacity=16, warmup=2).score(["p"] * 3, z, ok)[0] == pytest.approx(0.4)  # 2 siblings
    assert np.all(NoveltyMemory(capacity=16, warmup=3).score(["p"] * 3, z, ok) == 0)  # 2 siblings < 3


def test_identical_siblings_are_not_novel_but_self_is_excluded():
    mem = NoveltyMemory(capacity=4, warmup=1)
    _warm(mem, "p", [E[0]])
    nov = mem.score(["p", "p", "p"], np.stack([E[1], E[1], E[2]]), np.array([True, True, True]))
    assert np.allclose(nov, [0.0, 0.0, 1.0])


def test_score_is_ungated_unless_correct_is_given():
    """The advantage functions gate by correctness themselves: without `correct`, wrong answers keep
    their r_int (before-norm shaping normalises by the max over the whole group)."""
    mem = NoveltyMemory(capacity=4, warmup=1)
    z = np.stack([E[0], E[1], E[2]])
    assert np.allclose(mem.score(["p"] * 3, z), [1.0, 1.0, 1.0])
    assert np.allclose(mem.score(["p"] * 3, z, np.array([True, False, True])), [1.0, 0.0, 1.0])


def _same_answer_twice_rounded(seed):
    """8 embeddings of one text from two encoder calls: equal up to float32 rounding."""
    v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    a, b = v / np.linalg.norm(v), (3 * v) / np.linalg.norm(3 * v)
    return np.stack([a] * 4 + [b] * 4).astype(np.float32)


def test_identical_answers_score_exactly_zero(monkeypatch):
    """1 - cos of equal float32 unit vectors is rounding noise; below NOVELTY_EPS it is 0, so
    before-norm shaping (which divides by the group max) cannot blow it up to ~1."""
    assert 1e-7 < NOVELTY_EPS < 1e-4
    index, ones, ok = ["g"] * 8, torch.ones(8), torch.ones(8, dtype=torch.bool)

    def max_abs_adv(z):
        nov = torch.as_tensor(NoveltyMemory(capacity=16, warmup=1).score(["p"] * 8, z))
        return float(grpo_advantages(novelty_shaped_scores(ones, ok, nov, index, scale=0.01), index).abs().max())

    groups = [_same_answer_twice_rounded(seed) for seed in range(50)]
    for z in groups:
        assert np.all(NoveltyMemory(capacity=16, warmup=1).score(["p"] * 8, z) == 0)
        assert max_abs_adv(z) == 0.0  # all-correct group of one answer: |A| = 0
    monkeypatch.setattr(novelty, "NOVELTY_EPS", 0.0)  # without the floor, the noise orders the group
    assert max(max_abs_adv(z) for z in groups) > 0.5


def test_wrong_answers_get_zero_and_keys_are_separate():
    mem = NoveltyMemory(capacity=4, warmup=1)
    _warm(mem, "a", [E[0]])
    _warm(mem, "b", [E[1]])
    nov = mem.score(["a", "b", "c"], np.stack([E[1], E[1], E[2]]), np.array([False, True, True]))
    assert np.allclose(nov, [0.0, 0.0, 0.0])  # wrong; identical to b's memory; c unseen (warm-up)


def test_ring_buffer_keeps_the_last_capacity_and_state_round_trips():
    mem = NoveltyMemory(capacity=2, warmup=1)
    _warm(mem, "p", [E[0], E[1], E[2]])
    assert np.array_equal(mem.entries("p"), np.stack([E[1], E[2]]))
    assert len(mem) == 1
    clone = NoveltyMemory(capacity=2, warmup=1)
    clone.load_state_dict(pickle.loads(pickle.dumps(mem.state_dict())))
    q = np.stack([E[0], E[3]])
    assert np.array_equal(
        clone.score(["p", "p"], q, np.array([True, True])), mem.score(["p", "p"], q, np.array([True, True]))
    )
    with pytest.raises(ValueError, match="capacity"):
        NoveltyMemory(capacity=3, warmup=1).load_state_dict(mem.state_dict())


def test_reward_variance_gate():
    g = RewardVarianceEMA(rate=0.1, coef=1.0)
    assert g.update("p", [0, 1, 0, 1]) == pytest.approx(np.exp(-0.25))
    assert g.update("p", [1, 1, 1, 1]) == pytest.approx(np.exp(-0.9 * 0.25))
    assert g.gate("unseen") == 1.0


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda m: m.score(["p"], np.ones((1, 4), np.float32), np.array([True])), "L2-normalised"),
        (lambda m: m.score(["p", "q"], E[:1], np.array([True, True])), "rows"),
        (lambda m: m.score(["p"], E[:1], np.array([1])), "bool"),
        (lambda m: m.update(["p"], np.full((1, 4), np.nan, np.float32)), "NaN"),
        (lambda m: NoveltyMemory(capacity=4, warmup=5), "warmup"),
    ],
)
def test_bad_input_raises(call, needle):
    with pytest.raises(ValueError, match=needle):
        call(NoveltyMemory(capacity=4, warmup=1))


def test_score_then_update_is_score_then_update():
    """The trainer's one call: the same scores as `score`, and the same memory after as `update`."""
    rng = np.random.default_rng(3)
    steps = []
    for _ in range(4):
        z = rng.normal(size=(7, 5)).astype(np.float32)
        steps.append((["a", "b", "a", "c", "a", "b", "b"], z / np.linalg.norm(z, axis=1, keepdims=True)))
    one, two = NoveltyMemory(capacity=4, warmup=2), NoveltyMemory(capacity=4, warmup=2)
    for keys, z in steps:
        got = one.score_then_update(keys, z)
        want = two.score(keys, z)
        two.update(keys, z)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert all(np.array_equal(one.entries(k), two.entries(k)) for k in "abc")


def _random_unit_rows(rng, n, d):
    """(n, d) float32 unit rows, a few coordinates much larger than the rest (as a sentence encoder's)."""
    z = rng.standard_normal((n, d))
    z[:, : d // 48] *= 20
    return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("dim", [384, 768])
def test_float16_rounding_of_a_renormalised_row_is_second_order(dim):
    """1 - cos(z, y/|y|) with y = fp16(z) is |e_perp|^2 / 2 <= u^2 / 2 (u = 2^-11, fp16's unit
    roundoff): far below NOVELTY_EPS. The un-normalised dot z . y is off to first order, above it."""
    z = _random_unit_rows(np.random.default_rng(dim), 4000, dim).astype(np.float64)
    y = z.astype(np.float16).astype(np.float64)
    renormalised = 1 - np.sum(z * y, axis=1) / np.linalg.norm(y, axis=1)
    assert renormalised.max() <= 2.0**-23 < NOVELTY_EPS / 40
    assert np.abs(1 - np.sum(z * y, axis=1)).max() > 4 * NOVELTY_EPS  # why the rows are renormalised


def test_an_identical_response_scores_zero_against_a_float16_memory():
    """Each prompt's memory holds 16 random responses; one of them comes back alone (no sibling to
    match it): its only match is its own stored float16 row, and it scores exactly 0."""
    rng = np.random.default_rng(0)
    keys = [f"p{i}" for i in range(300)]
    z = _random_unit_rows(rng, 16 * len(keys), 384)
    mem = NoveltyMemory(capacity=16, warmup=1)
    mem.update([k for k in keys for _ in range(16)], z)
    again = z[np.arange(len(keys)) * 16 + rng.integers(0, 16, len(keys))]
    for k, zi in zip(keys, again):  # one response a prompt: the reference set is the memory only
        assert mem.score([k], zi[None, :])[0] == 0.0
    fresh = _random_unit_rows(rng, len(keys), 384)
    assert np.all(mem.score(keys, fresh) > 0.1)  # a new response is still novel


def test_the_memory_stores_float16_and_loads_an_older_float32_state():
    rng = np.random.default_rng(1)
    keys = [k for k in "abc" for _ in range(20)]
    z = _random_unit_rows(rng, len(keys), 384)
    mem = NoveltyMemory(capacity=16, warmup=1)
    mem.update(keys, z)
    assert mem.nbytes() == 3 * 16 * 384 * 2  # float16: half of what float32 rows would take
    state = pickle.loads(pickle.dumps(mem.state_dict()))
    assert {v.dtype for v in state["memory"].values()} == {np.dtype(np.float16)}
    q = _random_unit_rows(rng, 6, 384)
    qk = list("aabbcc")
    clone = NoveltyMemory(capacity=16, warmup=1)
    clone.load_state_dict(state)
    assert np.array_equal(clone.score(qk, q), mem.score(qk, q)) and clone.nbytes() == mem.nbytes()
    # a checkpoint written before float16 storage: its float32 rows are cast on load
    old = NoveltyMemory(capacity=16, warmup=1)
    old.load_state_dict({**state, "memory": {k: z[np.array(keys) == k][-16:] for k in "abc"}})
    assert old.nbytes() == mem.nbytes() and np.array_equal(old.score(qk, q), mem.score(qk, q))
    assert all(np.array_equal(old.entries(k), mem.entries(k)) for k in "abc")


def test_the_closest_distinct_texts_stay_apart_in_a_float16_memory():
    """Texts one character apart are >= 2.8e-5 apart under MiniLM (docs/algorithms.md, identical
    answers). Against a renormalised float16 row, 1 - cos moves by <= |z' - z| 2^-11 + 2^-23, i.e.
    ~4e-6 at that distance: such a pair still scores above NOVELTY_EPS, and near its float32 value."""
    rng = np.random.default_rng(5)
    z = _random_unit_rows(rng, 500, 384)
    noise = rng.standard_normal(z.shape).astype(np.float32)
    noise -= np.sum(noise * z, axis=1, keepdims=True) * z  # orthogonal to z
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    angle = np.arccos(1 - 2.8e-5)
    near = (np.cos(angle) * z.astype(np.float64) + np.sin(angle) * noise).astype(np.float32)
    keys = [f"p{i}" for i in range(len(z))]
    mem = NoveltyMemory(capacity=16, warmup=1)
    mem.update(keys, z)
    got = mem.score(keys, near)
    bound = np.sqrt(2 * 2.8e-5) * 2.0**-11 + 2.0**-23 + 1e-6  # and float32 arithmetic
    assert np.all(got >= NOVELTY_EPS) and np.all(np.abs(got - 2.8e-5) <= bound)
