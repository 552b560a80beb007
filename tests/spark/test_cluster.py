"""Scale-out: the same query worker, with `SPARK_WORKER_MASTER=spark://...`, runs its
queries on a Spark standalone cluster started from the pyspark distribution itself.

The worker process gets the WORKER_* environment of a queue declared here (no controller):
the request is published straight to it with direct reply-to, as any AMQP client could.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import httpx
import pyspark
import pytest

from tests.spark.conftest import TRIPS_ROWS

pytestmark = pytest.mark.timeout(240)

SPARK_HOME = os.path.dirname(pyspark.__file__)
LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": SPARK_HOME}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_class(name: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
    command = [os.path.join(SPARK_HOME, "bin", "spark-class"), name, *args]
    env = {**os.environ, **LOOPBACK, "SPARK_NO_DAEMONIZE": "1"}
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)  # the JVM and its executors: its own session
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(5)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and one worker (1 core, 1g); the master URL once registered."""
    port, ui, worker_ui = free_port(), free_port(), free_port()
    master = spark_class(
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        str(ui),
        log=tmp_path / "master.log",
    )
    url = f"spark://127.0.0.1:{port}"
    worker = spark_class(
        "org.apache.spark.deploy.worker.Worker",
        url,
        "--host",
        "127.0.0.1",
        "--cores",
        "1",
        "--memory",
        "1g",
        "--webui-port",
        str(worker_ui),
        "--work-dir",
        str(tmp_path / "work"),
        log=tmp_path / "worker.log",
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert master.poll() is None and worker.poll() is None, "cluster process died"
            with contextlib.suppress(httpx.HTTPError, ValueError):
                state = httpx.get(f"http://127.0.0.1:{ui}/json/", timeout=2).json()
                if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                    break
            assert time.monotonic() < deadline, (tmp_path / "master.log").read_text()[-2000:]
            time.sleep(0.5)
        yield url
    finally:
        stop(worker)
        stop(master)


async def test_query_worker_on_a_standalone_cluster(
    cluster: str, pool: str, datasets: Path, amqp_url: str, tmp_path: Path
) -> None:
    queue_name, activity = f"{pool}-req-trips", f"{pool}-activity-xchg"
    connection = await aio_pika.connect(amqp_url)
    worker: subprocess.Popen[bytes] | None = None
    try:
        channel = await connection.channel()
        await channel.declare_exchange(activity, aio_pika.ExchangeType.FANOUT)
        await channel.declare_queue(queue_name)
        replies: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        reply_queue = await channel.get_queue("amq.rabbitmq.reply-to", ensure=False)
        await reply_queue.consume(replies.put, no_ack=True)

        env = {
            **os.environ,
            **LOOPBACK,
            "WORKER_ID": f"w-{uuid.uuid4().hex[:6]}",
            "WORKER_KEY": "trips",
            "WORKER_POOL": pool,
            "WORKER_REQUESTS_QUEUE": queue_name,
            "WORKER_ACTIVITY_EXCHANGE": activity,
            "WORKER_AMQP_URI": amqp_url,
            "SPARK_WORKER_MASTER": cluster,
            "SPARK_WORKER_DATASET_ROOT": str(datasets),
            "SPARK_WORKER_DRIVER_MEMORY": "1g",
            "SPARK_WORKER_EXECUTOR_MEMORY": "512m",
            "PYSPARK_PYTHON": sys.executable,
        }
        with (tmp_path / "query_worker.log").open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "spark_workers.query_worker"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        sql = "SELECT city, count(*) AS n FROM dataset GROUP BY city ORDER BY city"
        await channel.default_exchange.publish(
            aio_pika.Message(
                json.dumps({"sql": sql}).encode(),
                correlation_id="q1",
                reply_to="amq.rabbitmq.reply-to",
            ),
            routing_key=queue_name,
        )
        try:
            reply = await asyncio.wait_for(replies.get(), 180)
        except TimeoutError:
            pytest.fail((tmp_path / "query_worker.log").read_text()[-3000:])
        assert reply.correlation_id == "q1"
        assert reply.headers["x-status"] == "ok", reply.body[:500]
        rows = json.loads(reply.body)["rows"]
        assert sum(r["n"] for r in rows) == TRIPS_ROWS and len(rows) == 8
        log_text = (tmp_path / "query_worker.log").read_text()
        assert f"master {cluster}" in log_text  # it really ran on the cluster
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(5)
        await connection.close()
