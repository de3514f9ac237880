#!/usr/bin/env bash
# Hardware: a laptop CPU (2 cores are enough); no GPU, no model download.
# Train one CPU recipe through verl's real trainer (python -m verl.trainer.main_ppo) with the
# `hf` rollout backend on the tiny model (built and cached on first use). The recipes are package
# data in xrpo_verl/lab/recipes/:
#   recipes/cpu/run.sh grpo|xrpo|extra|xrpo_extra [--steps N] [--out DIR] [hydra.overrides ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
recipe="${1:?usage: recipes/cpu/run.sh grpo|xrpo|extra|xrpo_extra [--steps N] [--out DIR] [overrides...]}"
shift
PY="${PYTHON:-.venv/bin/python}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$PY" -m xrpo_verl.lab train --recipe "$recipe" --out "outputs/cpu_$recipe" "$@"
