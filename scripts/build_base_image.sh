#!/usr/bin/env bash
# Make the base images of deploy/compose/ on this machine, from Debian packages, in osrdyne's
# own Docker engine (scripts/ensure_dockerd.sh), for machines that reach no image registry.
#
#   osrdyne-base:python3.11-bookworm   (OSRDYNE_BASE_IMAGE) a minimal Debian bookworm made
#       with debootstrap: python3 (3.11) in a virtualenv at /opt/python whose bin/ leads PATH,
#       so `pip install` and `python` behave as in the official python:3.11-slim, which the
#       Dockerfiles name by default (`--build-arg BASE_IMAGE=...` picks this one instead).
#   osrdyne-rabbitmq:trixie            (OSRDYNE_RABBITMQ_IMAGE) Debian 13's rabbitmq-server
#       4.0.5 (deploy/compose/Dockerfile.rabbitmq), standing in for rabbitmq:4.0-management, on
#       osrdyne-debian:trixie-rabbitmq, the Debian 13 root of scripts/rabbitmq_root.sh (the
#       4.0 broker the tests run beside 3.10, made once and cached) imported as an image.
#
# Users with a registry need none of this: the Dockerfiles and the compose file use the
# official images unless told otherwise (see docs/drivers.md, "docker compose").
#
# The packages come from the Debian mirror this machine's apt uses (OSRDYNE_DEBIAN_MIRROR to
# choose another). The base trusts the certificate authorities this machine trusts
# (OSRDYNE_CA_BUNDLE, default /etc/ssl/certs/ca-certificates.crt, copied in and named by
# PIP_CERT, SSL_CERT_FILE and REQUESTS_CA_BUNDLE): where HTTPS goes through an inspecting
# proxy, `pip install` in the image builds verifies PyPI as the host's pip does. Idempotent and cached: an image already there is kept (OSRDYNE_REBUILD=1
# makes them again). Quiet unless something fails; prints `DOCKER_HOST=...` on its last line,
# as ensure_dockerd.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_quiet.sh

BASE_IMAGE=${OSRDYNE_BASE_IMAGE:-osrdyne-base:python3.11-bookworm}
RABBITMQ_IMAGE=${OSRDYNE_RABBITMQ_IMAGE:-osrdyne-rabbitmq:trixie}
RABBITMQ_BASE=osrdyne-debian:trixie-rabbitmq
SUITE=bookworm
CA_BUNDLE=${OSRDYNE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
IMAGE_CA_BUNDLE=/etc/ssl/certs/osrdyne-host-ca-bundle.crt

log() { echo "build_base_image: $*" >&2; }

docker_host_line=$(scripts/ensure_dockerd.sh | tail -n 1)
export "${docker_host_line?}"

has_image() { [[ -z "${OSRDYNE_REBUILD:-}" ]] && docker image inspect "$1" >/dev/null 2>&1; }

# The first Debian archive (not the security one) named by apt's sources, deb822 or one-line.
debian_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -v '^\s*#' | grep -oE '(https?)://[^ ]+' | grep -E '/debian/?$' | head -n 1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

if ! has_image "$BASE_IMAGE"; then
  mirror=${OSRDYNE_DEBIAN_MIRROR:-$(debian_mirror)}
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "debootstrap is missing: installing it"
    apt_install debootstrap
  fi
  log "making ${BASE_IMAGE} with debootstrap from ${mirror} (first time: a few minutes)"
  # Under /var/tmp, not /tmp: a tmpfs /tmp may be mounted nodev, which debootstrap refuses.
  root=$(mktemp -d /var/tmp/osrdyne-rootfs.XXXXXX)
  chmod 755 "$root"  # it becomes the image's /, which mktemp made 0700 (root only)
  cleanup() { umount -R "$root/proc" "$root/sys" 2>/dev/null || true; rm -rf "$root"; }
  trap cleanup EXIT
  quietly debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$root" "$mirror"
  # The official python images keep their own interpreter's site-packages writable for pip;
  # Debian's python3 is "externally managed" (PEP 668), so a virtualenv plays that part.
  quietly chroot "$root" python3 -m venv /opt/python
  cat >"$root/etc/apt/sources.list" <<EOF
deb ${mirror} ${SUITE} main
deb ${mirror} ${SUITE}-updates main
EOF
  ca_env=()
  if [[ -s "$CA_BUNDLE" ]]; then
    cp "$CA_BUNDLE" "${root}${IMAGE_CA_BUNDLE}"
    for var in PIP_CERT SSL_CERT_FILE REQUESTS_CA_BUNDLE; do
      ca_env+=(--change "ENV ${var}=${IMAGE_CA_BUNDLE}")
    done
  fi
  # Like the official Debian images: no service starts at package installation, no caches.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/* "$root"/root/.cache
  umount -R "$root/proc" "$root/sys" 2>/dev/null || true
  tar -C "$root" --numeric-owner --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* -c . \
    | quietly docker import \
      --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["python3"]' "${ca_env[@]}" \
      --message "osrdyne: Debian ${SUITE} (debootstrap minbase) with python3 in /opt/python" \
      - "$BASE_IMAGE"
  cleanup
  trap - EXIT
fi

if ! has_image "$RABBITMQ_IMAGE"; then
  if ! has_image "$RABBITMQ_BASE"; then
    root=$(scripts/rabbitmq_root.sh build | sed -n 's/^OSRDYNE_RABBITMQ_ROOT=//p')
    log "importing ${RABBITMQ_BASE} from ${root}"
    # The root as it is on disk: the nodes run in it mount their directories in namespaces
    # of their own, so nothing of theirs is in it but empty mount points.
    tar -C "$root" --numeric-owner --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* \
      --exclude=./tmp/* -c . \
      | quietly docker import --change 'ENV LANG=C.UTF-8' \
        --message "osrdyne: Debian trixie (debootstrap minbase) with rabbitmq-server" \
        - "$RABBITMQ_BASE"
  fi
  log "building ${RABBITMQ_IMAGE} from Debian's rabbitmq-server on ${RABBITMQ_BASE}"
  # Host network: the engine has no bridge of its own for builds (ensure_dockerd.sh).
  quietly docker build --force-rm --network host --build-arg "BASE_IMAGE=${RABBITMQ_BASE}" \
    -f deploy/compose/Dockerfile.rabbitmq -t "$RABBITMQ_IMAGE" deploy/compose
fi

echo "$docker_host_line"
