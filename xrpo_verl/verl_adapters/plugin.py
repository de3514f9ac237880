"""The `verl.plugins` entry point.

`import verl` in any process (driver, Ray workers, reward workers) imports this module, and
importing it fills verl's registries with our names. verl swallows plugin load errors at
DEBUG level, so `tests/test_plugin_registration.py` checks the registries from a fresh
process. Modules imported here must keep heavy imports (sentence-transformers, faiss) lazy.
"""

import importlib

# Each module registers its names at import time.
REGISTRATION_MODULES = (
    "xrpo_verl.local.register",  # first: CPU platform + `hf` rollout (inert unless XRPO_VERL_CPU=1)
    "xrpo_verl.verl_adapters.estimators",  # adv estimators: xrpo, extra, xrpo_extra
    "xrpo_verl.rewards.manager",  # reward-loop manager: xrpo
    "xrpo_verl.verl_adapters.agent_loops",  # agent loops: xrpo_icl, extra_prefix
    "xrpo_verl.verl_adapters.trainer",  # trainer mode: xrpo
)

LOADED = []
for _name in REGISTRATION_MODULES:
    importlib.import_module(_name)
    LOADED.append(_name)
