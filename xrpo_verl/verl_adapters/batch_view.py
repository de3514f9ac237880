"""The step's trajectories, read once from TransferQueue into dense tensors and lists.

`XrpoTrainer._compute_advantage` builds one `BatchView` and hands it to the advantage, novelty,
ICL-corpus and prefix code, which never touch TransferQueue themselves. `correct` (a verified
success) comes from the scorer's `acc` in each row's reward_extra_info (`rewards/result.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from tensordict import TensorDict

from xrpo_verl import advantages as adv_lib
from xrpo_verl.rewards.result import SUCCESS_ACC
from xrpo_verl.verl_adapters import rows as R


@dataclass
class BatchView:
    """B rows (verl's padding rows included, `valid` False), T = the longest response."""

    uids: list[str]  # GRPO group id per row
    keys: list[str]  # original prompt id per row (memories are keyed by it)
    kinds: list[str]  # base | round | icl | guided
    raw_prompts: list  # chat messages per row
    responses: list[torch.Tensor]  # (T_i,) int64, the full response (guided: prefix + suffix)
    prompts: list[torch.Tensor] | None  # (P_i,) int64 prompt ids, when fetched
    entropy: torch.Tensor | None  # (B, T) float, response-aligned H_t of pi_old, when fetched
    mask: torch.Tensor  # (B, T) float, 1 on generated tokens (0 on a guided row's forced prefix)
    rm_scores: torch.Tensor  # (B, T) float, the reward on the last token
    old_log_probs: torch.Tensor  # (B, T)
    valid: torch.Tensor  # (B,) bool, False on verl's padding rows
    acc: torch.Tensor  # (B,) float, the scorer's verdict of full correctness (reward_extra_info["acc"])
    scores: torch.Tensor = field(init=False)  # (B,) sequence reward R_i
    correct: torch.Tensor = field(init=False)  # (B,) bool, a verified success (acc >= 1) on valid rows
    not_guided: torch.Tensor = field(init=False)  # (B,) bool
    seq_logp_mean: torch.Tensor = field(init=False)  # (B,) s(y_i) over generated tokens

    def __post_init__(self) -> None:
        self.scores = self.rm_scores.sum(-1)
        # from the scorer's verdict, never from the score: a partial-credit response is not a success
        self.correct = (self.acc >= SUCCESS_ACC) & self.valid
        self.not_guided = torch.tensor([k != "guided" for k in self.kinds], dtype=torch.bool)
        self.seq_logp_mean = adv_lib.sequence_mean_logprob(self.old_log_probs, self.mask)

    @classmethod
    def from_tq(cls, data: TensorDict, tags: list[dict]) -> BatchView:
        """From a `tq.kv_batch_get` result (nested tensors) and the batch's tags."""

        def dense(name):
            return data[name].to_padded_tensor(0.0)

        def column(name):  # LinkedList / NonTensorStack / ndarray, depending on the TQ backend
            return [getattr(v, "data", v) for v in list(data[name])]

        valid = torch.tensor([not t.get("is_padding", False) for t in tags], dtype=torch.bool)
        return cls(
            uids=[str(u) for u in column("uid")],
            keys=[str(k) for k in column(R.COL_PROMPT_KEY)],
            kinds=[str(k) for k in column(R.COL_KIND)],
            raw_prompts=column("raw_prompt"),
            responses=list(data["responses"].unbind()),
            prompts=list(data["prompts"].unbind()) if "prompts" in data.keys() else None,
            entropy=dense("entropy").float() if "entropy" in data.keys() else None,
            mask=dense("response_mask").float(),
            rm_scores=dense("rm_scores").float(),
            old_log_probs=dense("old_log_probs").float(),
            valid=valid,
            acc=torch.tensor(scorer_acc(column("extra_fields"), valid.tolist()), dtype=torch.float32),
        )

    def groups(self, rows: torch.Tensor) -> dict[str, list[int]]:
        """uid -> indices of the selected rows (a (B,) bool mask), in row order."""
        out: dict[str, list[int]] = {}
        for i in torch.nonzero(rows).flatten().tolist():
            out.setdefault(self.uids[i], []).append(int(i))
        return out


def scorer_acc(extra_fields: list, valid: list[bool]) -> list[float]:
    """reward_extra_info["acc"] per row (0 on padding rows); a valid row without it is an error."""
    out = []
    for i, (extra, ok) in enumerate(zip(extra_fields, valid, strict=True)):
        info = (extra.get("reward_extra_info", None) or {}) if isinstance(extra, dict) else {}
        if not ok:
            out.append(0.0)
        elif "acc" in info:
            out.append(float(info["acc"]))
        else:
            raise ValueError(
                f"row {i} has no 'acc' in its reward_extra_info (keys {sorted(info)}): the xrpo trainer counts a "
                "success only from the scorer's verdict; use reward.reward_manager.name=xrpo or a scorer that "
                "returns 'acc' (verl's naive manager writes a float score as acc)"
            )
    return out
