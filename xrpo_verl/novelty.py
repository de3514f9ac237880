"""Per-prompt embedding memory for ExTra's novelty bonus (ExTra §3.1). Pure numpy.

    d_i      = max(0, 1 - max_{z' in Phi(x) u siblings(i)} cos(z_i, z'))
    r_int_i  = d_i if d_i >= eps else 0      eps = NOVELTY_EPS; ungated, every response

Phi(x) is a ring buffer of the last `capacity` response embeddings of prompt x (every response,
correct or not, is pushed after scoring). The reference set Phi(x) u siblings(i) excludes response
i itself; r_int is 0 while it holds fewer than `warmup` embeddings. Counting this step's siblings
lets a prompt's first visit score (the released code counted Phi(x) only, which left the whole
first epoch at 0; docs/algorithms.md, novelty). The correctness gate 1[R_i > 0] is applied by the
advantage functions (`advantages.novelty_shaped_scores`, `advantages.add_novelty_bonus`), which
take r_int ungated.

Phi(x) is stored in float16 (half the bytes of a run's largest store) and compared in float32 after
each stored row is renormalised: for a unit z and y = fp16(z) = z + e, |e_j| <= u |z_j| (u = 2^-11),
1 - cos(z, y / |y|) = |e_perp|^2 / 2 + O(|e|^3) <= u^2 / 2 ~ 1.2e-7, second order in the rounding, so
an identical response still scores under NOVELTY_EPS, i.e. 0; the un-normalised dot z . y = 1 + z . e
is off to first order (up to u ~ 5e-4), above it (docs/algorithms.md, "Where the memories live").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xrpo_verl.embeddings import check_unit_rows, unit_rows_from_half

# d below this counts as 0. 1 - cos of two equal float32 unit vectors is rounding noise, not 0, and
# before-norm shaping divides by the group max, which would turn that noise into a novelty near 1
# for a group of identical answers. Set between that noise (unit vectors of the dims we use) and
# 1 - cos of texts one character apart under MiniLM, with a margin each way (docs/algorithms.md).
NOVELTY_EPS = 5e-6
STORED_DTYPE = np.float16  # Phi(x)'s rows; renormalised in float32 before each comparison (module docstring)


class NoveltyMemory:
    """Ring buffer of response embeddings per prompt key, and the novelty score against it.

    Args:
        capacity: |Phi(x)|, embeddings kept per key (ExTra code: 16).
        warmup: novelty is 0 while Phi(x) u siblings holds fewer than this; 1 <= warmup <= capacity.
    """

    def __init__(self, capacity: int = 16, warmup: int = 8) -> None:
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity = {capacity!r} must be an integer >= 1")
        if int(warmup) != warmup or not 1 <= warmup <= capacity:
            raise ValueError(f"warmup = {warmup!r} must be an integer in [1, capacity = {capacity}]")
        self.capacity = int(capacity)
        self.warmup = int(warmup)
        self._mem: dict[str, np.ndarray] = {}  # key -> (m, d) STORED_DTYPE, oldest first, m <= capacity

    def __len__(self) -> int:
        """Number of prompt keys held."""
        return len(self._mem)

    def nbytes(self) -> int:
        """Bytes of the stored embeddings (not counting Python objects)."""
        return sum(v.nbytes for v in self._mem.values())

    def entries(self, key: str) -> np.ndarray:
        """The (m, d) float32 unit rows `key`'s responses are compared with, oldest first (m = 0 if unseen):
        the stored float16 rows, renormalised."""
        hist = self._mem.get(key)
        return np.zeros((0, 0), dtype=np.float32) if hist is None else unit_rows_from_half(hist)

    def score(self, keys: Sequence[str], embeddings: np.ndarray, correct: np.ndarray | None = None) -> np.ndarray:
        """r_int per response (see module docstring); does not modify the memory.

        Args:
            keys: (B,) prompt key per response.
            embeddings: (B, d) L2-normalised response embeddings z_i.
            correct: optional (B,) bool R_i > 0, multiplied in when given. Leave it None for the
                advantage functions: they gate themselves, and before-norm shaping needs the
                ungated group max.
        Returns:
            (B,) float32, 0 or in [NOVELTY_EPS, 1]; 0 while the reference set is below `warmup`.
        """
        keys = list(keys)
        z = check_unit_rows("embeddings", embeddings, len(keys))
        if correct is not None:
            correct = np.asarray(correct)
            if correct.shape != (len(keys),) or correct.dtype != np.bool_:
                raise ValueError(
                    f"correct must be a bool array of shape ({len(keys)},), got {correct.dtype} {correct.shape}"
                )
        out = self._score(keys, z)
        return out if correct is None else out * correct

    def score_then_update(self, keys: Sequence[str], embeddings: np.ndarray) -> np.ndarray:
        """`score` (ungated), then `update` with the same responses: what a training step does."""
        keys = list(keys)
        z = check_unit_rows("embeddings", embeddings, len(keys))
        out = self._score(keys, z)
        self._push(keys, z)
        return out

    def _score(self, keys: list[str], z: np.ndarray) -> np.ndarray:
        out = np.zeros(len(keys), dtype=np.float32)
        groups: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(k, []).append(i)
        for key, rows in groups.items():
            stored = self._mem.get(key)
            if stored is None:
                stored = np.zeros((0, z.shape[1]), dtype=STORED_DTYPE)
            if stored.shape[0] + len(rows) - 1 < self.warmup:
                continue
            if stored.shape[1] != z.shape[1]:
                raise ValueError(f"embedding dim {z.shape[1]} != stored dim {stored.shape[1]} for key {key!r}")
            hist = unit_rows_from_half(stored)  # (m, d) float32
            zi = z[rows]
            sims = zi @ np.concatenate([hist, zi]).T  # (g, m + g)
            m = hist.shape[0]
            sims[np.arange(len(rows)), m + np.arange(len(rows))] = -np.inf  # exclude itself
            nov = np.maximum(0.0, 1.0 - sims.max(axis=1))
            out[rows] = np.where(nov >= NOVELTY_EPS, nov, 0.0)
        return out

    def update(self, keys: Sequence[str], embeddings: np.ndarray) -> None:
        """Push every response (correct or not) into its key's ring buffer, in order."""
        keys = list(keys)
        self._push(keys, check_unit_rows("embeddings", embeddings, len(keys)))

    def _push(self, keys: list[str], z: np.ndarray) -> None:
        groups: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(k, []).append(i)
        for key, rows in groups.items():
            old = self._mem.get(key)
            new = z[rows[-self.capacity :]].astype(STORED_DTYPE)
            if old is not None:
                new = np.concatenate([old, new])[-self.capacity :]
            self._mem[key] = new

    def state_dict(self) -> dict[str, Any]:
        """Picklable plain-python/numpy state (the rows as stored, float16)."""
        return {"capacity": self.capacity, "warmup": self.warmup, "memory": {k: v.copy() for k, v in self._mem.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if d.get("capacity") != self.capacity or d.get("warmup") != self.warmup:
            raise ValueError(
                f"state has capacity/warmup {d.get('capacity')}/{d.get('warmup')}, "
                f"this memory {self.capacity}/{self.warmup}"
            )
        # a state written before float16 storage holds float32 rows: cast, as `_push` would have stored them
        self._mem = {str(k): np.asarray(v)[-self.capacity :].astype(STORED_DTYPE) for k, v in d["memory"].items()}


class RewardVarianceEMA:
    """g(x) = exp(-lambda * EMA_t Var[R(x)]) for the before-norm novelty variant (ExTra code, option A).

    EMA_t = (1 - rate) * EMA_{t-1} + rate * Var_t, per prompt key; an unseen key starts at Var_t.
    """

    def __init__(self, rate: float = 0.1, coef: float = 1.0) -> None:
        if not 0.0 < rate <= 1.0 or coef < 0:
            raise ValueError(f"rate = {rate!r} must be in (0, 1] and coef = {coef!r} >= 0")
        self.rate, self.coef = float(rate), float(coef)
        self._ema: dict[str, float] = {}

    def update(self, key: str, rewards: Sequence[float]) -> float:
        """Fold this step's group reward variance (population, ddof=0) in; return the new gate."""
        r = np.asarray(rewards, dtype=np.float64)
        if r.size == 0 or not np.all(np.isfinite(r)):
            raise ValueError(f"rewards for {key!r} must be a non-empty finite sequence, got {r.tolist()}")
        var = float(r.var())
        prev = self._ema.get(key)
        self._ema[key] = var if prev is None else (1 - self.rate) * prev + self.rate * var
        return self.gate(key)

    def gate(self, key: str) -> float:
        return float(np.exp(-self.coef * self._ema.get(key, 0.0)))

    def state_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "coef": self.coef, "ema": dict(self._ema)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.rate, self.coef, self._ema = float(d["rate"]), float(d["coef"]), dict(d["ema"])
