# Sourced by the broker scripts (ensure_broker.sh, ensure_cluster.sh): what their nodes share.
#
#   vm_pids NODENAME         the pids of the VMs started as NODENAME (RABBITMQ_NODENAME in
#                            their environment; rabbitmqctl's own VM is not one), one a line
#   end_vm NODENAME [GRACE]  end them: SIGTERM (Erlang's init:stop, a clean shutdown), then
#                            SIGKILL after GRACE seconds (default 30); returns once none is left
#
# A node's VM can outlive its broker: a stopped or failed `rabbit` application leaves it up,
# registered with epmd, holding its memory, while `rabbitmqctl status` fails as if it were gone.
# Stopping a node therefore ends its VM, whatever rabbitmqctl says.
#
#   deprecated_features_config   rabbitmq.conf lines denying the deprecated features
#                                RabbitMQ 4.0 still permits, but those named in
#                                OSRDYNE_RABBITMQ4_PERMIT (default management_metrics_collection;
#                                set it empty to deny every one)

vm_pids() {
  # Builtins for every process (a fork per process took seconds on a loaded machine), a grep
  # for the Erlang VMs only.
  local want="RABBITMQ_NODENAME=$1" p comm state
  for p in /proc/[0-9]*; do
    comm=
    { read -r comm <"$p/comm" || true; } 2>/dev/null
    [[ $comm == beam.smp ]] || continue
    state=
    { read -r _ _ state _ <"$p/stat" || true; } 2>/dev/null
    [[ $state != Z ]] || continue  # ended, not yet reaped
    grep -qzF escript "$p/cmdline" 2>/dev/null && continue  # a rabbitmqctl
    if grep -qzxF "$want" "$p/environ" 2>/dev/null; then
      echo "${p#/proc/}"
    fi
  done
}

end_vm() {
  local node=$1 grace=${2:-30} pids pid deadline
  pids=$(vm_pids "$node")
  [[ -n $pids ]] || return 0
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  deadline=$((SECONDS + grace))
  while [[ -n $(vm_pids "$node") ]] && ((SECONDS < deadline)); do sleep 0.5; done
  pids=$(vm_pids "$node")
  [[ -n $pids ]] || return 0
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
  while [[ -n $(vm_pids "$node") ]]; do sleep 0.2; done
}

#: The deprecated features RabbitMQ 4.0.5 still permits by default (`rabbitmqctl
#: list_deprecated_features`): the 4.0 nodes here deny them, as an operator getting ready for
#: 4.x's next releases does, so that whatever osrdyne still uses of them fails in the tests;
#: all but management_metrics_collection (still permitted by default up to 4.3), without which
#: the management API reports no statistics at all (no queue depths, no node figures): osrdyne
#: reads them, and its controller refuses such a broker at start (docs/operations.md).
DEPRECATED_FEATURES=(amqp_address_v1 global_qos management_metrics_collection
  queue_master_locator ram_node_type transient_nonexcl_queues)

deprecated_features_config() {
  local feature permit permitted
  read -r -a permitted <<<"${OSRDYNE_RABBITMQ4_PERMIT-management_metrics_collection}"
  for feature in "${DEPRECATED_FEATURES[@]}"; do
    permit=false
    [[ " ${permitted[*]-} " == *" $feature "* ]] && permit=true
    echo "deprecated_features.permit.$feature = $permit"
  done
}
