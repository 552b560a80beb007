#!/usr/bin/env bash
# RabbitMQ 4.0 on this Debian 12 machine: Debian 13's package (rabbitmq-server 4.0.5, Erlang 27)
# in a Debian 13 root of its own, whose commands run on this host's kernel, network and epmd.
#
#   scripts/rabbitmq_root.sh build                          make the root (once), print where
#   scripts/rabbitmq_root.sh run [--bind DIR]... -- CMD...  run CMD in the root, as its user
#                                                           `rabbitmq` (CMD: a path in the root,
#                                                           e.g. /usr/lib/rabbitmq/bin/rabbitmqctl)
#   scripts/rabbitmq_root.sh owner                          uid:gid of the root's `rabbitmq`
#                                                           (who must own a node's directories)
#
# Debian 13's RabbitMQ does not install on Debian 12 (it needs a newer libc), so the root is made
# with debootstrap (trixie, --variant=minbase, from the Debian mirror apt uses here; about two
# minutes, once) and kept under /var/lib/osrdyne-rabbitmq/<version>-r<recipe> (a changed recipe
# makes a new one beside; older ones are removed). No service starts in it at installation.
#
# `run` gives CMD a mount namespace of its own (unshare) in which the root has /proc, /dev, /sys,
# a /tmp of its own (tmpfs) and each --bind DIR at the same path (the node's data, log and
# config directories), then chroots into it, as the root's `rabbitmq` user when we are root. Nothing is mounted on the
# host and nothing runs but CMD: it is this host's process (its pid, its signals, its
# environment in /proc/<pid>/environ, its open-files limit), on this host's network (loopback
# ports, the host's epmd), so the scripts and tests that find, kill and pause nodes work on it
# as on the installed 3.10. The environment is passed through as given: callers set it whole.
set -euo pipefail
source "$(dirname "$0")/_quiet.sh"

VERSION=4.0
SUITE=trixie
PACKAGE_VERSION=4.0.*  # apt's pin: the root's RabbitMQ is 4.0, whatever trixie moves to
# Bump when the recipe below changes: a root of another recipe is not used.
RECIPE=2
STATE=/var/lib/osrdyne-rabbitmq
ROOT=$STATE/$VERSION-r$RECIPE

log() { echo "rabbitmq_root: $*" >&2; }

mirror() {  # the Debian mirror apt uses here (deb822 sources first, then sources.list)
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' \
    | grep -v -e security -e '^$' | head -n 1 || true)
  if [[ -z $uri ]]; then
    uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
      | grep -v security | head -n 1 || true)
  fi
  echo "${OSRDYNE_DEBIAN_MIRROR:-${uri:-http://deb.debian.org/debian}}"
}

in_root() {  # in_root DIR CMD...: CMD in DIR as root, with /proc, /dev and /sys, nothing left
  local dir=$1; shift
  unshare --mount --propagation private -- /bin/sh -euc '
    dir=$1; shift
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    mount --rbind /sys "$dir/sys"
    exec chroot "$dir" "$@"' sh "$dir" "$@"
}

build() {
  local tmp=$ROOT.tmp uri
  uri=$(mirror)
  command -v debootstrap >/dev/null || apt_install debootstrap
  [[ -f /usr/share/debootstrap/scripts/$SUITE ]] || apt_install debootstrap
  log "making a Debian $SUITE root with RabbitMQ $VERSION under $ROOT (debootstrap from $uri," \
    "once; a few minutes)"
  rm -rf "$tmp"
  mkdir -p "$STATE"
  quietly debootstrap --variant=minbase "$SUITE" "$tmp" "$uri"
  # As in the official Debian images: no service starts at installation (the postinst would
  # start a node in the root), no recommends.
  printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
  chmod 755 "$tmp/usr/sbin/policy-rc.d"
  # The node runs as the root's `rabbitmq`: with this machine's rabbitmq ids where it has
  # them (ps and file listings on the host then name it rabbitmq, not whoever has its ids).
  local ids
  if ids=$(getent passwd rabbitmq | cut -d: -f3,4) && [[ -n $ids ]]; then
    quietly in_root "$tmp" groupadd --system --gid "${ids#*:}" rabbitmq
    quietly in_root "$tmp" useradd --system --uid "${ids%:*}" --gid "${ids#*:}" \
      --home-dir /var/lib/rabbitmq --shell /usr/sbin/nologin rabbitmq
  fi
  quietly in_root "$tmp" apt-get -o APT::Install-Recommends=false update
  DEBIAN_FRONTEND=noninteractive quietly in_root "$tmp" apt-get -y \
    -o APT::Install-Recommends=false install "rabbitmq-server=$PACKAGE_VERSION"
  in_root "$tmp" apt-get clean
  rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/log/rabbitmq/*
  in_root "$tmp" dpkg-query -W -f '${Version}\n' rabbitmq-server >"$tmp/.osrdyne-rabbitmq-version"
  echo "$RECIPE" >"$tmp/.osrdyne-recipe"
  rm -rf "$ROOT"
  mv "$tmp" "$ROOT"
  # Older recipes' roots: nothing uses them any more.
  find "$STATE" -mindepth 1 -maxdepth 1 -name "$VERSION-r*" ! -name "$VERSION-r$RECIPE" \
    -exec rm -rf {} +
  log "made: RabbitMQ $(cat "$ROOT/.osrdyne-rabbitmq-version") in $ROOT"
}

ready() { [[ -f $ROOT/.osrdyne-recipe && -x $ROOT/usr/lib/rabbitmq/bin/rabbitmq-server ]]; }

ensure_built() {
  ready && return 0
  # One builder at a time (a test run and a script may both find it missing).
  mkdir -p "$STATE"
  exec 9>"$STATE/build.lock"
  flock 9
  ready || build
  exec 9>&-
}

owner() { awk -F: '$1 == "rabbitmq" {print $3 ":" $4}' "$ROOT/etc/passwd"; }

run() {
  local binds=() dir
  while (($#)); do
    case $1 in
      --bind)
        [[ $# -ge 2 ]] || { log "--bind needs a directory"; exit 2; }
        dir=$(realpath -e -- "$2") || { log "no such directory: $2"; exit 2; }
        [[ $dir != / && $dir != *$'\n'* ]] || { log "refusing to bind $dir"; exit 2; }
        binds+=("$dir"); shift 2 ;;
      --) shift; break ;;
      *) log "unknown argument to run: $1"; exit 2 ;;
    esac
  done
  (($#)) || { log "run needs a command after --"; exit 2; }
  ensure_built
  local user=()
  if [[ $(id -u) == 0 ]]; then
    user=(--userspec="$(owner)")
  fi
  # The bound directories' mount points are made in the namespace: under /tmp on its tmpfs
  # (gone with it), elsewhere in the root (kept, empty).
  exec unshare --mount --propagation private -- /bin/sh -euc '
    root=$1; nbinds=$2; shift 2
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --rbind /sys "$root/sys"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    while [ "$nbinds" -gt 0 ]; do
      mkdir -p "$root$1"
      mount --bind "$1" "$root$1"; shift; nbinds=$((nbinds - 1))
    done
    exec chroot "$@"' sh "$ROOT" "${#binds[@]}" "${binds[@]}" "${user[@]}" "$ROOT" "$@"
}

case ${1:-} in
  build) ensure_built; echo "OSRDYNE_RABBITMQ_ROOT=$ROOT" ;;
  run) shift; run "$@" ;;
  owner) ensure_built; owner ;;
  *) echo "usage: $0 build | run [--bind DIR]... -- CMD [ARG]... | owner" >&2; exit 2 ;;
esac
