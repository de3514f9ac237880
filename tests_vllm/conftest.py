"""verl's vLLM rollout on vLLM's CPU build: run in `.venv-vllm` only (`make test-vllm`).

Kept out of `tests/` so that `make test` in `.venv` never collects it; run here in another
environment, every test is skipped with the line naming the environment to use.
"""

from pathlib import Path

import pytest

from xrpo_verl.local import vllm_cpu

PROBLEM = vllm_cpu.environment_problem(True, True, vllm_cpu.installed_vllm(), vllm_cpu.cpu_flags())


def pytest_collection_modifyitems(config, items):
    if PROBLEM:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=PROBLEM))


@pytest.fixture(scope="session")
def untied_model_dir() -> Path:
    """The warmed-up tiny model with its output layer untied (a weight push must carry lm_head too)."""
    from xrpo_verl.local import tiny_model

    return vllm_cpu.untied_copy(tiny_model.build())


@pytest.fixture(scope="session")
def arith_data(tmp_path_factory) -> tuple[Path, Path]:
    from xrpo_verl.local import arith

    root = tmp_path_factory.mktemp("arith")
    train = arith.write_parquet(root / "train.parquet", 64, seed=11, split="train")
    val = arith.write_parquet(root / "val.parquet", 16, seed=12, split="test")
    return train, val
