#!/usr/bin/env bash
# Run the whole test suite: real RabbitMQ, real worker processes, real Spark, a real Docker
# engine. Extra arguments go to pytest (e.g. scripts/test.sh -k orphan, or --soak).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [[ -x scripts/ensure_dockerd.sh ]]; then
  eval "export $(scripts/ensure_dockerd.sh | tail -n 1)"
fi
exec .venv/bin/python -m pytest "$@"
