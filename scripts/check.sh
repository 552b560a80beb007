#!/usr/bin/env bash
# The checks that keep the house: lint (ruff check), formatting (ruff format), types (mypy
# strict, on the packages), layers (import-linter's contracts, in pyproject.toml) and sizes
# (scripts/size_bounds.py: modules up to 500 lines, classes up to 300), on the virtualenv
# scripts/setup.sh made. CI runs it before the tests, so a change that breaks any
# of them does not land. Quiet when all is well.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --no-error-summary
# lint-imports prints its banner and every contract: shown only when one is broken.
if ! layers=$(.venv/bin/lint-imports --no-cache 2>&1); then
    echo "$layers" >&2
    exit 1
fi
.venv/bin/python scripts/size_bounds.py
echo "check: ruff, mypy, the import contracts and the size bounds are clean" >&2
