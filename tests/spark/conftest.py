"""Fixtures of the Spark worker tests: one SparkSession for the in-process tests, small
datasets written once, and requests built without a broker.

The session is configured exactly as a worker's (`spark_workers.session`), on `local[2]`
with a small heap: this machine has two cores and the whole folder must stay quick.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_workers import SparkWorker, SparkWorkerSettings, build_session, pipeline
from worker_sdk import Request

#: pyspark 4.x warns on import paths it takes with pandas 3; not ours to fix.
PYSPARK_WARNINGS = [
    "ignore:PySpark does not yet fully support pandas:FutureWarning",
    "ignore::DeprecationWarning:py4j.*",
]

TRIPS_ROWS = 2_000
SPARK_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SPARK_DIR in Path(str(item.path)).parents:
            for spec in PYSPARK_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


def settings_for(root: Path, **overrides: Any) -> SparkWorkerSettings:
    values: dict[str, Any] = {
        "master": "local[2]",
        "driver_memory": "1g",
        "dataset_root": str(root),
        "query_timeout": 60,
    }
    values.update(overrides)
    return SparkWorkerSettings(**values)


@pytest.fixture(scope="session")
def dataset_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("datasets")


@pytest.fixture(scope="session")
def spark(dataset_root: Path) -> Iterator[Any]:
    session = build_session(settings_for(dataset_root))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def datasets(spark: Any, dataset_root: Path) -> Path:
    """`trips` (Parquet, partitioned by city), `sales.csv` and `sales_json` under the root."""
    df = pipeline.trips(spark, TRIPS_ROWS, 42)
    df.repartition(2).write.partitionBy("city").parquet(str(dataset_root / "trips"))
    sales = pipeline.sales(spark, 200, 7).coalesce(1)
    sales.write.option("header", "true").csv(str(dataset_root / "sales.csv"))
    sales.write.json(str(dataset_root / "sales_json"))
    return dataset_root


@pytest.fixture
def make_app(spark: Any, datasets: Path) -> Callable[..., SparkWorker]:
    """A query worker loaded in-process for `key` (on the shared session)."""
    from spark_workers import query_worker

    def make(key: str = "trips", **overrides: Any) -> SparkWorker:
        app = query_worker.create_app(settings_for(datasets, **overrides))
        app.start(key, spark=spark)
        return app

    return make


class FakeMessage:
    """What `worker_sdk.Request` reads of an AMQP message."""

    def __init__(self, body: bytes, headers: dict[str, Any]) -> None:
        self.body = body
        self.headers = headers
        self.correlation_id = "test"
        self.reply_to = None
        self.redelivered = False


def make_request(
    body: Any = b"", *, path: str | None = None, timeout: float | None = None, key: str = "trips"
) -> Request:
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    headers: dict[str, Any] = {}
    if path is not None:
        headers["x-rpc-path"] = path
    if timeout is not None:
        headers["x-deadline"] = int((time.time() + timeout) * 1000)
    return Request(
        FakeMessage(body, headers),  # type: ignore[arg-type]
        key=key,
        progress_sender=None,  # type: ignore[arg-type]
        loop=None,  # type: ignore[arg-type]
    )


def call(app: SparkWorker, body: Any = b"", *, path: str | None = None, **kw: Any) -> Any:
    """Run the handler of `path` as worker_sdk would (in this thread, with the deadline)."""
    from spark_workers import query_worker

    handlers = {
        None: query_worker.answer_query,
        "query": query_worker.answer_query,
        "schema": query_worker.answer_schema,
        "count": query_worker.answer_count,
    }
    return app.call(handlers[path], make_request(body, path=path, **kw))
