#!/usr/bin/env bash
# Make sure a three-node RabbitMQ cluster answers on loopback, and print where it is.
#
#   scripts/ensure_cluster.sh            # start (or reuse) the cluster, print its URLs
#   scripts/ensure_cluster.sh --stop     # stop the three nodes (their data is kept)
#   scripts/ensure_cluster.sh --stop N   # stop node N (1-3) only, gracefully
#   scripts/ensure_cluster.sh --start N  # (re)start node N (1-3) only, e.g. after a kill
#   scripts/ensure_cluster.sh --purge    # stop and delete every file of the cluster
#
# Nodes osrdyne-c1@localhost .. osrdyne-c3@localhost, AMQP on 127.0.0.1:5681-5683, management
# on 15681-15683, Erlang distribution on 25681-25683, each with its own data and log
# directories under $OSRDYNE_CLUSTER_DIR (default /tmp/osrdyne-cluster), one Erlang cookie for
# the three (in that directory: the shared broker's cookie is left alone), file limits raised,
# the management plugin enabled. Nodes 2 and 3 join node 1 (stop_app / join_cluster /
# start_app). The shared node rabbit@<host> on 5672 is never touched. Idempotent: running
# nodes are kept, a stopped one is started and rejoins by itself (its data says where it
# belongs). Needs the rabbitmq-server package (scripts/ensure_broker.sh installs it).
set -euo pipefail

#: Which cluster (1 or 2): OSRDYNE_CLUSTER=2 makes a second one beside the first (the test
#: suite runs its cluster tests on two at once), nodes osrdyne-c4..c6, AMQP on 5684-5686,
#: management on 15684-15686, distribution on 25684-25686, links from 127.0.0.5-7, files
#: under $OSRDYNE_CLUSTER_DIR-2. Its nodes are still numbered 1-3 in the arguments above.
CLUSTER=${OSRDYNE_CLUSTER:-1}
[[ $CLUSTER == 1 || $CLUSTER == 2 ]] || { echo "OSRDYNE_CLUSTER is 1 or 2, not $CLUSTER" >&2; exit 2; }
OFFSET=$((3 * (CLUSTER - 1)))
BASE=${OSRDYNE_CLUSTER_DIR:-/tmp/osrdyne-cluster}
((CLUSTER == 1)) || BASE=$BASE-$CLUSTER
BIN=/usr/lib/rabbitmq/bin
[[ -x $BIN/rabbitmq-server ]] || BIN=$(dirname "$(command -v rabbitmq-server)")
NODES=(1 2 3)
#: Seconds of silence after which a client connection is dead (the broker proposes it).
HEARTBEAT=${OSRDYNE_CLUSTER_HEARTBEAT:-5}
#: Seconds after which the other nodes declare a silent node down (Erlang net_ticktime).
TICKTIME=${OSRDYNE_CLUSTER_TICKTIME:-8}

log() { echo "ensure_cluster: $*" >&2; }
node_name() { echo "osrdyne-c$((OFFSET + $1))@localhost"; }
amqp_port() { echo $((5680 + OFFSET + $1)); }
mgmt_port() { echo $((15680 + OFFSET + $1)); }
dist_port() { echo $((25680 + OFFSET + $1)); }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Run as `rabbitmq` when we are root (as the Debian wrapper does), else as ourselves.
as_rabbit() {
  if [[ $(id -u) == 0 ]] && id rabbitmq >/dev/null 2>&1; then
    runuser -u rabbitmq -- "$@"
  else
    "$@"
  fi
}

node_env() {  # node_env N: the environment of node N, into the array ENV
  local n=$1 dir=$BASE/c$1
  ENV=("HOME=$BASE" "LC_ALL=C.UTF-8" "PATH=$PATH" \
    "RABBITMQ_NODENAME=$(node_name "$n")" \
    "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1" \
    "RABBITMQ_NODE_PORT=$(amqp_port "$n")" \
    "RABBITMQ_DIST_PORT=$(dist_port "$n")" \
    "RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf" \
    "RABBITMQ_MNESIA_BASE=$dir/mnesia" \
    "RABBITMQ_LOG_BASE=$dir/log" \
    "RABBITMQ_PID_FILE=$dir/node.pid" \
    "RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf" \
    "RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config" \
    "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins" \
    "ERL_EPMD_ADDRESS=127.0.0.1" \
    "ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}")
}

ctl() {  # ctl N args...: rabbitmqctl against node N
  local n=$1; shift
  node_env "$n"
  as_rabbit env "${ENV[@]}" "$BIN/rabbitmqctl" -n "$(node_name "$n")" "$@"
}

write_files() {
  local n=$1 dir=$BASE/c$1
  mkdir -p "$dir/mnesia" "$dir/log"
  echo "# osrdyne cluster node: everything comes from the environment" >"$dir/rabbitmq-env.conf"
  echo "[rabbitmq_management,rabbitmq_event_exchange]." >"$dir/enabled_plugins"
  # Each node opens its links to the others from its own loopback address (127.0.0.2-4; 5-7
  # on the second cluster), so that packet filter rules can cut one node-to-node link
  # (tests/cluster/network.py).
  echo "[{kernel, [{net_ticktime, $TICKTIME}, {inet_dist_connect_options, [{ip, {127,0,0,$((OFFSET + n + 1))}}]}]}]." \
    >"$dir/advanced.config"
  cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$(amqp_port "$n")
management.tcp.port = $(mgmt_port "$n")
management.tcp.ip = 127.0.0.1
loopback_users.guest = true
heartbeat = $HEARTBEAT
cluster_partition_handling = pause_minority
disk_free_limit.absolute = 10MB
collect_statistics_interval = 1000
log.console = false
log.file.level = info
EOF
}

prepare() {
  mkdir -p "$BASE"
  if [[ ! -f $BASE/.erlang.cookie ]]; then
    head -c 30 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F >"$BASE/.erlang.cookie"
    chmod 400 "$BASE/.erlang.cookie"
  fi
  for n in "${NODES[@]}"; do write_files "$n"; done
  if [[ $(id -u) == 0 ]] && id rabbitmq >/dev/null 2>&1; then
    # What this script writes, not the nodes' own files: a running node creates and removes
    # files under mnesia/ while a recursive chown walks them.
    chown rabbitmq:rabbitmq "$BASE" "$BASE/.erlang.cookie"
    for n in "${NODES[@]}"; do
      local dir=$BASE/c$n
      chown rabbitmq:rabbitmq "$dir" "$dir/mnesia" "$dir/log" "$dir/rabbitmq-env.conf" \
        "$dir/enabled_plugins" "$dir/advanced.config" "$dir/rabbitmq.conf"
    done
  fi
}

running() { ctl "$1" status >/dev/null 2>&1; }

vm_pid() {  # vm_pid N: the pid of node N's Erlang VM (found by its environment), if it runs
  local want p
  want="RABBITMQ_NODENAME=$(node_name "$1")"
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == beam.smp ]] || continue
    tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -q escript && continue  # a rabbitmqctl
    if tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "$want"; then
      echo "${p#/proc/}"
      return 0
    fi
  done
  return 1
}

# app_dead N: node N's VM runs, but its rabbit app neither runs nor boots, twice 5 s apart.
# Seen with pause_minority on RabbitMQ 3.10 after a one-way (partial) partition healed: the
# node paused, its restart failed (`{case_clause,{error,{node_not_running,...}}}` in
# rabbit:start) and left the VM up with no broker in it, for good.
app_dead() {
  local n=$1 _
  for _ in 1 2; do
    [[ $(ctl "$n" eval 'rabbit:is_booting() orelse rabbit:is_running().' 2>/dev/null) == false ]] ||
      return 1
    sleep 5
  done
}

start_node() {
  local n=$1 pid
  if port_open "$(amqp_port "$n")"; then return 0; fi  # it serves AMQP: it runs
  if pid=$(vm_pid "$n"); then
    app_dead "$n" || return 0  # booting (e.g. waiting for its peers)
    log "$(node_name "$n"): its VM runs without a broker in it (a failed restart): ending it"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  fi
  log "starting $(node_name "$n")"
  rm -f "$BASE/c$n/node.pid"
  # The node's file limit: one descriptor per connection, queue segment and Raft log.
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  node_env "$n"
  as_rabbit env "${ENV[@]}" "$BIN/rabbitmq-server" -detached
}

up() { port_open "$(amqp_port "$1")" && port_open "$(mgmt_port "$1")"; }

# wait_node N [SECONDS]: 0 once node N serves AMQP and its management API; 1 if its VM exited
# while booting (seen: `incompatible_feature_flags` when nodes boot at once); 2 if it still
# boots after SECONDS (default 180: a node that was not the last to stop waits for its peers).
wait_node() {
  local n=$1 limit=${2:-180} gone=0
  # A node serving AMQP and its management API is up, whatever its pid file says (a node
  # restarted by autoheal or by hand may have none).
  for _ in $(seq 1 "$limit"); do
    if up "$n"; then return 0; fi
    if vm_pid "$n" >/dev/null; then
      gone=0
    else
      # `rabbitmq-server -detached` forks: the VM may not be there yet, so three times in a row.
      gone=$((gone + 1))
      if ((gone >= 3)); then return 1; fi
    fi
    sleep 1
  done
  return 2
}

# boot N [SECONDS]: start node N and wait for it, starting it again (three tries) when its VM
# exits while booting; 0 up, 2 still booting after SECONDS, 1 given up.
boot() {
  local n=$1 limit=${2:-180} try rc
  for try in 1 2 3; do
    start_node "$n"
    rc=0
    wait_node "$n" "$limit" || rc=$?
    if ((rc != 1)); then return "$rc"; fi
    log "$(node_name "$n") exited while booting (try $try of 3): $(
      grep -ho 'incompatible_feature_flags\|badmap[^,]*\|BOOT FAILED' "$BASE/c$n/log/"*.log \
        2>/dev/null | tail -1)"
    sleep 2
  done
  log "$(node_name "$n") does not boot; its log: $BASE/c$n/log"
  return 1
}

joined() { ctl 1 cluster_status --formatter json 2>/dev/null | grep -q "\"$(node_name "$1")\""; }

join() {
  local n=$1
  joined "$n" && return 0
  log "joining $(node_name "$n") to $(node_name 1)"
  ctl "$n" stop_app >/dev/null 2>&1
  ctl "$n" reset >/dev/null 2>&1
  ctl "$n" join_cluster "$(node_name 1)" >/dev/null 2>&1
  ctl "$n" start_app >/dev/null 2>&1
}

stop_all() {
  # Node 1 last: the last node to stop is the one that boots without waiting for its peers,
  # and `bring_up` starts node 1 first.
  for n in 3 2 1; do
    if running "$n"; then
      log "stopping $(node_name "$n")"
      ctl "$n" stop >/dev/null 2>&1 || true
    fi
  done
}

print_urls() {
  local amqp=() mgmt=()
  for n in "${NODES[@]}"; do
    amqp+=("amqp://guest:guest@127.0.0.1:$(amqp_port "$n")/%2F")
    mgmt+=("http://127.0.0.1:$(mgmt_port "$n")")
  done
  (IFS=,; echo "OSRDYNE_AMQP__URL=${amqp[*]}"; echo "OSRDYNE_AMQP__MANAGEMENT_URL=${mgmt[*]}")
}

case "${1:-}" in
  --stop)
    if [[ -n ${2:-} ]]; then
      log "stopping $(node_name "$2")"
      ctl "$2" stop >/dev/null 2>&1 || true
    else
      stop_all
    fi
    exit 0 ;;
  --purge) stop_all; rm -rf "$BASE"; exit 0 ;;
  --start) prepare; boot "$2"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--stop | --purge | --start N]" >&2; exit 2 ;;
esac

# Every node's management API answers its `/api/nodes` (seen: RabbitMQ 3.10 nodes whose AMQP
# port and rabbitmqctl answer while their management API fails every request with 500,
# `{badkey,'osrdyne-c1@localhost'}` in rabbit_mgmt_db, after a long run of faults).
api_healthy() {
  local n
  for n in "${NODES[@]}"; do
    [[ $(curl -s -o /dev/null -m 5 -w '%{http_code}' -u guest:guest \
      "http://127.0.0.1:$(mgmt_port "$n")/api/nodes?columns=name") == 200 ]] || return 1
  done
}

bring_up() {
  # One node after another, node 1 first (it stopped last): nodes booting at once sync their
  # feature flags with each other while none is up, and one of them can exit with
  # `incompatible_feature_flags` (a `badmap` in `rabbit_feature_flags`, seen once), while
  # nodes that boot next to a running one take its flags. A node that still waits for its
  # peers after a while (it was not the last to stop) does not hold the others: they are
  # started, and every node is waited for. A node whose VM exits while booting is started
  # again (`boot`).
  local n rc
  rc=0
  boot 1 30 || rc=$?
  ((rc != 1)) || return 1
  for n in 2 3; do
    rc=0
    boot "$n" 30 || rc=$?
    ((rc != 1)) || return 1
  done
  for n in "${NODES[@]}"; do boot "$n" || return 1; done
  for n in 2 3; do join "$n"; done
}

prepare
bring_up
for _ in $(seq 1 20); do api_healthy && break; sleep 1; done
if ! api_healthy; then
  log "a management API fails its requests: restarting the three nodes"
  stop_all
  for n in "${NODES[@]}"; do
    for _ in $(seq 1 30); do port_open "$(amqp_port "$n")" || break; sleep 1; done
    # A node whose rabbitmqctl no longer answers either: end its VM (found by its port).
    pid=$(ss -ltnpH "sport = :$(amqp_port "$n")" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
    if [[ -n $pid ]]; then
      log "ending $(node_name "$n") (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  bring_up
  for _ in $(seq 1 60); do api_healthy && break; sleep 1; done
  api_healthy || { log "the management API still fails; the nodes' logs: $BASE/c*/log"; exit 1; }
fi
log "three nodes clustered: $(node_name 1) $(node_name 2) $(node_name 3)"
print_urls
