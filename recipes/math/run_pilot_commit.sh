#!/usr/bin/env bash
# Math RL baseline: Pilot-Commit (pilot B prompts with 4 rollouts, commit 12 more to those with signal).
# Hardware: set by MODEL (recipes/models/$MODEL.yaml, printed at start). Default qwen3_1.7b:
#   1 node x 8 GPUs with 80 GB. qwen2.5_7b_instruct: 2 nodes x 8 x 80 GB (Ray cluster, see
#   recipes/README.md). llama3.2_3b: 1 node x 8 x 80 GB.
# Usage: MODEL=qwen3_1.7b DATA_DIR=/data/xrpo bash recipes/math/run_pilot_commit.sh [hydra overrides...]
#   --check validates the composed config on CPU instead (CI does this for every recipe);
#   --print shows the full command.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/../launch.py" math/pilot_commit --model "${MODEL:-qwen3_1.7b}" "$@"
