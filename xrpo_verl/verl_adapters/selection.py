"""Prompt selection for the xrpo step (`algorithm.xrpo.planner.selection=history`).

The dataloader hands the step C*B candidate rows; `PromptSelector.choose` keeps the B whose
groups are most likely mixed, I_q(n) of `xrpo_verl.planner.PromptHistory`, and `record` folds the
step's bare-prompt rewards back in. Prompts are keyed by `rows.prompt_key` (uids are fresh every
fetch) and given a slot of the history's arrays on first sight; the slots are bounded by the
dataset's size, so the memory is set by the configuration, never by the run's length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xrpo_verl import planner


class PromptSelector:
    """`planner.PromptHistory` over prompt keys; `capacity` is the number of distinct prompts (the dataset)."""

    def __init__(self, capacity: int, *, half_life: float) -> None:
        self.capacity = int(capacity)
        self.half_life = float(half_life)
        self.history = planner.PromptHistory(self.capacity, half_life=self.half_life)
        self.slots: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.slots)

    def _slots(self, keys: Sequence[str]) -> np.ndarray:
        out = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys):
            slot = self.slots.get(key)
            if slot is None:
                if len(self.slots) == self.capacity:
                    raise ValueError(
                        f"prompt selection has seen {self.capacity} distinct prompts, the dataset's size; a new "
                        "prompt key means the rows changed between fetches (rows.prompt_key hashes raw_prompt)"
                    )
                slot = self.slots[key] = len(self.slots)
            out[i] = slot
        return out

    def scores(self, keys: Sequence[str], step: int, n: int) -> np.ndarray:
        """I_q(n) of each key at `step` (an unseen prompt scores the prior's)."""
        return self.history.score(self._slots(keys), step, n)

    def choose(
        self,
        keys: Sequence[str],
        keep: int,
        step: int,
        n: int,
        rng: np.random.Generator,
        score: np.ndarray | None = None,
    ) -> np.ndarray:
        """Row indices (into `keys`, sorted) of the `keep` candidates with the largest I_q(n).

        A prompt that appears twice among the candidates (the sampler crossed an epoch) is kept at most
        once while other candidates remain. `score`: `scores(keys, step, n)`, where the caller has it.
        """
        if keep > len(keys):
            raise ValueError(f"cannot keep {keep} of {len(keys)} candidate prompts")
        score = self.scores(keys, step, n) if score is None else np.asarray(score, dtype=np.float64)
        first = np.zeros(len(keys), dtype=bool)
        first[np.unique(np.asarray(keys, dtype=object), return_index=True)[1]] = True
        # a repeated prompt ranks below every first occurrence
        return planner.select_by_signal(np.where(first, score, score - 2.0), keep, rng)

    def record(self, keys: Sequence[str], correct: Sequence[bool], step: int) -> int:
        """Fold in one rollout per entry (its prompt key and whether it is a verified success); returns
        the number of prompts recorded."""
        if len(keys) != len(correct):
            raise ValueError(f"{len(keys)} keys but {len(correct)} outcomes")
        if not len(keys):
            return 0
        slots = self._slots(keys)
        uniq, inverse = np.unique(slots, return_inverse=True)
        successes = np.bincount(inverse, weights=np.asarray(correct, dtype=np.float64), minlength=uniq.size)
        trials = np.bincount(inverse, minlength=uniq.size).astype(np.float64)
        self.history.record(uniq, successes, trials, step)
        return int(uniq.size)

    def state_dict(self) -> dict:
        h = self.history
        n = len(self.slots)
        return {
            "capacity": self.capacity,
            "half_life": self.half_life,
            "keys": list(self.slots),
            "successes": h.successes[:n].copy(),
            "failures": h.failures[:n].copy(),
            "last_step": h.last_step[:n].copy(),
        }

    def load_state_dict(self, d: dict) -> None:
        if int(d["capacity"]) > self.capacity:
            raise ValueError(
                f"the checkpoint's prompt history holds {d['capacity']} prompts, "
                f"more than this dataset's {self.capacity}"
            )
        if float(d["half_life"]) != self.half_life:
            raise ValueError(
                f"the checkpoint's prompt history has half-life {d['half_life']} steps, this run {self.half_life}; "
                "resuming would not be exact"
            )
        keys = list(d["keys"])
        self.slots = {k: i for i, k in enumerate(keys)}
        n = len(keys)
        self.history.successes[:] = 0
        self.history.failures[:] = 0
        self.history.last_step[:] = 0
        self.history.successes[:n] = d["successes"]
        self.history.failures[:n] = d["failures"]
        self.history.last_step[:n] = d["last_step"]
