"""Fixtures for the unit tests of the CPU platform (a model from the toy lab to serve)."""

from pathlib import Path

import pytest

from xrpo_verl.lab import tiny_model

# A random-init model with the real tokenizer and architecture but smaller: enough for unit
# tests of the rollout server; no warm-up, so building it takes seconds.
MICRO = tiny_model.TinyModelConfig(hidden_size=64, intermediate_size=128, num_layers=2, sft_steps=0)


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory) -> Path:
    return tiny_model.build(MICRO, root=tmp_path_factory.mktemp("micro"), verbose=False)
