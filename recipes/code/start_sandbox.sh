#!/usr/bin/env bash
# Start the code-judging sandbox as a service on this node (run on every node of the cluster).
# Hardware: CPU only; size --max-concurrency to the node's free cores (default: cores / 2).
# Usage: bash recipes/code/start_sandbox.sh [--port 8080] [--backend auto|docker|bwrap]
set -euo pipefail
PORT=8080; BACKEND=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --backend) BACKEND="$2"; shift 2 ;;
    *) echo "unknown option $1 (allowed: --port N, --backend auto|docker|bwrap)" >&2; exit 2 ;;
  esac
done
CONCURRENCY="${SANDBOX_CONCURRENCY:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}"
if [ "$BACKEND" != bwrap ]; then "${PYTHON:-python3}" -m sandbox build-image || true; fi
exec "${PYTHON:-python3}" -m sandbox serve --host 0.0.0.0 --port "$PORT" --backend "$BACKEND" \
  --max-concurrency "$CONCURRENCY"
