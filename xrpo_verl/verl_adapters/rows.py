"""Prompt rows for the xrpo rounds, on verl's own TensorDict batches.

A dataloader batch (`PPOTrainer._next_train_batch`) is a TensorDict with one row per prompt:
dataset columns (`raw_prompt`, `reward_model`, `data_source`, `extra_info`, `index`, ...), a `uid`
and the `global_steps` NonTensorData. Rounds resubmit some of these rows with the same uid and
extra columns. TransferQueue silently drops a field that only some rows have, so every submitted
row carries every plugin column (`PLUGIN_COLUMNS`), with neutral values on plain rows.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.rl_dataset import collate_fn

from xrpo_verl.verl_adapters.agent_loops import COL_ICL_PROMPT, COL_OFFSET, COL_PREFIX_IDS

COL_KIND = "xrpo_kind"  # base | round | icl | guided
COL_PROMPT_KEY = "xrpo_prompt_key"  # stable id of the original prompt (memories are keyed by it, not by uid)
ROLLOUT_N = "__rollout_n__"  # popped by verl's AgentLoopWorkerTQ: sessions for this row
AGENT_NAME = "agent_name"
PLUGIN_COLUMNS = (COL_OFFSET, COL_ICL_PROMPT, COL_PREFIX_IDS, COL_KIND, COL_PROMPT_KEY, ROLLOUT_N, AGENT_NAME)
KINDS = ("base", "round", "icl", "guided")


def prompt_key(raw_prompt: Sequence[dict]) -> str:
    """Stable id of a prompt: a hash of its chat messages (uids are fresh uuid4s every fetch)."""
    text = json.dumps([dict(m) for m in raw_prompt], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


def user_text(raw_prompt: Sequence[dict]) -> str:
    """Text of the last user turn (what ICL retrieval embeds and what the ICL template wraps)."""
    for m in reversed(list(raw_prompt)):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            raise ValueError(f"ICL needs a text user turn, got content of type {type(content).__name__}")
    raise ValueError("raw_prompt has no user turn")


def to_rows(td: TensorDict) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Split a batch into per-row dicts and its scalar NonTensorData (e.g. `global_steps`)."""
    rows: list[dict[str, Any]] = [{} for _ in range(len(td))]
    scalars: dict[str, Any] = {}
    for key, value in td.items():
        if isinstance(value, NonTensorData):
            scalars[key] = value.data
        elif isinstance(value, NonTensorStack):
            for i in range(len(td)):
                rows[i][key] = value[i].data
        elif isinstance(value, torch.Tensor) and not value.is_nested:
            for i in range(len(td)):
                rows[i][key] = value[i]
        else:
            raise ValueError(f"column {key!r} of type {type(value).__name__} cannot be split into rows")
    return rows, scalars


def from_rows(rows: list[dict[str, Any]], scalars: dict[str, Any]) -> TensorDict:
    """Inverse of `to_rows`; all rows must have the same columns."""
    if not rows:
        raise ValueError("cannot build a batch from zero rows")
    keys = set(rows[0])
    for i, r in enumerate(rows):
        if set(r) != keys:
            raise ValueError(f"row {i} has columns {sorted(set(r) ^ keys)} that row 0 does not share")
    td = tu.get_tensordict(collate_fn(rows))
    for key, value in scalars.items():
        tu.assign_non_tensor_data(td, key, value)
    return td


def with_plugin_columns(
    row: dict[str, Any],
    *,
    kind: str,
    rollout_n: int,
    agent_name: str,
    offset: int = 0,
    icl_prompt: str = "",
    prefix_ids: Sequence[int] = (),
    key: str | None = None,
) -> dict[str, Any]:
    """A copy of `row` with every plugin column set (neutral defaults keep all rows homogeneous)."""
    if kind not in KINDS:
        raise ValueError(f"row kind {kind!r} is not one of {KINDS}")
    if rollout_n < 1:
        raise ValueError(f"rollout_n={rollout_n} must be >= 1")
    out = dict(row)
    out[COL_KIND] = kind
    out[ROLLOUT_N] = int(rollout_n)
    out[AGENT_NAME] = agent_name
    out[COL_OFFSET] = int(offset)
    out[COL_ICL_PROMPT] = icl_prompt
    out[COL_PREFIX_IDS] = [int(t) for t in prefix_ids]
    out[COL_PROMPT_KEY] = key if key is not None else prompt_key(row["raw_prompt"])
    return out


def dataset_row(row: dict[str, Any]) -> dict[str, Any]:
    """The dataset part of a row (plugin columns and uid removed), deep-copied for storage."""
    return {
        k: (v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v))
        for k, v in row.items()
        if k not in PLUGIN_COLUMNS and k != "uid"
    }


def guided_row(template: dict[str, Any], stored: dict[str, Any], *, uid: str) -> dict[str, Any]:
    """A batch row for a guided prompt: every dataset column comes from the guided prompt's own stored row.

    `template` is the dataloader row being replaced; only its set of columns is used. A column the
    stored row lacks is an error, never inherited (the official ExTra code scored guided suffixes
    against the replaced row's ground truth).
    """
    wanted = set(template) - set(PLUGIN_COLUMNS) - {"uid"}
    missing = sorted(wanted - set(stored))
    if missing:
        raise ValueError(
            f"guided prompt {uid} lacks dataset columns {missing}; refusing to inherit them from another row"
        )
    out = {k: (stored[k].clone() if isinstance(stored[k], torch.Tensor) else copy.deepcopy(stored[k])) for k in wanted}
    out["uid"] = uid
    return out
