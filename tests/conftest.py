"""Suite-wide settings: one torch thread (the CI machine has 2 shared cores) and no hub access."""

import os

for _var, _value in {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}.items():
    os.environ.setdefault(_var, _value)

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # the sandbox tests need no torch
    pass


# The modules that launch verl's trainer, longest first (the GRPO run trains 40 steps): with two
# workers one takes the GRPO module while the other works through the rest.
LONGEST_FIRST = ("e2e/test_grpo.py", "e2e/test_xrpo_modes.py", "e2e/test_code_rl.py")


def _rank(item) -> int:
    path = item.path.as_posix()
    for rank, name in enumerate(LONGEST_FIRST):
        if path.endswith(name):
            return rank
    return len(LONGEST_FIRST) + (not item.get_closest_marker("slow"))


def pytest_collection_modifyitems(config, items):
    """The trainer launches first, longest first, then other modules with slow tests, each module
    in its own order: with `make test` (`-n 2 --dist loadfile --no-loadscope-reorder`) the long
    runs start at once and the short modules fill the gaps around them."""
    items.sort(key=_rank)
