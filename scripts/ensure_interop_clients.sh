#!/usr/bin/env bash
# The AMQP clients of other stacks the interop tests call osrdyne with (tests/interop/):
# rabbitmq-c's command-line tools (amqp-publish, amqp-consume...: Debian's amqp-tools, named
# librabbitmq-tools in newer releases), Node.js with npm, and Node's amqplib, installed into
# tests/interop/node/node_modules (ignored by git) from the committed package-lock.json.
# pika, the Python one, comes with the dev extra (scripts/setup.sh). Idempotent; quiet unless
# something fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_quiet.sh

log() { echo "ensure_interop_clients: $*" >&2; }

missing=()
if ! command -v amqp-publish >/dev/null; then
  if apt-cache show librabbitmq-tools >/dev/null 2>&1; then
    missing+=(librabbitmq-tools)
  else
    missing+=(amqp-tools)
  fi
fi
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

node_dir=tests/interop/node
stamp=$node_dir/node_modules/.osrdyne-installed
if [[ ! -f $stamp || $node_dir/package-lock.json -nt $stamp ]]; then
  log "installing Node's amqplib into $node_dir/node_modules"
  (cd "$node_dir" && quietly npm ci --no-audit --no-fund --loglevel=error)
  touch "$stamp"
fi
