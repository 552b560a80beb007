#!/usr/bin/env bash
# Make sure a RabbitMQ broker with the management plugin answers, and print where it is.
#
# With RABBITMQ_URL set, that broker is used as it is (its management API is expected at
# RABBITMQ_MANAGEMENT_URL, default http://<host>:15672). Otherwise a local broker on
# 127.0.0.1:5672: installed with apt-get where missing, started when stopped, and its
# management plugin enabled. Idempotent; used by the demo, the tests and CI alike.
set -euo pipefail

log() { echo "ensure_broker: $*" >&2; }

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 "$limit"); do "$@" && return 0; sleep 1; done
  log "timed out waiting for $what"; return 1
}

management_answers() {
  curl -fsS -u guest:guest -o /dev/null "http://127.0.0.1:15672/api/overview" 2>/dev/null
}

if [[ -n "${RABBITMQ_URL:-}" ]]; then
  log "using the broker at RABBITMQ_URL"
  exit 0
fi

if ! command -v curl >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
fi

if ! port_open 127.0.0.1 5672; then
  if ! command -v rabbitmq-server >/dev/null; then
    log "installing rabbitmq-server"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  fi
  if ! port_open 127.0.0.1 5672; then
    log "starting rabbitmq-server"
    rabbitmq-server -detached || true
    wait_for 90 "RabbitMQ on 127.0.0.1:5672" port_open 127.0.0.1 5672
    rabbitmqctl await_startup >/dev/null 2>&1 || true
  fi
fi

if ! management_answers; then
  log "enabling rabbitmq_management"
  rabbitmq-plugins enable rabbitmq_management >/dev/null
  wait_for 60 "the management API on 127.0.0.1:15672" management_answers
fi
log "RabbitMQ and its management API answer on 127.0.0.1"
