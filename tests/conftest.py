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
