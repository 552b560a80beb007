#!/usr/bin/env bash
# The checks that keep the house: lint (ruff check), formatting (ruff format) and types (mypy
# strict, on the packages), on the virtualenv scripts/setup.sh made. CI runs it before the
# tests, so a change that breaks any of them does not land. Quiet when all is well.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --no-error-summary
echo "check: ruff and mypy are clean" >&2
