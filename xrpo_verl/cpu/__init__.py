"""The CPU platform: what makes verl run on CPU, loaded into every process of a run.

verl imports `register.py` through the `xrpo_cpu` entry point in every process (driver, Ray
workers, reward workers). It is inert unless a switch of `switches.py` is on; then it installs the
platform shims (`shims.py`), the `hf` rollout backend (`hf_rollout.py`) and, on vLLM's CPU build,
`vllm_cpu.py`. Nothing here imports the toy lab (`xrpo_verl.lab`): every Ray worker loads this
package, and a worker that imported the lab would pay for the tiny models and tasks it never uses.
`python -m xrpo_verl.cpu.vllm_cpu` checks a vLLM-on-CPU environment (`make vllm-env`).
"""
