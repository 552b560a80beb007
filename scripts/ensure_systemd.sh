#!/usr/bin/env bash
# Make sure a real systemd (PID 1 of a systemd-nspawn container) runs, with its system bus
# reachable from this host, for the systemd driver's tests; or stop it.
#
#   scripts/ensure_systemd.sh [--bind-ro PATH]...   start it (idempotent), print where it is
#   scripts/ensure_systemd.sh stop                  stop it (idempotent)
#   scripts/ensure_systemd.sh build                 only install the tools and build the root
#
# No systemd runs as PID 1 on these machines, so the script boots one: a Debian root
# (debootstrap --variant=minbase, packages systemd, dbus and the shared libraries a host
# Python needs; built once and kept under /var/lib/osrdyne-systemd) started with
# `systemd-nspawn --boot --register=no --keep-unit` (no machined or host systemd needed),
# sharing the host's network (so workers inside reach the broker on 127.0.0.1), with:
#   - /run/osrdyne-systemd/dbus bound onto the container's /run/dbus: its system bus socket is
#     /run/osrdyne-systemd/dbus/system_bus_socket on the host (root on the host authenticates
#     as root inside: there is no user namespace);
#   - /run/osrdyne/workers bound onto the same path: the driver's per-instance environment
#     files, written on the host, read by the container's systemd;
#   - each --bind-ro PATH (e.g. the Python and the checkout the workers run) read-only at the
#     same path. A running container that lacks a requested path is restarted with it added.
# debootstrap uses the Debian mirror apt on this machine uses. Installs debootstrap and
# systemd-container (Debian) quietly where missing. Prints, as its last lines on stdout,
#   OSRDYNE_SYSTEMD_BUS=unix:path=/run/osrdyne-systemd/dbus/system_bus_socket
#   OSRDYNE_SYSTEMD_ROOT=/var/lib/osrdyne-systemd/root   (the container's root, on the host)
#   OSRDYNE_SYSTEMD_LEADER=<pid>     (its PID 1 as the host sees it: `nsenter -t <pid> -a ...`)
# and everything else on stderr.
set -euo pipefail
source "$(dirname "$0")/_quiet.sh"

STATE=/var/lib/osrdyne-systemd
ROOT=$STATE/root
RUN=/run/osrdyne-systemd
BUS_DIR=$RUN/dbus
BUS_SOCKET=$BUS_DIR/system_bus_socket
BUS="unix:path=${BUS_SOCKET}"
ENV_DIR=/run/osrdyne/workers
PIDFILE=$RUN/nspawn.pid
BINDS=$RUN/binds
LOG=/var/log/osrdyne-systemd.log
MACHINE=osrdyne-systemd
WAIT_SECONDS=${OSRDYNE_SYSTEMD_WAIT_SECONDS:-90}
# Bump when the recipe below changes: an older root is rebuilt.
RECIPE=2
# polkitd: a controller that is not root gets its right to manage the worker units from a
# polkit rule (deploy/systemd/osrdyne-polkit.rules), tested in the container.
PACKAGES=systemd,systemd-sysv,dbus,libpam-systemd,polkitd,libsqlite3-0,libreadline8,libncursesw6,libgdbm6,libnsl2

log() { echo "ensure_systemd: $*" >&2; }

nspawn_pid() {  # the running systemd-nspawn's pid, or nothing
  local pid
  [[ -f $PIDFILE ]] || return 0
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == systemd-nspawn ]]; then
    echo "$pid"
  fi
}

leader_pid() {  # the container's PID 1 (systemd), as the host sees it
  local child
  for child in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
    if [[ $(cat "/proc/$child/comm" 2>/dev/null) == systemd ]]; then echo "$child"; return; fi
  done
}

system_state() {  # the Manager's SystemState (running, degraded, starting, ...), or nothing
  busctl --address="$BUS" --timeout=2 get-property org.freedesktop.systemd1 \
    /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager SystemState 2>/dev/null \
    | sed -n 's/^s "\(.*\)"$/\1/p'
}

stop() {
  local pid
  pid=$(nspawn_pid)
  if [[ -z $pid ]]; then
    rm -f "$PIDFILE" "$BINDS"
    return 0
  fi
  log "stopping the systemd container (nspawn pid $pid)"
  # SIGTERM to systemd-nspawn asks the container's systemd for a clean power-off.
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 60))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "the container did not power off within 60s: killing systemd-nspawn"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.5
  done
  rm -f "$PIDFILE" "$BINDS" "$BUS_SOCKET"
}

mirror() {  # the Debian mirror apt uses here (deb822 sources first, then sources.list)
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' \
    | grep -v -e security -e '^$' | head -n 1 || true)
  if [[ -z $uri ]]; then
    uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
      | grep -v security | head -n 1 || true)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

build_root() {
  local suite uri tmp=$STATE/root.tmp
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  uri=$(mirror)
  log "building the container's root (debootstrap $suite from $uri, once; about two minutes)"
  rm -rf "$tmp"
  mkdir -p "$STATE"
  quietly debootstrap --variant=minbase --include="$PACKAGES" "$suite" "$tmp" "$uri"
  # A quiet boot: no console login, no timers, a name of its own.
  local unit
  for unit in console-getty.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer \
    dpkg-db-backup.timer e2scrub_all.timer fstrim.timer systemd-tmpfiles-clean.timer; do
    ln -sf /dev/null "$tmp/etc/systemd/system/$unit"
  done
  echo "$MACHINE" >"$tmp/etc/hostname"
  # Services running as another user (DynamicUser=yes) may cross /root to a bound Python.
  chmod 0711 "$tmp/root"
  echo "$RECIPE" >"$tmp/.osrdyne-recipe"
  rm -rf "$ROOT"
  mv "$tmp" "$ROOT"
}

install_tools() {
  local missing=()
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
  command -v busctl >/dev/null || missing+=(systemd)
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (quietly)"
    apt_install "${missing[@]}"
  fi
}

root_current() { [[ $(cat "$ROOT/.osrdyne-recipe" 2>/dev/null) == "$RECIPE" ]]; }

# One caller at a time: two test sessions must not boot two containers on one root.
mkdir -p "$RUN"
exec 9>"$RUN/lock"
flock 9

case ${1:-} in
  stop)
    stop
    exit 0 ;;
  build)
    install_tools
    if ! root_current; then
      stop  # never rebuild the root under a running container
      build_root
    fi
    exit 0 ;;
esac

# The read-only paths wanted, made absolute and real (symlinks resolved).
wanted=()
while (($#)); do
  case $1 in
    --bind-ro)
      [[ $# -ge 2 ]] || { log "--bind-ro needs a path"; exit 2; }
      path=$(realpath -e -- "$2") || { log "no such path: $2"; exit 2; }
      if [[ $path == / || $path == *:* || $path == *$'\n'* ]]; then
        log "refusing to bind $path"; exit 2
      fi
      wanted+=("$path"); shift 2 ;;
    *) log "unknown argument: $1 (use --bind-ro PATH or stop)"; exit 2 ;;
  esac
done

install_tools

# A bound path that was removed and made again since (a checkout cloned anew at the same
# path): the container still sees the old, deleted directory there.
replaced() {
  local leader
  leader=$(pgrep -P "$pid" | head -1)
  [[ -n $leader ]] || return 1
  [[ $(stat -c %d:%i "$1" 2>/dev/null) != $(stat -c %d:%i "/proc/$leader/root$1" 2>/dev/null) ]]
}

pid=$(nspawn_pid)
if [[ -n $pid ]]; then
  have=()
  [[ -f $BINDS ]] && mapfile -t have <"$BINDS"
  for path in "${wanted[@]}"; do
    if ! printf '%s\n' "${have[@]}" | grep -qxF -- "$path" || replaced "$path"; then
      log "the running container lacks $path (or sees an older one): restarting it with it"
      for kept in "${have[@]}"; do  # what it had, unless gone since (a removed checkout)
        [[ -e $kept ]] && wanted+=("$kept")
      done
      stop
      pid=
      break
    fi
  done
fi

if [[ -z $pid ]]; then
  root_current || build_root
  mkdir -p "$BUS_DIR" "$ENV_DIR"
  chmod 0700 "$ENV_DIR"
  rm -f "$BUS_SOCKET"
  binds=(--bind="$BUS_DIR:/run/dbus" --bind="$ENV_DIR")
  : >"$BINDS"
  mapfile -t unique < <(printf '%s\n' "${wanted[@]}" | sort -u)
  for path in "${unique[@]}"; do
    [[ -n $path ]] || continue
    binds+=(--bind-ro="$path")
    echo "$path" >>"$BINDS"
  done
  log "booting systemd in a container (log: $LOG)"
  # setsid + nohup: the container outlives this script and the shell that ran it; it must
  # not inherit the lock (9>&-), or the next caller would wait for it forever.
  setsid nohup systemd-nspawn --boot --register=no --keep-unit --quiet \
    --directory="$ROOT" --machine="$MACHINE" --console=read-only \
    --link-journal=no --timezone=off --resolv-conf=off "${binds[@]}" \
    >>"$LOG" 2>&1 </dev/null 9>&- &
  echo $! >"$PIDFILE"
fi

deadline=$((SECONDS + WAIT_SECONDS))
until [[ $(system_state) =~ ^(running|degraded)$ ]]; do
  if ((SECONDS >= deadline)) || [[ -z $(nspawn_pid) ]]; then
    log "systemd did not come up on $BUS_SOCKET within ${WAIT_SECONDS}s; last log lines:"
    tail -n 20 "$LOG" >&2 || true
    exit 1
  fi
  sleep 0.5
done

echo "OSRDYNE_SYSTEMD_BUS=${BUS}"
echo "OSRDYNE_SYSTEMD_ROOT=${ROOT}"
echo "OSRDYNE_SYSTEMD_LEADER=$(leader_pid "$(nspawn_pid)")"
