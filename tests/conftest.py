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


def pytest_collection_modifyitems(config, items):
    """Modules with slow tests first, in their own order: with `-n 2 --dist loadfile` (make test)
    the long trainer runs start at once and the short modules fill the gaps around them."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
