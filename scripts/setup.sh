#!/usr/bin/env bash
# Everything the demo and the tests need, installed by the project itself: a virtualenv with
# the package and its extras (.venv), Java for Spark, busybox-static for the docker driver's
# test image, debootstrap and Debian's docker-compose for the compose test (tests/deploy, on
# the base images scripts/build_base_image.sh makes), headless Chromium and its driver for the
# console's browser tests, Prometheus for the HPA mode's metric test, the AMQP clients of
# other stacks the interop tests use (scripts/ensure_interop_clients.sh), and a RabbitMQ
# broker with its management API, left running (scripts/ensure_broker.sh). The systemd
# driver's container root is made by scripts/test.sh (the demo does not need it).
# Idempotent, and quiet unless something fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_quiet.sh

log() { echo "setup: $*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  quietly python3 -m venv .venv
fi
stamp=.venv/.osrdyne-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  log "installing osrdyne and its dependencies into .venv (first run takes a few minutes)"
  quietly .venv/bin/pip install --upgrade pip
  quietly .venv/bin/pip install -e ".[all]"
  touch "$stamp"
fi

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)     # Spark
[[ -x /bin/busybox ]] || missing+=(busybox-static)                    # docker test image
command -v chromium >/dev/null || missing+=(chromium)                  # console tests
command -v chromedriver >/dev/null || missing+=(chromium-driver)       # ... driven by selenium
command -v promtool >/dev/null || missing+=(prometheus)                # HPA mode's metric test
command -v debootstrap >/dev/null || missing+=(debootstrap)            # compose test's base images
command -v docker-compose >/dev/null || missing+=(docker-compose)      # ... and compose itself
command -v iptables >/dev/null || missing+=(iptables)                  # cluster partitions
if (( ${#missing[@]} )); then
  log "installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

scripts/ensure_interop_clients.sh
scripts/ensure_broker.sh >/dev/null  # its URL lines: the default broker's
