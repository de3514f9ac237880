"""Round and guided rows on verl's real dataloader batch format (collate_fn → TensorDict)."""

import numpy as np
import pytest
import torch
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.rl_dataset import collate_fn

from xrpo_verl.prefix import GuidedPrompt
from xrpo_verl.verl_adapters import rows as R


def _dataset_rows():
    out = []
    for i, (q, gt) in enumerate([("1+1", "2"), ("3*4", "12"), ("9-5", "4")]):
        out.append(
            {
                "data_source": f"arith{i}",
                "reward_model": {"ground_truth": gt, "style": "rule"},
                "extra_info": {"index": i, "split": "train"},
                "raw_prompt": [{"role": "user", "content": f"What is {q}?"}],
                "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
                "index": i,
                "tools_kwargs": {},
                "interaction_kwargs": {},
            }
        )
    return out


def _batch():
    d = collate_fn(_dataset_rows())
    d["uid"] = np.array([f"uid{i}" for i in range(3)], dtype=object)
    td = tu.get_tensordict(d)
    tu.assign_non_tensor_data(td, "global_steps", 7)
    return td


def test_rows_round_trip_keeps_columns_and_scalars():
    rows, scalars = R.to_rows(_batch())
    assert scalars == {"global_steps": 7}
    assert rows[1]["reward_model"]["ground_truth"] == "12" and rows[2]["uid"] == "uid2"
    td = R.from_rows(rows, scalars)
    again, sc = R.to_rows(td)
    assert sc == scalars and [r["extra_info"] for r in again] == [r["extra_info"] for r in rows]


def test_round_rows_carry_every_plugin_column_and_a_per_row_n():
    rows, scalars = R.to_rows(_batch())
    sub = [
        R.with_plugin_columns(rows[0], kind="round", rollout_n=3, agent_name="single_turn_agent", offset=8),
        R.with_plugin_columns(rows[2], kind="icl", rollout_n=1, agent_name="xrpo_icl", offset=8, icl_prompt="ex"),
    ]
    td = R.from_rows(sub, scalars)
    assert list(td["uid"]) == ["uid0", "uid2"]  # same uid as round 1: same GRPO group
    assert [x for x in td[R.ROLLOUT_N]] == [3, 1]
    assert [x for x in td[R.COL_PREFIX_IDS]] == [[], []]
    assert set(R.PLUGIN_COLUMNS) <= set(td.keys())
    assert td[R.COL_PROMPT_KEY][0] == R.prompt_key(rows[0]["raw_prompt"]) != td[R.COL_PROMPT_KEY][1]
    with pytest.raises(ValueError, match="columns"):
        R.from_rows([sub[0], rows[1]], scalars)  # a plain row beside a plugin row would lose fields in TQ


def test_guided_row_never_inherits_the_replaced_rows_ground_truth():
    """The official ExTra bug: an injected guided prompt kept the replaced row's ground truth."""
    rows, _ = R.to_rows(_batch())
    source, replaced = rows[1], rows[2]  # prefix of "3*4" (gt 12) injected into the slot of "9-5" (gt 4)
    stored = R.dataset_row(source)
    gp = GuidedPrompt(
        prompt_ids=[1, 2],
        prefix_ids=[5, 6],
        original_prompt_id=R.prompt_key(source["raw_prompt"]),
        uid="g1",
        source_row=stored,
    )
    g = R.guided_row(replaced, gp.source_row, uid=gp.uid)
    row = R.with_plugin_columns(
        g, kind="guided", rollout_n=8, agent_name="extra_prefix", prefix_ids=gp.prefix_ids, key=gp.original_prompt_id
    )
    assert row["reward_model"]["ground_truth"] == "12"
    assert row["data_source"] == "arith1" and row["extra_info"] == {"index": 1, "split": "train"}
    assert row["raw_prompt"] == source["raw_prompt"] and row["uid"] == "g1"
    assert row[R.COL_PROMPT_KEY] == R.prompt_key(source["raw_prompt"])
    td = R.from_rows(
        [row, R.with_plugin_columns(rows[0], kind="base", rollout_n=4, agent_name="single_turn_agent")],
        {"global_steps": 7},
    )
    assert td["reward_model"][0]["ground_truth"] == "12" and td["reward_model"][1]["ground_truth"] == "2"
    stored.pop("data_source")
    with pytest.raises(ValueError, match="data_source"):
        R.guided_row(replaced, stored, uid="g2")  # a missing column is an error, never inherited


def test_bad_rows_are_rejected():
    rows, _ = R.to_rows(_batch())
    with pytest.raises(ValueError, match="kind"):
        R.with_plugin_columns(rows[0], kind="extra", rollout_n=1, agent_name="a")
    with pytest.raises(ValueError, match="rollout_n"):
        R.with_plugin_columns(rows[0], kind="base", rollout_n=0, agent_name="a")
    with pytest.raises(ValueError, match="user turn"):
        R.user_text([{"role": "system", "content": "x"}])
