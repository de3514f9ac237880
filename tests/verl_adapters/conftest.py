"""Fixtures of the verl adapter tests."""

import hashlib

import numpy as np
import pytest


class HashEncoder:
    """A deterministic stand-in for MiniLM: unit vectors from each text's SHA-256 (loading the real
    encoder would only add seconds; these tests check what the state does with vectors)."""

    def encode(self, texts):
        out = np.stack(
            [
                np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:16].astype(np.float32) - 127
                for t in texts
            ]
        )
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture
def hash_encoder():
    return HashEncoder()
