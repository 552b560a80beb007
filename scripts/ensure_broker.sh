#!/usr/bin/env bash
# Make sure a RabbitMQ broker with the management plugin answers, with an open-files limit fit
# for many quorum queues, and print where it is.
#
#   scripts/ensure_broker.sh                 the shared RabbitMQ 3.10 on 127.0.0.1:5672
#   scripts/ensure_broker.sh --version 4     RabbitMQ 4.0 on 127.0.0.1:5700 (beside it)
#   scripts/ensure_broker.sh --version 4 --stop
#
# Either way the last lines on stdout are where it is, for the demo and the tests:
#   RABBITMQ_URL=amqp://guest:guest@127.0.0.1:<port>/%2F
#   RABBITMQ_MANAGEMENT_URL=http://127.0.0.1:<port>
# and every decision is said on stderr. Idempotent; used by the demo, the tests and CI alike.
#
# 3.10 (Debian 12's package, the default): with RABBITMQ_URL set, that broker is used as it is
# (its management API is expected at RABBITMQ_MANAGEMENT_URL, default http://<host>:15672).
# Otherwise the local node on 127.0.0.1:5672: installed with apt-get where missing, started
# when stopped, restarted when it no longer answers (a wedged node: port closed or management
# API silent), its management plugin enabled, and (re)started with the open-files limit
# RabbitMQ's production checklist asks for (RABBITMQ_NOFILE, default 65536, or the highest the
# machine allows). A node running with a lower limit is restarted to raise it unless
# OSRDYNE_KEEP_BROKER=1. It is shared (other people's tests, the demo): `--stop` refuses it.
#
# 4.0 (Debian 13's package, 4.0.5 on Erlang 27): a node of its own, osrdyne-rabbitmq4@localhost,
# run from the Debian 13 root of scripts/rabbitmq_root.sh (made once, cached under
# /var/lib/osrdyne-rabbitmq), its data under /var/lib/osrdyne-rabbitmq/broker-4.0: AMQP on
# 5700, management on 15700, Prometheus on 15701, Erlang distribution on 25700, the
# management, Prometheus and event exchange plugins, the same open-files limit, and every
# deprecated feature RabbitMQ 4.0 still permits switched off (what a careful operator does;
# docs/operations.md). RABBITMQ_URL is not looked at. `--stop` stops it and ends its VM.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_rabbitmq_nodes.sh

log() { echo "ensure_broker: $*" >&2; }

version=3
stop=0
while (($#)); do
  case $1 in
    --version) [[ $# -ge 2 ]] || { log "--version needs 3 or 4"; exit 2; }; version=$2; shift 2 ;;
    --stop) stop=1; shift ;;
    *) log "usage: $0 [--version 3|4] [--stop]"; exit 2 ;;
  esac
done
case $version in
  3 | 3.10) version=3 ;;
  4 | 4.0) version=4 ;;
  *) log "no RabbitMQ $version here: 3 (3.10, Debian 12's) or 4 (4.0, Debian 13's)"; exit 2 ;;
esac
if ((stop)) && [[ $version == 3 ]]; then
  log "the 3.10 broker on 5672 is shared (other people's tests, the demo): not stopping it"
  exit 2
fi

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 "$limit"); do "$@" && return 0; sleep 1; done
  log "timed out waiting for $what"; return 1
}

api() {  # api PATH: GET the local management API, bounded in time
  curl -fsS -m 10 -u guest:guest "http://127.0.0.1:15672/api/$1" 2>/dev/null
}

management_answers() { api overview >/dev/null; }

node_fd_total() {  # the open-files limit the running node works with (its first report can take seconds)
  local fds
  for _ in $(seq 1 30); do
    fds=$(api nodes | python3 -c '
import json, sys
totals = [n.get("fd_total") for n in json.load(sys.stdin)]
print(min(totals) if totals and all(isinstance(t, int) for t in totals) else "")' 2>/dev/null || true)
    if [[ -n $fds ]]; then echo "$fds"; return 0; fi
    sleep 1
  done
}

print_urls() {  # print_urls AMQP_PORT MANAGEMENT_PORT
  echo "RABBITMQ_URL=amqp://guest:guest@127.0.0.1:$1/%2F"
  echo "RABBITMQ_MANAGEMENT_URL=http://127.0.0.1:$2"
}

if [[ $version == 4 ]]; then
  source scripts/_rabbitmq4_broker.sh
  exit 0
fi

if [[ -n "${RABBITMQ_URL:-}" ]]; then
  log "using the broker at RABBITMQ_URL"
  echo "RABBITMQ_URL=$RABBITMQ_URL"
  host=${RABBITMQ_URL#*://}; host=${host#*@}; host=${host%%[:/?]*}
  echo "RABBITMQ_MANAGEMENT_URL=${RABBITMQ_MANAGEMENT_URL:-http://${host:-127.0.0.1}:15672}"
  exit 0
fi

want=${RABBITMQ_NOFILE:-65536}
hard=$(ulimit -Hn)
if [[ $hard != unlimited ]] && (( hard < want )); then
  log "the machine allows at most $hard open files (RabbitMQ's production checklist asks for" \
    "at least 50000): starting RabbitMQ with $hard; expect it to hold fewer quorum queues"
  want=$hard
fi

show_log() {
  local file
  for file in /var/log/rabbitmq/*.log; do
    [[ -f $file ]] || continue
    log "last lines of $file:"; tail -n 20 "$file" >&2
  done
}

stop_node() {
  log "stopping the local RabbitMQ node"
  timeout 60 rabbitmqctl stop >/dev/null 2>&1 || true
  # A wedged node ignores rabbitmqctl: end it by its pid file, then anything left of it.
  local pidfile pid
  for pidfile in /var/lib/rabbitmq/mnesia/*.pid; do
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      log "the node did not stop: killing pid $pid"
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  wait_for 30 "the AMQP port to close" bash -c '! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null'
}

start_node() {
  log "starting rabbitmq-server with an open-files limit of $want"
  # Debian's wrapper starts the node through `su rabbitmq`, whose pam_limits resets the limit
  # to limits.conf's: say it there too.
  if [[ -d /etc/security/limits.d && -w /etc/security/limits.d ]]; then
    printf 'rabbitmq soft nofile %s\nrabbitmq hard nofile %s\n' "$want" "$want" \
      >/etc/security/limits.d/osrdyne-rabbitmq.conf
  fi
  (ulimit -n "$want" && rabbitmq-server -detached) || true
  if ! wait_for 180 "RabbitMQ on 127.0.0.1:5672" port_open 127.0.0.1 5672; then
    show_log; return 1
  fi
  timeout 180 rabbitmqctl await_startup >/dev/null 2>&1 || true
}

enable_management() {
  if management_answers; then return 0; fi
  log "enabling rabbitmq_management"
  timeout 120 rabbitmq-plugins enable rabbitmq_management >/dev/null || true
  wait_for 90 "the management API on 127.0.0.1:15672" management_answers
}

if ! command -v curl >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
fi
if ! command -v rabbitmq-server >/dev/null; then
  log "installing rabbitmq-server"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
fi

if ! port_open 127.0.0.1 5672; then
  if pgrep -x beam.smp >/dev/null && [[ -n $(ls /var/lib/rabbitmq/mnesia/*.pid 2>/dev/null) ]]; then
    log "RabbitMQ runs but does not accept connections on 5672: restarting it"
    stop_node
  fi
  start_node
fi
if ! enable_management; then
  log "RabbitMQ's management API does not answer: restarting the node"
  stop_node
  start_node
  enable_management || { show_log; exit 1; }
fi

fds=$(node_fd_total)
if [[ -n $fds ]] && (( fds < want )); then
  if [[ ${OSRDYNE_KEEP_BROKER:-0} == 1 ]]; then
    log "RabbitMQ runs with an open-files limit of $fds (wanted $want); OSRDYNE_KEEP_BROKER=1:" \
      "leaving it so, it may wedge after a few hundred quorum queues"
  else
    log "RabbitMQ runs with an open-files limit of $fds: restarting it with $want"
    stop_node
    start_node
    enable_management || { show_log; exit 1; }
    fds=$(node_fd_total)
  fi
fi
# Broker events (queue deleted, connection closed...) on `amq.rabbitmq.event`: the controller
# learns of a queue deleted behind its back at once, instead of at its next listing. The
# plugin ships with RabbitMQ and is enabled online.
event_exchange_answers() { api exchanges/%2F/amq.rabbitmq.event >/dev/null; }
if ! event_exchange_answers; then
  log "enabling rabbitmq_event_exchange"
  timeout 120 rabbitmq-plugins enable rabbitmq_event_exchange >/dev/null || true
  wait_for 60 "the broker's event exchange" event_exchange_answers ||
    log "rabbitmq_event_exchange could not be enabled: controllers fall back to listings"
fi
log "RabbitMQ and its management API answer on 127.0.0.1 (open-files limit ${fds:-unknown})"
print_urls 5672 15672
