#!/usr/bin/env bash
# Make sure a three-node RabbitMQ cluster answers on loopback, and print where it is.
#
#   scripts/ensure_cluster.sh            # start (or reuse) the cluster, print its URLs
#   scripts/ensure_cluster.sh --stop     # stop the three nodes and end their VMs (data kept)
#   scripts/ensure_cluster.sh --stop N   # stop node N (1-3) only, gracefully
#   scripts/ensure_cluster.sh --start N  # (re)start node N (1-3) only, e.g. after a kill
#   scripts/ensure_cluster.sh --purge    # stop and delete every file of the cluster
#   scripts/ensure_cluster.sh --version 4 [...]   # the same on RabbitMQ 4.0 (below)
#
# Nodes osrdyne-c1@localhost .. osrdyne-c3@localhost, AMQP on 127.0.0.1:5681-5683, management
# on 15681-15683, Erlang distribution on 25681-25683, each with its own data and log
# directories under $OSRDYNE_CLUSTER_DIR (default /tmp/osrdyne-cluster), one Erlang cookie for
# the three (in that directory: the shared broker's cookie is left alone), file limits raised,
# the management plugin enabled. Nodes 2 and 3 join node 1 (stop_app / join_cluster /
# start_app). The shared node rabbit@<host> on 5672 is never touched. Idempotent: running
# nodes are kept, a stopped one is started and rejoins by itself (its data says where it
# belongs). Needs the rabbitmq-server package (scripts/ensure_broker.sh installs it).
#
# Stopping a node ends its Erlang VM, whatever rabbitmqctl says: a VM whose broker stopped
# (paused by pause_minority, or a failed restart) fails `rabbitmqctl status`, and would stay
# up, registered with epmd, holding its memory, for ever.
#
# `--version 4` (before the other arguments): RabbitMQ 4.0.5 on Erlang 27, Debian 13's package,
# run from the root of scripts/rabbitmq_root.sh, with Khepri as its metadata store (enabled on
# node 1 before the others join: RabbitMQ 4.2's default for new clusters, and what changes
# what a partition and a lost node do; Mnesia on 4.0 behaves as on 3.10), the Prometheus
# plugin as well, and every deprecated feature 4.0 still permits denied (_rabbitmq_nodes.sh).
# Its clusters are numbered as the 3.10 ones (OSRDYNE_CLUSTER=1 or 2) but have names, ports
# and addresses of their own, so that all four can run at once: nodes osrdyne-c7..c9 (c10..c12
# for the second), AMQP on 5687-5689 (5690-5692), management on 15687-15689 (15690-15692),
# Prometheus on 15787-15789 (15790-15792), distribution on 25687-25689 (25690-25692), links
# from 127.0.0.8-10 (11-13), files under $OSRDYNE_CLUSTER_DIR-4.0 (-4.0-2).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_rabbitmq_nodes.sh

VERSION=3
if [[ ${1:-} == --version ]]; then
  case ${2:-} in
    3 | 3.10) VERSION=3 ;;
    4 | 4.0) VERSION=4 ;;
    *) echo "ensure_cluster: no RabbitMQ ${2:-} here: 3 (3.10) or 4 (4.0)" >&2; exit 2 ;;
  esac
  shift 2
fi

#: Which cluster (1 or 2): OSRDYNE_CLUSTER=2 makes a second one beside the first (the test
#: suite runs its cluster tests on two at once), nodes osrdyne-c4..c6, AMQP on 5684-5686,
#: management on 15684-15686, distribution on 25684-25686, links from 127.0.0.5-7, files
#: under $OSRDYNE_CLUSTER_DIR-2. Its nodes are still numbered 1-3 in the arguments above.
CLUSTER=${OSRDYNE_CLUSTER:-1}
[[ $CLUSTER == 1 || $CLUSTER == 2 ]] || { echo "OSRDYNE_CLUSTER is 1 or 2, not $CLUSTER" >&2; exit 2; }
OFFSET=$((3 * (CLUSTER - 1) + (VERSION == 4 ? 6 : 0)))
BASE=${OSRDYNE_CLUSTER_DIR:-/tmp/osrdyne-cluster}
[[ $VERSION == 3 ]] || BASE=$BASE-4.0
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
prometheus_port() { echo $((15780 + OFFSET + $1)); }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

node_env() {  # node_env N: the environment of node N, into the array ENV
  local n=$1 dir=$BASE/c$1 path=$PATH
  [[ $VERSION == 3 ]] || path=/usr/sbin:/usr/bin:/sbin:/bin  # the Debian 13 root's
  ENV=("HOME=$BASE" "LC_ALL=C.UTF-8" "PATH=$path" \
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
  # A test run's mark (scripts/test.sh): what it started is found by it at its end (3.10's
  # nodes have it anyway, with the rest of the caller's environment).
  [[ -z ${OSRDYNE_TEST_RUN:-} ]] || ENV+=("OSRDYNE_TEST_RUN=$OSRDYNE_TEST_RUN")
}

# node_program N PROGRAM ARGS...: rabbitmqctl or rabbitmq-server for node N, as the node's
# user; within $LIMIT seconds when set (0: unbounded).
node_program() {
  local n=$1 program=$2; shift 2
  node_env "$n"
  local command=(env "${ENV[@]}" "$BIN/$program" "$@")
  if [[ $VERSION == 4 ]]; then
    command=(scripts/rabbitmq_root.sh run --bind "$BASE" -- \
      /usr/bin/env -i "${ENV[@]}" "/usr/lib/rabbitmq/bin/$program" "$@")
  elif [[ $(id -u) == 0 ]] && id rabbitmq >/dev/null 2>&1; then
    command=(runuser -u rabbitmq -- "${command[@]}")  # as the Debian wrapper does
  fi
  timeout "${LIMIT:-0}" "${command[@]}"
}

ctl() {  # ctl N args...: rabbitmqctl against node N
  local n=$1; shift
  node_program "$n" rabbitmqctl -n "$(node_name "$n")" "$@"
}

write_files() {
  local n=$1 dir=$BASE/c$1
  mkdir -p "$dir/mnesia" "$dir/log"
  echo "# osrdyne cluster node: everything comes from the environment" >"$dir/rabbitmq-env.conf"
  local plugins=rabbitmq_management,rabbitmq_event_exchange
  [[ $VERSION == 3 ]] || plugins=$plugins,rabbitmq_prometheus
  echo "[$plugins]." >"$dir/enabled_plugins"
  # Each node opens its links to the others from its own loopback address (127.0.0.2-4; 5-7
  # on the second cluster), so that packet filter rules can cut one node-to-node link
  # (tests/cluster/network.py).
  # 4.0: a node of a Khepri cluster boots only once a majority of its members has a leader
  # (it waits 30 s by default, then exits `timeout_waiting_for_leader`): five minutes, as
  # 3.10's nodes wait for their peers' Mnesia tables.
  local rabbit=
  [[ $VERSION == 3 ]] || rabbit=", {rabbit, [{khepri_leader_wait_retry_timeout, 300000}]}"
  echo "[{kernel, [{net_ticktime, $TICKTIME}, {inet_dist_connect_options, [{ip, {127,0,0,$((OFFSET + n + 1))}}]}]}$rabbit]." \
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
  if [[ $VERSION == 4 ]]; then
    {
      echo "prometheus.tcp.port = $(prometheus_port "$n")"
      echo "prometheus.tcp.ip = 127.0.0.1"
      deprecated_features_config
    } >>"$dir/rabbitmq.conf"
  fi
}

prepare() {
  mkdir -p "$BASE"
  if [[ ! -f $BASE/.erlang.cookie ]]; then
    head -c 30 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F >"$BASE/.erlang.cookie"
    chmod 400 "$BASE/.erlang.cookie"
  fi
  for n in "${NODES[@]}"; do write_files "$n"; done
  local owner=
  if [[ $VERSION == 4 ]]; then
    owner=$(scripts/rabbitmq_root.sh owner)  # the Debian 13 root's `rabbitmq`
  elif [[ $(id -u) == 0 ]] && id rabbitmq >/dev/null 2>&1; then
    owner=rabbitmq:rabbitmq
  fi
  if [[ -n $owner ]]; then
    # What this script writes, not the nodes' own files: a running node creates and removes
    # files under mnesia/ while a recursive chown walks them.
    chown "$owner" "$BASE" "$BASE/.erlang.cookie"
    for n in "${NODES[@]}"; do
      local dir=$BASE/c$n
      chown "$owner" "$dir" "$dir/mnesia" "$dir/log" "$dir/rabbitmq-env.conf" \
        "$dir/enabled_plugins" "$dir/advanced.config" "$dir/rabbitmq.conf"
    done
  fi
}

vm_pid() {  # vm_pid N: the pid of node N's Erlang VM (found by its environment), if it runs
  local pids
  pids=$(vm_pids "$(node_name "$1")")
  [[ -n $pids ]] || return 1
  echo "${pids%%$'\n'*}"
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
  node_program "$n" rabbitmq-server -detached
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

# khepri: RabbitMQ 4.0's nodes keep their metadata in Khepri, enabled on node 1 before the
# others join (they take it from the cluster they join); a cluster that has it keeps it.
khepri() {
  [[ $VERSION == 4 ]] || return 0
  [[ $(ctl 1 eval 'rabbit_khepri:is_enabled().' 2>/dev/null) == true ]] && return 0
  log "enabling Khepri on $(node_name 1)"
  ctl 1 enable_feature_flag --opt-in khepri_db >/dev/null
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

# stop_node N: stop node N gracefully (bounded), then end its VM whatever rabbitmqctl said.
stop_node() {
  local n=$1
  [[ -n $(vm_pids "$(node_name "$n")") ]] || return 0
  log "stopping $(node_name "$n")"
  LIMIT=90 ctl "$n" stop >/dev/null 2>&1 || true
  end_vm "$(node_name "$n")" 30
}

stop_all() {
  # Node 1 last: the last node to stop is the one that boots without waiting for its peers,
  # and `bring_up` starts node 1 first.
  for n in 3 2 1; do stop_node "$n"; done
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
      stop_node "$2"
    else
      stop_all
    fi
    exit 0 ;;
  --purge) stop_all; rm -rf "$BASE"; exit 0 ;;
  --start) prepare; boot "$2"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--version 3|4] [--stop [N] | --purge | --start N]" >&2; exit 2 ;;
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
  # On 4.0 (Khepri) no node boots before a majority of them runs: the others are started
  # after a few seconds, not after 30.
  local n rc first=30
  [[ $VERSION == 3 ]] || first=5
  rc=0
  boot 1 "$first" || rc=$?
  ((rc != 1)) || return 1
  for n in 2 3; do
    rc=0
    boot "$n" "$first" || rc=$?
    ((rc != 1)) || return 1
  done
  for n in "${NODES[@]}"; do boot "$n" || return 1; done
  khepri
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
