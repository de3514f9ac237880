"""The CPU platform's entry point under its old name: `xrpo_verl.cpu.register` does the work.

An environment installed before the platform moved still names this module in its `xrpo_cpu`
entry point until the package is installed again, and scripts may name it in
`VERL_USE_EXTERNAL_MODULES`. Without this module verl would skip the platform silently (it logs
plugin import errors at DEBUG only) and the run would fail later, inside a Ray worker.
"""

from xrpo_verl.cpu.register import enable, register_hf_rollout  # noqa: F401  (importing it registers)
