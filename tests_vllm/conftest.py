"""verl's vLLM rollout on vLLM's CPU build: run in `.venv-vllm` only (`make test-vllm`).

Kept out of `tests/` so that `make test` in `.venv` never collects it; run here in another
environment, every test is skipped with the line naming the environment to use.
"""

from pathlib import Path

import pytest

from xrpo_verl.cpu import vllm_cpu

PROBLEM = vllm_cpu.environment_problem(True, True, vllm_cpu.installed_vllm(), vllm_cpu.cpu_flags())


def pytest_collection_modifyitems(config, items):
    if PROBLEM:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=PROBLEM))


SHM = Path("/dev/shm")
# vLLM's message queues (psm_*) and verl's weight bucket: a trainer that ends
# while vLLM's engine is still up leaves them behind, hundreds of MB of RAM each launch.
SHM_PATTERNS = ("psm_*", "verl_weights_*")


def _shm_files() -> set[Path]:
    return {f for pattern in SHM_PATTERNS for f in SHM.glob(pattern)} if SHM.is_dir() else set()


def _mapped_anywhere(name: str) -> bool:
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            if name in maps.read_text():
                return True
        except OSError:
            continue
    return False


@pytest.fixture(scope="session", autouse=True)
def remove_leaked_shared_memory():
    """Remove what this session's launches left in /dev/shm and no live process maps."""
    before = _shm_files()
    yield
    for f in _shm_files() - before:
        if not _mapped_anywhere(f.name):
            f.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def untied_model_dir() -> Path:
    """The warmed-up tiny model with its output layer untied (a weight push must carry lm_head too)."""
    from xrpo_verl.lab import tiny_model

    return tiny_model.untied_copy(tiny_model.build())


@pytest.fixture(scope="session")
def arith_data(tmp_path_factory) -> tuple[Path, Path]:
    from xrpo_verl.lab import arith

    root = tmp_path_factory.mktemp("arith")
    train = arith.write_parquet(root / "train.parquet", 64, seed=11, split="train")
    val = arith.write_parquet(root / "val.parquet", 16, seed=12, split="test")
    return train, val
