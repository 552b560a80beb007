#!/usr/bin/env bash
# Everything the demo and the tests need, installed by the project itself: a virtualenv with
# the package and its extras, Java for Spark, and a RabbitMQ broker with its management API.
# Idempotent and quiet when there is nothing to do. Source it or run it.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "setup: $*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.osrdyne-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  log "installing osrdyne and its dependencies into .venv (first run takes a few minutes)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[all]"
  touch "$stamp"
fi

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)     # Spark
[[ -x /bin/busybox ]] || missing+=(busybox-static)                    # docker test image
if (( ${#missing[@]} )); then
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

scripts/ensure_broker.sh
