#!/usr/bin/env bash
# Start the code-judging sandbox service on this node; run one on every node of the cluster and
# give the reward workers all URLs: reward.reward_kwargs.code.url=[http://node1:8080,http://node2:8080]
# (requests are spread over them; one that a node refused goes to the next).
# Hardware: CPU only; --max-concurrency defaults to the node's cores (SANDBOX_CONCURRENCY overrides).
# Stop with SIGTERM (Ctrl-C, `kill`, or a container/systemd stop): running requests finish, then the
# sandbox's containers, cgroups and temp dirs are removed. Keep the port on a private network:
# the service has no authentication.
# Usage: bash recipes/code/start_sandbox.sh [--port 8080] [--backend auto|docker|bwrap] [--host 0.0.0.0]
set -euo pipefail
PORT=8080; BACKEND=auto; HOST=0.0.0.0
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --backend) BACKEND="$2"; shift 2 ;;
    --host) HOST="$2"; shift 2 ;;
    *) echo "unknown option $1 (allowed: --port N, --backend auto|docker|bwrap, --host ADDR)" >&2; exit 2 ;;
  esac
done
CONCURRENCY="${SANDBOX_CONCURRENCY:-$(nproc)}"
if [ "$BACKEND" != bwrap ]; then "${PYTHON:-python3}" -m sandbox build-image || true; fi
exec "${PYTHON:-python3}" -m sandbox serve --host "$HOST" --port "$PORT" --backend "$BACKEND" \
  --max-concurrency "$CONCURRENCY"
