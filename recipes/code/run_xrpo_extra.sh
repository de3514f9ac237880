#!/usr/bin/env bash
# Code RL: XRPO + ExTra on LiveCodeBench compute-matched to code GRPO; judged on the sandbox service
# (start it first on every node: recipes/code/start_sandbox.sh).
# Hardware: set by MODEL (recipes/models/$MODEL.yaml, printed at start). Default qwen3_1.7b:
#   1 node x 8 GPUs with 80 GB. qwen2.5_7b_instruct: 2 nodes x 8 x 80 GB (Ray cluster, see
#   recipes/README.md). llama3.2_3b: 1 node x 8 x 80 GB.
# Usage: MODEL=qwen3_1.7b DATA_DIR=/data/xrpo bash recipes/code/run_xrpo_extra.sh [hydra overrides...]
#   --check validates the composed config on CPU instead (CI does this for every recipe);
#   --print shows the full command.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/../launch.py" code/xrpo_extra --model "${MODEL:-qwen3_1.7b}" "$@"
