"""Scale-out: the same pipeline and the same query worker run on a Spark standalone cluster
started from the pyspark distribution itself (`spark-class ...Master` / `...Worker` on
127.0.0.1), once for the module: the pipeline ingests a dataset on the cluster; a controller
starts the query worker group with `SPARK_WORKER_MASTER=spark://...` through its subprocess
driver, and `osrdyne.Client` gets the answer. Two tests, each one application on the cluster
(they were one test of 76-99 s in CI runs; each is now about half of that).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyspark
import pytest
from typer.testing import CliRunner

from osrdyne import Client
from spark_workers import pipeline as spark_pipeline
from tests.conftest import Running

pytestmark = pytest.mark.timeout(420)

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


@dataclasses.dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:PORT
    ui: str  # the master's web UI (its /json/ lists applications)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 1g), once the worker registered."""
    tmp_path = tmp_path_factory.mktemp("standalone")
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
        yield Cluster(url, f"http://127.0.0.1:{ui}")
    finally:
        stop(worker)
        stop(master)


ROWS = 3_000


async def write_trips(spark: Any, raw: Path) -> None:
    """The raw CSV files, from the test's own session (the generator is not what runs on the
    cluster here: one application less to start)."""
    trips = spark_pipeline.trips(spark, ROWS, 42).repartition(2)
    await asyncio.to_thread(trips.write.option("header", "true").csv, str(raw))


def applications(cluster: Cluster) -> tuple[list[str], list[str]]:
    """The names of the master's completed and running applications."""
    state = httpx.get(f"{cluster.ui}/json/", timeout=10).json()
    done = [app["name"] for app in state.get("completedapps", [])]
    return done, [app["name"] for app in state.get("activeapps", [])]


async def test_the_pipeline_ingests_on_a_standalone_cluster(
    cluster: Cluster, spark: Any, tmp_path: Path
) -> None:
    raw, root = tmp_path / "raw", tmp_path / "datasets"
    await write_trips(spark, raw)
    ingest = [sys.executable, "-m", "spark_workers.pipeline", "ingest", str(raw), str(root)]
    env = {**os.environ, **LOOPBACK, "PYSPARK_PYTHON": sys.executable}
    done = await asyncio.to_thread(
        subprocess.run,
        [*ingest, "--name", "trips", "--master", cluster.url],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout.decode()[-2000:] + done.stderr.decode()[-2000:]
    # The job ran on the cluster (the master lists it, ended), and wrote every row.
    assert applications(cluster)[0].count("osrdyne-pipeline") == 1
    assert spark.read.parquet(str(root / "trips")).count() == ROWS


async def test_a_query_worker_on_a_standalone_cluster_answers_through_osrdyne(
    cluster: Cluster,
    spark: Any,
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    client: Client,
    tmp_path: Path,
) -> None:
    raw, root = tmp_path / "raw", tmp_path / "datasets"
    await write_trips(spark, raw)
    # Ingested in the test's own session: the query worker is what runs on the cluster here.
    ingested = await asyncio.to_thread(
        CliRunner().invoke,
        spark_pipeline.app,
        ["ingest", str(raw), str(root), "--name", "trips"],
    )
    assert ingested.exit_code == 0, ingested.output[-2000:]

    # The query worker group, started by a controller through its subprocess driver.
    await make_controller(
        pool,
        driver={
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "spark_workers.query_worker"],
                "env": {
                    **LOOPBACK,
                    "SPARK_WORKER_MASTER": cluster.url,
                    "SPARK_WORKER_DATASET_ROOT": str(root),
                    "SPARK_WORKER_DRIVER_MEMORY": "1g",
                    "SPARK_WORKER_EXECUTOR_MEMORY": "512m",
                    "PYSPARK_PYTHON": sys.executable,
                },
                "stop_timeout": 30,
            },
        },
    )
    sql = "SELECT city, count(*) AS n FROM dataset GROUP BY city ORDER BY city"
    response = await client.call(pool, "trips", {"sql": sql}, timeout=240)
    assert response.ok, response.text[:500]
    found = response.json()["rows"]
    assert sum(r["n"] for r in found) == ROWS and len(found) == 8
    # The worker really runs on the cluster: the master lists its application, running.
    assert "osrdyne-spark-worker" in applications(cluster)[1]
