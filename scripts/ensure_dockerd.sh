#!/usr/bin/env bash
# Make sure a Docker engine of osrdyne's own answers on unix:///run/osrdyne-docker.sock.
#
# Idempotent: installs docker.io (Debian, quietly unless it fails) where dockerd is missing,
# starts dockerd in the background when the socket does not answer (and leaves it running),
# waits (bounded) until it does, and prints the line `DOCKER_HOST=unix:///run/osrdyne-docker.sock`
# on stdout (everything else goes to stderr), so callers can
# `export "$(scripts/ensure_dockerd.sh)"`.
#
# The engine runs without a bridge or iptables rules (containers use --network host) and with
# the vfs storage driver, which works inside unprivileged-overlay sandboxes.
set -euo pipefail
source "$(dirname "$0")/_quiet.sh"

SOCK=/run/osrdyne-docker.sock
HOST="unix://${SOCK}"
DATA_ROOT=/var/lib/osrdyne-docker
EXEC_ROOT=/run/osrdyne-docker
PIDFILE=/run/osrdyne-docker.pid
LOG=/var/log/osrdyne-dockerd.log
WAIT_SECONDS=${OSRDYNE_DOCKERD_WAIT_SECONDS:-60}

log() { echo "ensure_dockerd: $*" >&2; }

answers() {
    # The engine's /_ping answers "OK" once the API is up.
    curl --silent --max-time 2 --unix-socket "$SOCK" http://localhost/_ping 2>/dev/null | grep -q OK
}

if ! command -v curl >/dev/null 2>&1; then
    log "curl is missing: installing it"
    apt_install curl
fi

if answers; then
    echo "DOCKER_HOST=${HOST}"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    log "dockerd is missing: installing docker.io (quietly)"
    # RUNLEVEL=1 tells the package's maintainer scripts (invoke-rc.d) not to start the
    # system's own engine: this script starts one of its own below.
    RUNLEVEL=1 apt_install docker.io
fi

# A stale pidfile from a dead engine would make dockerd refuse to start.
if [[ -f "$PIDFILE" ]]; then
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        log "dockerd (pid $pid) runs but does not answer yet: waiting for it"
    else
        rm -f "$PIDFILE"
    fi
fi

if [[ ! -f "$PIDFILE" ]]; then
    mkdir -p "$DATA_ROOT" "$EXEC_ROOT"
    log "starting dockerd on ${HOST} (log: ${LOG})"
    # setsid + nohup: the engine outlives this script and the shell that ran it.
    setsid nohup dockerd \
        --storage-driver=vfs --iptables=false --bridge=none \
        --host "$HOST" \
        --data-root "$DATA_ROOT" --exec-root "$EXEC_ROOT" --pidfile "$PIDFILE" \
        >>"$LOG" 2>&1 </dev/null &
fi

deadline=$((SECONDS + WAIT_SECONDS))
until answers; do
    if ((SECONDS >= deadline)); then
        log "dockerd did not answer on ${SOCK} within ${WAIT_SECONDS}s; last log lines:"
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
    sleep 0.5
done

echo "DOCKER_HOST=${HOST}"
