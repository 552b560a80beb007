#!/usr/bin/env bash
# The main job: a controller with the subprocess driver, keyed workers started on demand,
# real queries answered. Extra arguments go to scripts/demo.py (e.g. --keep-running).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
