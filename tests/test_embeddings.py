"""Real MiniLM (bundled, loaded once per module) and real FAISS indexes."""

import numpy as np
import pytest

from xrpo_verl.embeddings import Embedder, VectorIndex, default_model_path, get_embedder
from xrpo_verl.icl import ICLCorpus
from xrpo_verl.novelty import NoveltyMemory


@pytest.fixture(scope="module")
def embedder():
    import torch

    torch.set_num_threads(1)
    return get_embedder(device="cpu", batch_size=32)


def test_minilm_encodes_unit_rows_with_sensible_neighbours(embedder):
    assert embedder.dim == 384 and embedder.model_name == default_model_path()
    z = embedder.encode(["the cat sat on the mat", "a cat sitting on a rug", "stock prices fell sharply today"])
    assert z.shape == (3, 384) and z.dtype == np.float32
    assert np.allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)
    assert z[0] @ z[1] > 0.5 > z[0] @ z[2]
    assert embedder.encode([]).shape == (0, 384)
    assert get_embedder(device="cpu", batch_size=32) is embedder  # cached per process


def test_icl_retrieval_with_real_minilm(embedder):
    c = ICLCorpus(embedder)
    c.add("alg", "Solve for x: 2x + 3 = 11.", "x = 4", step=1, num_tokens=3)
    c.add("geo", "Find the area of a circle with radius 3.", "9 pi", step=1, num_tokens=2)
    c.add("bio", "Name the organelle that produces ATP in cells.", "mitochondria", step=1, num_tokens=1)
    got = c.retrieve("new", "Solve for y: 5y - 2 = 13.", k=1)
    assert [e.prompt_id for e in got] == ["alg"]
    assert all(e.prompt_id != "alg" for e in c.retrieve("alg", "Solve for x: 2x + 3 = 11.", k=3))


def test_novelty_with_real_minilm(embedder):
    mem = NoveltyMemory(capacity=4, warmup=2)
    mem.update(["p", "p"], embedder.encode(["The answer is 12 by adding.", "Adding gives 12, the answer."]))
    z = embedder.encode(["The answer is 12 by adding.", "Using a generating function, we find twelve."])
    nov = mem.score(["p", "p"], z, np.array([True, True]))
    assert nov[0] == pytest.approx(0.0, abs=1e-4) and nov[1] > 0.2


def test_missing_model_offline_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="cannot load embedding model"):
        Embedder(str(tmp_path / "no-such-model"), device="cpu")


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_index_is_exact_and_supports_remove_and_save(tmp_path):
    rng = np.random.default_rng(0)
    x, q = _unit(rng, 500, 32), _unit(rng, 20, 32)
    ids = np.arange(1000, 1500)
    idx = VectorIndex(32, kind="flat", use_gpu="never")
    idx.add(x, ids)
    scores, got = idx.search(q, 5)
    brute = np.argsort(-(q @ x.T), axis=1)[:, :5] + 1000
    assert np.array_equal(got, brute)
    assert np.allclose(scores[:, 0], (q @ x.T).max(axis=1), atol=1e-5)
    assert idx.remove(brute[:, 0]) == len(set(brute[:, 0].tolist()))
    assert not set(idx.search(q, 1)[1][:, 0]) & set(brute[:, 0].tolist())
    idx.save(tmp_path / "flat.faiss")
    back = VectorIndex.load(tmp_path / "flat.faiss", use_gpu="never")
    assert back.kind == "flat" and len(back) == len(idx)
    assert np.array_equal(back.search(q, 3)[1], idx.search(q, 3)[1])


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_recall_and_round_trip(kind, tmp_path):
    rng = np.random.default_rng(1)
    x, q = _unit(rng, 2000, 32), _unit(rng, 50, 32)
    idx = VectorIndex(32, kind=kind, use_gpu="never")
    idx.add(x, np.arange(2000))
    got = idx.search(q, 10)[1]
    truth = np.argsort(-(q @ x.T), axis=1)[:, :10]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth)])
    assert recall > 0.5, f"{kind} recall@10 {recall:.2f}"
    idx.save(tmp_path / f"{kind}.faiss")
    back = VectorIndex.load(tmp_path / f"{kind}.faiss", use_gpu="never")
    assert back.kind == kind and np.array_equal(back.search(q, 10)[1], got)


def test_gpu_policy_and_bad_input():
    import faiss

    if faiss.get_num_gpus() == 0:
        with pytest.raises(ValueError, match="get_num_gpus"):
            VectorIndex(8, use_gpu="always")
        assert not VectorIndex(8, use_gpu="auto").on_gpu
    else:
        assert VectorIndex(8, use_gpu="auto").on_gpu
    with pytest.raises(ValueError, match="kind"):
        VectorIndex(8, kind="lsh")
    with pytest.raises(ValueError, match="HNSW"):
        VectorIndex(8, kind="hnsw", use_gpu="always")
    idx = VectorIndex(8, kind="hnsw", use_gpu="never")
    with pytest.raises(ValueError, match="remove"):
        idx.remove(np.array([1]))
    with pytest.raises(ValueError, match=r"\(N, 8\)"):
        idx.add(np.ones((2, 4), np.float32), np.arange(2))
    with pytest.raises(ValueError, match="ids"):
        idx.add(np.ones((2, 8), np.float32), np.arange(3))
    assert idx.search(np.ones((1, 8), np.float32), 2)[1].tolist() == [[-1, -1]]


def test_long_texts_keep_their_end_counted_in_the_encoders_tokenizer(embedder):
    """Pins issue 11 point 2: MiniLM sees 256 wordpieces and sentence-transformers keeps the first
    ones, so two long responses that differ only in their final answer embedded identically (cos 1.0).
    `encode` now keeps the end that fits the encoder's window; keep="head" still asks for the start."""
    body = "".join(f"Step {i}: we add {i} apples to the basket and count them again carefully.\n" for i in range(60))
    a, b = body + "So the final answer is 42.", body + "Therefore the probability is one third."
    tok = embedder._model.tokenizer
    assert len(tok(a, add_special_tokens=False)["input_ids"]) > 3 * embedder.window()
    tails = embedder.tails([a])
    assert tails[0].endswith("So the final answer is 42.")
    assert len(tok(tails[0], add_special_tokens=False)["input_ids"]) <= embedder.window()
    za, zb = embedder.encode([a, b])
    assert float(za @ zb) < 0.99
    ha, hb = embedder.encode([a, b], keep="head")
    assert float(ha @ hb) > 0.999  # the start alone cannot tell them apart
    short = ["3+4=7", "3+4=8"]
    assert np.array_equal(embedder.encode(short), embedder.encode(short, keep="head"))  # fits: unchanged


def _no_gpu():
    import torch

    return not torch.cuda.is_available()


needs_no_gpu = pytest.mark.skipif(not _no_gpu(), reason="checks the refusal of a GPU this machine does not have")


@needs_no_gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:3"])
def test_a_gpu_the_process_cannot_see_is_refused_not_replaced_by_cpu(device):
    from xrpo_verl.embeddings import device_problem, resolve_device

    assert "sees no CUDA device" in device_problem(device)
    with pytest.raises(ValueError, match="sees no CUDA device"):
        resolve_device(device)
    with pytest.raises(ValueError, match="sees no CUDA device"):
        Embedder(device=device)  # fails before any model loads


def test_device_names_are_checked():
    from xrpo_verl.embeddings import device_problem

    assert device_problem("cpu") is None
    assert "not a torch device" in device_problem("gpu0")
    assert "not supported for the encoder" in device_problem("meta")


def test_auto_device_says_what_it_picked_once(caplog):
    from xrpo_verl import embeddings

    embeddings._auto_device.cache_clear()
    with caplog.at_level("WARNING", logger="xrpo_verl.embeddings"):
        picked = embeddings.resolve_device(None)
        assert embeddings.resolve_device(None) == picked  # every step asks; the line comes once
    assert picked == ("cpu" if _no_gpu() else "cuda")
    lines = [r.getMessage() for r in caplog.records if r.name == "xrpo_verl.embeddings"]
    assert len(lines) == 1 and f"picked {picked}" in lines[0], lines


def test_a_gpu_index_past_the_visible_ones_is_refused(monkeypatch):
    """The decision for a process that sees two GPUs (stated to torch here: this machine has none)."""
    import torch

    from xrpo_verl.embeddings import device_problem

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert device_problem("cuda") is None and device_problem("cuda:1") is None
    assert device_problem("cuda:3") == "'cuda:3' but this process sees 2 CUDA device(s) (CUDA_VISIBLE_DEVICES='4,5')"
