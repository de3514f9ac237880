"""Fixtures for the CPU end-to-end tests: the tiny arithmetic model."""

from pathlib import Path

import pytest

from xrpo_verl.lab import tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The default warmed-up tiny model, from the shared cache (built once, ~2 min)."""
    return tiny_model.build()
