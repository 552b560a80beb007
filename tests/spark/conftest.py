"""Fixtures of the Spark worker tests: one SparkSession for the in-process tests, small
datasets written once, and requests built without a broker.

The session is configured exactly as a worker's (`spark_workers.session`), on `local[2]`
with a small heap: this machine has two cores and the whole folder must stay quick. It is
built with a worker's credentials in the environment (`CANARIES`, fake): the security tests
look for them in the JVM. `tests/security` imports these fixtures; the session and the
datasets are made once whichever folder asks first.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
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

#: A secret that must never reach the JVM, and the variables that carry it at session start.
CANARY = "canary-b2f7e1d0"
CANARIES = {
    "WORKER_AMQP_URI": f"amqp://osrdyne:{CANARY}@127.0.0.1:5672/%2F",
    "OSRDYNE_API_TOKEN": CANARY,
    "BILLING_DB_URL": f"postgresql://billing:{CANARY}@db.invalid:5432/billing",
}

_shared: dict[str, Any] = {}


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


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`os.environ` with `values` set, restored after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def dataset_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if "root" not in _shared:
        _shared["root"] = tmp_path_factory.mktemp("datasets")
    return _shared["root"]  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def spark(dataset_root: Path) -> Iterator[Any]:
    """The session, started as a worker starts it: its credentials in the environment."""
    if "spark" not in _shared:
        with environment(CANARIES):
            _shared["spark"] = build_session(settings_for(dataset_root))
    yield _shared["spark"]
    _shared["spark"].stop()


@pytest.fixture(scope="session")
def datasets(spark: Any, dataset_root: Path) -> Path:
    """`trips` (Parquet, partitioned by city), `sales.csv` and `sales_json` under the root."""
    if "datasets" not in _shared:
        df = pipeline.trips(spark, TRIPS_ROWS, 42)
        df.repartition(2).write.partitionBy("city").parquet(str(dataset_root / "trips"))
        sales = pipeline.sales(spark, 200, 7).coalesce(1)
        sales.write.option("header", "true").csv(str(dataset_root / "sales.csv"))
        sales.write.json(str(dataset_root / "sales_json"))
        _shared["datasets"] = dataset_root
    return dataset_root


@pytest.fixture
def make_app(spark: Any, datasets: Path) -> Callable[..., SparkWorker]:
    """A query worker loaded in-process for `key` (on the shared session)."""
    from spark_workers import query_worker

    def make(key: str = "trips", **overrides: Any) -> SparkWorker:
        app = query_worker.create_app(settings_for(datasets, **overrides))
        app.start(key, spark=spark)
        app.cached.wait(300)  # the tests look at a worker serving from memory
        return app

    return make


@pytest.fixture
def run_query_workers(
    pool: str, make_controller: Callable[..., Awaitable[Any]], datasets: Path, tmp_path: Path
) -> Callable[..., Awaitable[Any]]:
    """Starts a controller of the test's pool whose subprocess driver runs real query worker
    processes over `datasets`: `memory` is each one's driver heap, `env` more of their
    environment, `subprocess` more options of the driver (`standby`...); `scaling` the
    controller's group scaler settings (none: no scaler)."""

    async def run(*, scaling: dict[str, Any] | None = None, **options: Any) -> Any:
        controller = {} if scaling is None else {"scaling": scaling}
        return await make_controller(
            pool, driver=query_worker_driver(tmp_path, datasets, **options), **controller
        )

    return run


def query_worker_driver(
    tmp_path: Path,
    root: Path,
    *,
    memory: str = "1g",
    restart_backoff: float = 0.5,
    env: dict[str, str] | None = None,
    **subprocess: Any,
) -> dict[str, Any]:
    """A subprocess driver's settings running real query worker processes over `root`."""
    return {
        "kind": "subprocess",
        "subprocess": {
            "command": [sys.executable, "-m", "spark_workers.query_worker"],
            "env": {
                "WORKER_ACTIVITY_INTERVAL": "1",
                "WORKER_DRAIN_TIMEOUT": "5",
                "SPARK_WORKER_DATASET_ROOT": str(root),
                "SPARK_WORKER_MASTER": "local[2]",
                "SPARK_WORKER_DRIVER_MEMORY": memory,
                "SPARK_LOCAL_IP": "127.0.0.1",
                **(env or {}),
            },
            "owner": str(tmp_path / "workers"),
            "stop_timeout": 10,
            "restart_backoff": restart_backoff,
            **subprocess,
        },
    }


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
