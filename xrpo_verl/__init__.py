"""xrpo-verl: XRPO and ExTra exploration for RL with verifiable rewards on verl.

The algorithm modules (planner, advantages, novelty, icl, prefix, metrics, embeddings,
config) never import verl or ray. Only `verl_adapters/`, `rewards/manager.py`, `cpu/`
and `lab/` do; `verl_adapters/plugin.py` is the `verl.plugins` entry point.
"""

__version__ = "0.1.0"
