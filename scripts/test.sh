#!/usr/bin/env bash
# Run the whole test suite: real RabbitMQ, real worker processes, real Spark, a real Docker
# engine. Extra arguments go to pytest (e.g. scripts/test.sh -k orphan, or --soak).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The systemd driver's tests boot a real systemd in a container: its tools and its root
# (debootstrap, once, about two minutes) are made here rather than inside a test's time.
scripts/ensure_systemd.sh build
if [[ -x scripts/ensure_dockerd.sh ]]; then
  eval "export $(scripts/ensure_dockerd.sh | tail -n 1)"
fi
exec .venv/bin/python -m pytest "$@"
