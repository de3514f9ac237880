"""Plugin state saved in a verl checkpoint folder and restored exactly.

The encoder is a deterministic hashing stand-in (loading MiniLM here would only add seconds; the
state itself stores vectors, not the model).
"""

import pickle

import numpy as np
import pytest

from xrpo_verl.config import ExTraConfig, XRPOConfig
from xrpo_verl.icl_gate import ArmCounts
from xrpo_verl.prefix import GuidedPrompt
from xrpo_verl.verl_adapters.config import PluginSettings
from xrpo_verl.verl_adapters.state import PluginState


def _settings(placement="before_norm"):
    extra = ExTraConfig.from_dict(
        {"novelty": {"placement": placement, "warmup": 1, "memory_size": 2}, "prefix": {"queue_size": 2}}
    )
    return PluginSettings(
        xrpo=XRPOConfig(), extra=extra, adv_estimator="xrpo_extra", norm_adv_by_std=True, rollout_n=16
    )


def _fill(state, enc):
    state.corpus.add("p1", "What is 1+1?", "2", step=3, num_tokens=1)
    state.corpus.add("p2", "What is 2+2?", "4", step=3, num_tokens=1)
    state.novelty.update(["p1", "p1", "p1"], enc.encode(["a", "b", "c"]))
    state.reward_var.update("p1", [1.0, 0.0])
    state.prefix_memory.add("p1", [4, 5], 0.3, enc.encode(["4 5"])[0])
    for i in range(3):  # capacity 2: the oldest is dropped, with its row
        row = {"reward_model": {"ground_truth": str(i)}, "data_source": "d"}
        state.guided_queue.push(GuidedPrompt([1], [4, 5], original_prompt_id="p1", uid=f"g{i}", source_row=row))
    state.counters["icl_triggers"] = 5
    state.icl_gate.update(ArmCounts(12, 0), ArmCounts(12, 3))


def test_round_trip_through_a_checkpoint_folder(tmp_path, hash_encoder):
    a = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    _fill(a, hash_encoder)
    path = a.save(str(tmp_path / "global_step_4"))
    assert path.endswith("global_step_4/xrpo/state.pkl")
    b = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    b.load(str(tmp_path / "global_step_4"))
    assert pickle.dumps(b.state_dict()["counters"]) == pickle.dumps(a.state_dict()["counters"])
    assert [e.prompt_id for e in b.corpus.retrieve("p3", "What is 1+1?", k=2)] == [
        e.prompt_id for e in a.corpus.retrieve("p3", "What is 1+1?", k=2)
    ]
    probe = hash_encoder.encode(["a", "z"])
    np.testing.assert_array_equal(
        b.novelty.score(["p1", "p1"], probe, np.array([True, True])),
        a.novelty.score(["p1", "p1"], probe, np.array([True, True])),
    )
    assert b.reward_var.gate("p1") == a.reward_var.gate("p1") < 1.0
    restored = b.guided_queue.pop_many(5)
    assert [g.uid for g in restored] == ["g1", "g2"]
    assert restored[1].source_row == {"reward_model": {"ground_truth": "2"}, "data_source": "d"}
    assert b.icl_gate.share() == a.icl_gate.share() < 0.5  # ICL lost 0 of 12 to zero-shot's 3 of 12


def test_a_version_2_checkpoint_resumes_with_an_empty_icl_gate(tmp_path, hash_encoder):
    """The gate came with state version 3: an older checkpoint loses nothing it held."""
    a = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    _fill(a, hash_encoder)
    old = a.state_dict()
    old["version"] = 2
    del old["components"]["icl_gate"]
    b = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    b.load_state_dict(old)
    assert b.icl_gate.share() == pytest.approx(0.5, abs=1e-6) and len(b.corpus) == len(a.corpus)


def test_missing_or_mismatched_state_is_an_error(tmp_path, hash_encoder):
    a = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    with pytest.raises(FileNotFoundError, match="no xrpo plugin state"):
        a.load(str(tmp_path / "global_step_9"))
    off = PluginState(_settings("after_norm"), embedder_factory=lambda cfg: hash_encoder)
    off.save(str(tmp_path / "global_step_1"))  # saved without the variance EMA (after_norm)
    with pytest.raises(ValueError, match="reward_var"):
        a.load(str(tmp_path / "global_step_1"))
    old = a.state_dict() | {"version": 1}  # a checkpoint of the former layout (guided rows kept apart)
    with pytest.raises(ValueError, match="version 1 is not supported"):
        a.load_state_dict(old)


def test_embedder_index_settings_reach_the_icl_corpus(hash_encoder):
    xrpo = XRPOConfig.from_dict({"embedder": {"index": "hnsw", "use_gpu": "never"}})
    s = PluginSettings(xrpo=xrpo, extra=ExTraConfig(), adv_estimator="xrpo", norm_adv_by_std=True, rollout_n=16)
    state = PluginState(s, embedder_factory=lambda cfg: hash_encoder)
    assert (state.corpus.index_kind, state.corpus.use_gpu) == ("hnsw", "never")
    import faiss

    for i in range(5):
        state.corpus.add(f"p{i}", f"What is {i}+{i}?", str(2 * i), step=0, num_tokens=1)
    built = faiss.downcast_index(state.corpus._synced_index()._index.index)  # inside the id map
    assert isinstance(built, faiss.IndexHNSWFlat)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 0.25  # each reading a quarter second after the last
        return self.t


def test_the_encoder_meter_counts_texts_calls_and_seconds(hash_encoder):
    from xrpo_verl.verl_adapters.state import _LazyEmbedder

    loads = []
    enc = _LazyEmbedder(lambda: loads.append(1) or hash_encoder, clock=_Clock())
    assert enc.take_metrics() is None and not loads  # never used: nothing loaded, nothing reported
    assert enc.encode(["a", "b", "c"]).shape == (3, 16)
    enc.encode(["d"])
    m = enc.take_metrics()
    assert loads == [1]
    # one load (2 readings) then two encodes of 2 readings each, 0.25 s apart
    assert m == {"texts": 4.0, "calls": 2.0, "seconds": 0.5, "device_is_cuda": 0.0, "load_seconds": 0.25}
    assert enc.take_metrics() == {"texts": 0.0, "calls": 0.0, "seconds": 0.0, "device_is_cuda": 0.0}


def test_state_reports_every_encode_of_a_step_once(hash_encoder):
    hash_encoder.batch_size = 64
    state = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    assert state.encoder_metrics() == {}  # nothing encoded yet
    state.corpus.add("p1", "What is 1+1?", "2", step=3, num_tokens=1)
    state.corpus.add("p2", "What is 2+2?", "4", step=3, num_tokens=1)
    state.extra_embedder().encode(["x", "y", "z"])  # the path of novelty_scores and prefixes
    m = state.encoder_metrics()
    assert m["xrpo/encoder/icl/texts"] == 2 and m["xrpo/encoder/extra/texts"] == 3
    assert m["xrpo/encoder/texts"] == 5 and m["xrpo/encoder/calls"] == 3
    assert m["xrpo/encoder/seconds"] == m["xrpo/encoder/icl/seconds"] + m["xrpo/encoder/extra/seconds"] >= 0
    assert m["xrpo/encoder/device_is_cuda"] == 0 and m["xrpo/encoder/batch_size"] == 64
    again = state.encoder_metrics()
    assert again["xrpo/encoder/texts"] == 0 and "xrpo/encoder/load_seconds" not in again


def test_a_state_follows_verls_retention_of_its_actor_checkpoint(tmp_path):
    from xrpo_verl.verl_adapters.state import prune_orphan_states

    for step in (5, 10, 15):
        (tmp_path / f"global_step_{step}" / "xrpo").mkdir(parents=True)
        (tmp_path / f"global_step_{step}" / "xrpo" / "state.pkl").write_bytes(b"x")
    for step in (10, 15):  # verl kept two actor checkpoints and removed global_step_5/actor
        (tmp_path / f"global_step_{step}" / "actor").mkdir()
    (tmp_path / "global_step_5" / "data.pt").write_bytes(b"y")  # verl's own leftovers stay
    removed = prune_orphan_states(str(tmp_path))
    assert removed == [str(tmp_path / "global_step_5" / "xrpo")]
    assert (tmp_path / "global_step_5" / "data.pt").exists()
    assert (tmp_path / "global_step_10" / "xrpo" / "state.pkl").exists()
    assert prune_orphan_states(str(tmp_path / "missing")) == []
