"""Fixtures of the Spark Connect tests: one real Spark Connect server for the session (the
pyspark distribution's, started by scripts/ensure_spark_connect.sh), datasets written by it,
and a subprocess driver running keyed workers that reach it with SPARK_WORKER_REMOTE.

The server runs on its own port (not the default 15002 a developer may be using), with a
small heap and its UI on so tests can read its storage through the REST API.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tenacity

from spark_workers import SparkWorkerSettings, connect, pipeline
from tests.spark.conftest import (  # noqa: F401 - the embedded session (tests/spark's), for
    dataset_root,  # the test comparing the guards: started only by a test that asks for it
    spark,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ensure_spark_connect.sh"
HERE = Path(__file__).resolve().parent
PORT = int(os.environ.get("OSRDYNE_TEST_CONNECT_PORT", "15112"))
UI_PORT = PORT + 1
URL = f"sc://127.0.0.1:{PORT}"
TRIPS_ROWS = 2_000
MODE_VARIABLE = "SPARK_CONNECT_MODE_ENABLED"

#: pyspark warns when a call gave up retrying an unreachable server: the tests cause that.
CONNECT_WARNINGS = [
    "ignore:PySpark does not yet fully support pandas:FutureWarning",
    "ignore::DeprecationWarning:py4j.*",
    "ignore:.*RETRIES_EXCEEDED.*:UserWarning",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            for spec in CONNECT_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


def server(*args: str, state: Path) -> None:
    """Run the script (start, or `--stop`) against the tests' server."""
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        SPARK_CONNECT_PORT=str(PORT),
        SPARK_CONNECT_UI_PORT=str(UI_PORT),
        SPARK_CONNECT_MASTER="local[2]",
        SPARK_CONNECT_DRIVER_MEMORY="2g",
        SPARK_CONNECT_STATE_DIR=str(state),
        SPARK_CONNECT_CLEANUP="10s",
    )
    subprocess.run([str(SCRIPT), *args], env=env, check=True, timeout=240, capture_output=True)


@contextlib.contextmanager
def remote_mode_restored() -> Iterator[None]:
    """pyspark marks the whole process as Spark Connect (`SPARK_CONNECT_MODE_ENABLED=1`) once
    a remote session is built: a worker process is, but this test process also runs the
    embedded tests (tests/spark), whose `getOrCreate` would then look for a remote URL."""
    saved = os.environ.get(MODE_VARIABLE)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(MODE_VARIABLE, None)
        else:
            os.environ[MODE_VARIABLE] = saved


@pytest.fixture(autouse=True)
def _remote_mode_restored() -> Iterator[None]:
    with remote_mode_restored():
        yield


@pytest.fixture(scope="session")
def connect_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-connect")


@pytest.fixture(scope="session")
def connect_url(connect_state: Path) -> Iterator[str]:
    """The shared server, started once (and stopped at the end of the session)."""
    server(state=connect_state)
    yield URL
    server("--stop", state=connect_state)


@pytest.fixture(scope="session")
def connect_datasets(connect_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`trips` and `sales` under a root, written by the server through a session."""
    root = tmp_path_factory.mktemp("connect-datasets")
    with remote_mode_restored():
        spark = connect.build_remote_session(SparkWorkerSettings(remote=connect_url))
        try:
            trips = pipeline.trips(spark, TRIPS_ROWS, 42)
            trips.repartition(2).write.parquet(str(root / "trips"))
            pipeline.sales(spark, 200, 7).coalesce(1).write.parquet(str(root / "sales"))
        finally:
            spark.stop()
    return root


@tenacity.retry(
    retry=tenacity.retry_if_exception_type(OSError),  # timeouts and refused connections
    stop=tenacity.stop_after_attempt(4),
    wait=tenacity.wait_fixed(1),
    reraise=True,
)
def server_api(path: str) -> Any:
    """GET `path` of the server's application in its REST API (the UI's). A server busy with
    the other tests' JVMs can take more than its timeout to answer one read: read again."""
    base = f"http://127.0.0.1:{UI_PORT}/api/v1/applications"
    with urllib.request.urlopen(base, timeout=30) as answer:
        app = json.load(answer)[0]["id"]
    with urllib.request.urlopen(f"{base}/{app}/{path}", timeout=30) as answer:
        return json.load(answer)


def storage() -> list[dict[str, Any]]:
    """The blocks the server holds for cached data (its REST API)."""
    return server_api("storage/rdd")  # type: ignore[no-any-return]


def connect_driver(tmp_path: Path, root: Path, url: str, **env: str) -> dict[str, Any]:
    """The subprocess driver running Spark Connect query workers (with a `slow` endpoint)."""
    return {
        "kind": "subprocess",
        "subprocess": {
            "command": [sys.executable, "-m", "tests.spark_connect.slow_worker"],
            "env": {
                "PYTHONPATH": str(REPO),
                "WORKER_ACTIVITY_INTERVAL": "1",
                "WORKER_DRAIN_TIMEOUT": "5",
                "SPARK_WORKER_DATASET_ROOT": str(root),
                "SPARK_WORKER_REMOTE": url,
                "SPARK_WORKER_CANCEL_GRACE": "20",
                **env,
            },
            "owner": str(tmp_path / "workers"),
            "stop_timeout": 10,
            "restart_backoff": 0.5,
        },
    }
