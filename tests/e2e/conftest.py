"""Fixtures for the CPU end-to-end tests: the tiny model and generated arithmetic parquet."""

from pathlib import Path

import pytest

from xrpo_verl.local import arith, tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The default warmed-up tiny model, from the shared cache (built once, ~2 min)."""
    return tiny_model.build()


@pytest.fixture(scope="session")
def arith_data(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("arith")
    train = arith.write_parquet(root / "train.parquet", 64, seed=11, split="train")
    val = arith.write_parquet(root / "val.parquet", 16, seed=12, split="test")
    return train, val
