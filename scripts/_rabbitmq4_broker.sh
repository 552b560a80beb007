# Sourced by scripts/ensure_broker.sh for `--version 4` (its header says what this node is):
# RabbitMQ 4.0 from the Debian 13 root of scripts/rabbitmq_root.sh, on ports of its own.
# Uses log, wait_for, port_open, print_urls, $stop (ensure_broker.sh) and vm_pids, end_vm,
# deprecated_features_config (_rabbitmq_nodes.sh).

V4_NODE=osrdyne-rabbitmq4@localhost
V4_AMQP=5700
V4_MANAGEMENT=15700
V4_PROMETHEUS=15701
V4_DIST=25700
V4_DIR=${OSRDYNE_RABBITMQ4_DIR:-/var/lib/osrdyne-rabbitmq/broker-4.0}
v4_env() {  # the node's whole environment (rabbitmq_root.sh passes it through as given)
  V4_ENV=("HOME=$V4_DIR" "LC_ALL=C.UTF-8" "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
    "RABBITMQ_NODENAME=$V4_NODE"
    "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1"
    "RABBITMQ_NODE_PORT=$V4_AMQP"
    "RABBITMQ_DIST_PORT=$V4_DIST"
    "RABBITMQ_CONF_ENV_FILE=$V4_DIR/rabbitmq-env.conf"
    "RABBITMQ_MNESIA_BASE=$V4_DIR/mnesia"
    "RABBITMQ_LOG_BASE=$V4_DIR/log"
    "RABBITMQ_PID_FILE=$V4_DIR/node.pid"
    "RABBITMQ_CONFIG_FILE=$V4_DIR/rabbitmq.conf"
    "RABBITMQ_ADVANCED_CONFIG_FILE=$V4_DIR/advanced.config"
    "RABBITMQ_ENABLED_PLUGINS_FILE=$V4_DIR/enabled_plugins"
    "ERL_EPMD_ADDRESS=127.0.0.1"
    "ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}")
  # A test run's mark (scripts/test.sh): what it started is found by it at its end.
  [[ -z ${OSRDYNE_TEST_RUN:-} ]] || V4_ENV+=("OSRDYNE_TEST_RUN=$OSRDYNE_TEST_RUN")
}

v4_run() {  # v4_run CMD...: CMD in the Debian 13 root, with the node's environment
  v4_env
  scripts/rabbitmq_root.sh run --bind "$V4_DIR" -- /usr/bin/env -i "${V4_ENV[@]}" "$@"
}

v4_ctl() {  # rabbitmqctl against the node, bounded in time
  v4_env
  timeout 120 scripts/rabbitmq_root.sh run --bind "$V4_DIR" -- /usr/bin/env -i "${V4_ENV[@]}" \
    /usr/lib/rabbitmq/bin/rabbitmqctl -n "$V4_NODE" "$@"
}

v4_api() {  # v4_api PATH: GET the node's management API, bounded in time
  curl -fsS -m 10 -u guest:guest "http://127.0.0.1:$V4_MANAGEMENT/api/$1" 2>/dev/null
}

v4_up() {  # AMQP, the management API, the event exchange and Prometheus all answer
  port_open 127.0.0.1 "$V4_AMQP" && v4_api overview >/dev/null &&
    v4_api exchanges/%2F/amq.rabbitmq.event >/dev/null &&
    curl -fsS -m 10 -o /dev/null "http://127.0.0.1:$V4_PROMETHEUS/metrics" 2>/dev/null
}

v4_config() {  # the node's rabbitmq.conf, on stdout
  cat <<EOF
# Written by scripts/ensure_broker.sh --version 4: changes are lost at its next run.
listeners.tcp.default = 127.0.0.1:$V4_AMQP
management.tcp.port = $V4_MANAGEMENT
management.tcp.ip = 127.0.0.1
prometheus.tcp.port = $V4_PROMETHEUS
prometheus.tcp.ip = 127.0.0.1
loopback_users.guest = true
log.console = false
log.file.level = info
EOF
  deprecated_features_config
}

v4_write_files() {  # 0 if the configuration changed (a running node must restart to take it)
  local owner changed=1
  mkdir -p "$V4_DIR/mnesia" "$V4_DIR/log"
  if ! cmp -s <(v4_config) "$V4_DIR/rabbitmq.conf"; then
    v4_config >"$V4_DIR/rabbitmq.conf"
    changed=0
  fi
  echo "# everything comes from the environment (scripts/_rabbitmq4_broker.sh)" \
    >"$V4_DIR/rabbitmq-env.conf"
  echo "[rabbitmq_management,rabbitmq_prometheus,rabbitmq_event_exchange]." \
    >"$V4_DIR/enabled_plugins"
  echo "[]." >"$V4_DIR/advanced.config"
  if [[ ! -f $V4_DIR/.erlang.cookie ]]; then
    head -c 30 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F >"$V4_DIR/.erlang.cookie"
    chmod 400 "$V4_DIR/.erlang.cookie"
  fi
  # The root's `rabbitmq` user runs the node: what this script writes is its (the node's own
  # files under mnesia/ and log/ are already).
  owner=$(scripts/rabbitmq_root.sh owner)
  chown "$owner" "$V4_DIR" "$V4_DIR/mnesia" "$V4_DIR/log" "$V4_DIR"/rabbitmq.conf \
    "$V4_DIR/rabbitmq-env.conf" "$V4_DIR/enabled_plugins" "$V4_DIR/advanced.config" \
    "$V4_DIR/.erlang.cookie"
  return "$changed"
}

v4_stop() {
  if [[ -n $(vm_pids "$V4_NODE") ]]; then
    log "stopping $V4_NODE"
    v4_ctl stop >/dev/null 2>&1 || true
    # Its VM too, whatever rabbitmqctl said (a VM whose broker had stopped outlives it).
    end_vm "$V4_NODE" 30
  fi
  wait_for 30 "port $V4_AMQP to close" bash -c "! (exec 3<>/dev/tcp/127.0.0.1/$V4_AMQP) 2>/dev/null"
}

v4_show_log() {
  local file
  for file in "$V4_DIR"/log/*.log; do
    [[ -f $file ]] || continue
    log "last lines of $file:"; tail -n 20 "$file" >&2
  done
}

v4_start() {
  local want=${RABBITMQ_NOFILE:-65536} hard
  hard=$(ulimit -Hn)
  [[ $hard == unlimited ]] || ((hard >= want)) || want=$hard
  log "starting $V4_NODE (RabbitMQ 4.0, AMQP on $V4_AMQP, management on $V4_MANAGEMENT," \
    "open-files limit $want)"
  rm -f "$V4_DIR/node.pid"
  # Every file of the node its user's (a root of another recipe may have had other ids); the
  # node is not running, so nothing moves under the walk.
  chown -R "$(scripts/rabbitmq_root.sh owner)" "$V4_DIR"
  # Without the lock (8>&-): the detached VM would hold it as long as it runs.
  (ulimit -n "$want" && v4_run /usr/lib/rabbitmq/bin/rabbitmq-server -detached 8>&-) || true
  if ! wait_for 180 "$V4_NODE to serve AMQP, its management API and Prometheus" v4_up; then
    v4_show_log
    return 1
  fi
}

# One caller at a time: two test sessions must not start two nodes on one directory.
mkdir -p "$V4_DIR"
exec 8>"$V4_DIR/.lock"
flock 8

if ((stop)); then
  v4_stop
  exit 0
fi

scripts/rabbitmq_root.sh build >/dev/null
changed=0
v4_write_files || changed=$?
if v4_up && ((changed == 0)); then
  log "the configuration of $V4_NODE changed: restarting it"
  v4_stop
elif ! v4_up && [[ -n $(vm_pids "$V4_NODE") ]]; then
  # Booting (then it comes up within the wait below), or wedged, or a VM left without its
  # broker: given a minute, then ended.
  if ! wait_for 60 "$V4_NODE (running, not answering) to come up" v4_up; then
    log "$V4_NODE runs but does not answer: ending it"
    v4_stop
  fi
fi
v4_up || v4_start || exit 1
log "RabbitMQ $(v4_api overview | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p') answers:" \
  "$V4_NODE on 127.0.0.1:$V4_AMQP, management on $V4_MANAGEMENT, Prometheus on $V4_PROMETHEUS"
print_urls "$V4_AMQP" "$V4_MANAGEMENT"
