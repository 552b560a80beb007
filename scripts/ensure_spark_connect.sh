#!/usr/bin/env bash
# Make sure a Spark Connect server answers on 127.0.0.1:$SPARK_CONNECT_PORT, or stop it.
#
#   scripts/ensure_spark_connect.sh           # start it unless it answers; wait until it does
#   scripts/ensure_spark_connect.sh --stop    # stop the server this script started
#
# The server is the one shipped in the pyspark distribution (`sbin/start-connect-server.sh`,
# its `spark-connect` jar is in `pyspark/jars`: nothing is downloaded). Keyed Spark workers
# reach it with SPARK_WORKER_REMOTE=sc://127.0.0.1:$SPARK_CONNECT_PORT (docs/spark.md).
#
# Environment:
#   SPARK_CONNECT_PORT           gRPC port (default 15002)
#   SPARK_CONNECT_MASTER         Spark master of the server (default local[*]; spark://host:7077
#                                for the standalone cluster)
#   SPARK_CONNECT_DRIVER_MEMORY  the server's heap: every key's cached dataset lives in it
#                                (default 4g)
#   SPARK_CONNECT_STATE_DIR      pid and log files (default /tmp/osrdyne-spark-connect-$PORT)
#   SPARK_CONNECT_BIND           address it listens on (default 127.0.0.1)
#   SPARK_CONNECT_CLEANUP        how often the server's JVM collects garbage so that the data of
#                                released sessions (stopped workers) is freed (default 1min)
#   SPARK_CONNECT_SESSION_TIMEOUT  idle time after which the server releases a session whose
#                                client went silent (a killed worker), its data with it
#                                (default 60min)
#   SPARK_CONNECT_UI_PORT        run the Spark UI (and its REST API) on this port (default: off)
#   PYTHON                       the Python with pyspark[connect] (default: the repository's
#                                .venv/bin/python that scripts/setup.sh makes, else python3)
#
# The server gets the same safety settings as an embedded worker's session (SQL cannot read
# files by path, no `${...}` substitution), its JVM exits on OutOfMemoryError, and it is
# launched without the broker's credentials (WORKER_*, OSRDYNE_* are unset for it).
set -euo pipefail

log() { echo "ensure_spark_connect: $*" >&2; }

PORT=${SPARK_CONNECT_PORT:-15002}
MASTER=${SPARK_CONNECT_MASTER:-local[*]}
MEMORY=${SPARK_CONNECT_DRIVER_MEMORY:-4g}
BIND=${SPARK_CONNECT_BIND:-127.0.0.1}
STATE=${SPARK_CONNECT_STATE_DIR:-/tmp/osrdyne-spark-connect-$PORT}
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=python3
  [[ -x "$REPO/.venv/bin/python" ]] && PYTHON="$REPO/.venv/bin/python"
fi
URL="sc://127.0.0.1:$PORT"
UI=(--conf spark.ui.enabled=false)
if [[ -n "${SPARK_CONNECT_UI_PORT:-}" ]]; then
  UI=(--conf spark.ui.enabled=true --conf "spark.ui.port=$SPARK_CONNECT_UI_PORT")
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

answers() {  # a real Connect session: the port alone may be open before the service is
  port_open && "$PYTHON" - "$URL" >/dev/null 2>&1 <<'EOF'
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).create()
assert spark.range(1).count() == 1
spark.stop()
EOF
}

if ! SPARK_HOME=$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null); then
  log "$PYTHON cannot import pyspark: run scripts/setup.sh, or set PYTHON to a Python with pyspark[connect]"
  exit 1
fi
export SPARK_HOME SPARK_PID_DIR="$STATE" SPARK_LOG_DIR="$STATE" SPARK_IDENT_STRING="osrdyne-$PORT"

if [[ "${1:-}" == "--stop" ]]; then
  # The JVM the pid file names (spark-daemon.sh removes the file when it signals it).
  jvm=$(cat "$STATE"/*.pid 2>/dev/null | head -n 1 || true)
  if [[ -d "$STATE" ]]; then
    "$SPARK_HOME/sbin/stop-connect-server.sh" >/dev/null 2>&1 || true
  fi
  for _ in $(seq 1 30); do port_open || { log "stopped (port $PORT closed)"; exit 0; }; sleep 1; done
  # Its orderly stop (SIGTERM: the SparkContext stops, sessions close) can outlast 30 s on a
  # loaded machine: the JVM this script started is killed then.
  if [[ $jvm =~ ^[0-9]+$ ]] && [[ $(ps -p "$jvm" -o comm= 2>/dev/null) == java ]]; then
    log "the server did not stop within 30 s of SIGTERM: SIGKILL to $jvm"
    kill -9 "$jvm" 2>/dev/null || true
    for _ in $(seq 1 10); do port_open || { log "stopped (port $PORT closed)"; exit 0; }; sleep 1; done
  fi
  log "the server on port $PORT is still running (not started by this script?)"
  exit 1
fi

if answers; then
  log "Spark Connect answers at $URL"
  echo "$URL"
  exit 0
fi
if port_open; then
  log "port $PORT is taken by something that is not a Spark Connect server"
  exit 1
fi

mkdir -p "$STATE"
log "starting the Spark Connect server ($MASTER, heap $MEMORY) at $URL; logs in $STATE"
env -u WORKER_AMQP_URI -u OSRDYNE_API_TOKEN -u OSRDYNE_AMQP_URI \
  "$SPARK_HOME/sbin/start-connect-server.sh" \
  --master "$MASTER" \
  --driver-memory "$MEMORY" \
  --conf "spark.connect.grpc.binding.address=$BIND" \
  --conf "spark.connect.grpc.binding.port=$PORT" \
  "${UI[@]}" \
  --conf spark.ui.showConsoleProgress=false \
  --conf "spark.cleaner.periodicGC.interval=${SPARK_CONNECT_CLEANUP:-1min}" \
  --conf "spark.connect.session.manager.defaultSessionTimeout=${SPARK_CONNECT_SESSION_TIMEOUT:-60min}" \
  --conf spark.sql.runSQLOnFiles=false \
  --conf spark.sql.variable.substitute=false \
  --conf spark.sql.shuffle.partitions=1 \
  --conf spark.sql.adaptive.enabled=false \
  --conf spark.locality.wait=0s \
  --conf spark.sql.session.timeZone=UTC \
  --conf spark.driver.extraJavaOptions=-XX:+ExitOnOutOfMemoryError \
  >/dev/null

for _ in $(seq 1 120); do
  if answers; then
    log "Spark Connect answers at $URL"
    echo "$URL"
    exit 0
  fi
  sleep 1
done
log "timed out waiting for Spark Connect at $URL (see $STATE/*.out)"
exit 1
