#!/usr/bin/env bash
# What a test run started and left running: none of it may outlive the run (issue 48).
#
#   scripts/leftovers.sh begin   note the RabbitMQ nodes running before the run
#   scripts/leftovers.sh end     name, end and fail on every Erlang VM the run left running
#
# scripts/test.sh exports OSRDYNE_TEST_RUN (a mark of its own) after its set-up; every RabbitMQ
# node the run starts carries it in its environment (the clusters' nodes and the 4.0 broker
# are given it by their scripts, the private nodes by tests/faults/rabbit_node.py, the 3.10
# cluster's with the rest of their caller's environment). At the end, a VM with the mark is a
# node the run started and did not stop (the clusters, the private nodes and the 4.0 broker are
# stopped by the fixtures and by test.sh): it is named, ended (SIGTERM, then SIGKILL) and the
# run fails. A node that was running before the run began (a cluster someone left up, whose
# nodes the run restarted) is left alone: the run did not bring it up.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_rabbitmq_nodes.sh

log() { echo "leftovers: $*" >&2; }

run=${OSRDYNE_TEST_RUN:?"OSRDYNE_TEST_RUN is not set (scripts/test.sh sets it)"}
[[ $run =~ ^[A-Za-z0-9._-]+$ ]] || { log "refusing the run mark $run"; exit 2; }
before=${TMPDIR:-/tmp}/osrdyne-run-$run.before

nodes() {  # "pid nodename mark" of every RabbitMQ VM running (mark: the run's, or -)
  local p comm name mark
  for p in /proc/[0-9]*; do
    comm=
    { read -r comm <"$p/comm" || true; } 2>/dev/null
    [[ $comm == beam.smp ]] || continue
    grep -qzF escript "$p/cmdline" 2>/dev/null && continue  # a rabbitmqctl
    name=$(tr '\0' '\n' 2>/dev/null <"$p/environ" | sed -n 's/^RABBITMQ_NODENAME=//p') || true
    [[ -n $name ]] || continue
    mark=$(tr '\0' '\n' 2>/dev/null <"$p/environ" | sed -n 's/^OSRDYNE_TEST_RUN=//p') || true
    echo "${p#/proc/} $name ${mark:--}"
  done
}

case ${1:-} in
  begin)
    nodes | awk '{print $2}' | sort -u >"$before"
    ;;
  end)
    left=()
    while read -r pid name mark; do
      [[ $mark == "$run" ]] || continue
      if [[ -f $before ]] && grep -qxF "$name" "$before"; then continue; fi
      left+=("$name")
      log "node $name (pid $pid) was started by this run and still runs: ending it"
    done < <(nodes)
    rm -f "$before"
    ((${#left[@]})) || exit 0
    for name in $(printf '%s\n' "${left[@]}" | sort -u); do end_vm "$name" 30; done
    log "the run left ${#left[@]} Erlang VM(s) running (ended now): a fixture or script did" \
      "not stop what it started"
    exit 1
    ;;
  *) echo "usage: $0 begin | end" >&2; exit 2 ;;
esac
