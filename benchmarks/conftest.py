"""Shared pieces of the benchmarks."""

from __future__ import annotations

import pytest


def byte_tokenizer():
    """A byte-level tokenizer with no merges: every byte is one token, enough to round-trip code."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}, merges=[]))
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.add_special_tokens(["<pad>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>")


def response_batch(tok, texts: list[str], data_sources: list[str], ground_truths: list[str], extra_infos: list[dict]):
    """The `DataProto` a reward manager receives: right-padded responses after a 2-token prompt."""
    import numpy as np
    import torch
    from verl import DataProto

    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, ids))
    responses = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x in ids])
    prompts = torch.zeros(len(ids), 2, dtype=torch.long)
    mask = torch.cat([torch.ones(len(ids), 2, dtype=torch.long), (responses != tok.pad_token_id).long()], dim=1)
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(data_sources, dtype=object),
            "reward_model": np.array([{"ground_truth": g} for g in ground_truths], dtype=object),
            "extra_info": np.array(extra_infos, dtype=object),
        },
    )


@pytest.fixture(name="byte_tokenizer", scope="session")
def byte_tokenizer_fixture():
    return byte_tokenizer()


@pytest.fixture(name="response_batch", scope="session")
def response_batch_fixture():
    return response_batch
