"""Keyed Spark workers: a `worker_sdk.Worker` that holds one dataset in a long-lived session.

A data engineer declares how a key becomes a DataFrame and writes handlers; this module owns
the rest. At startup (a `Worker.on_startup` hook, so `ready` is reported only once the data is
in memory) it checks the key, builds the SparkSession, loads the DataFrame, caches it and
registers it as the temp view `dataset`. Each handler runs in a handler thread inside a Spark
job group cancelled at the request's deadline.

A key that names no dataset (`DatasetError` from `validate` or `load`) does not crash the
worker, which would only be restarted to fail again: it starts, reports ready, and answers
every request with that error.

    app = SparkWorker(load=lambda spark, key: spark.read.parquet(f"/data/{key}"))

    @app.handler()
    def count(request: Request, data: LoadedDataset) -> int:
        return data.df.count()

    app.run()
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_workers import cancellation, catalog, session
from spark_workers import settings as settings_mod
from worker_sdk import HandlerError, Request, Worker, WorkerSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

Loader = Callable[["SparkSession", str], "DataFrame"]
Validator = Callable[[str], Any]
SparkHandler = Callable[[Request, "LoadedDataset"], Any]

#: The temp view handlers' SQL reads the dataset from.
VIEW_NAME = "dataset"


@dataclasses.dataclass
class LoadedDataset:
    """What a handler gets besides the request: the session and the key's cached DataFrame."""

    key: str
    spark: SparkSession
    df: DataFrame
    settings: settings_mod.SparkWorkerSettings
    #: Seconds spent starting Spark and loading the data (for logs and benchmarks).
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Row count taken when caching (None when caching is off).
    rows: int | None = None
    #: State handlers keep with the dataset (the query worker's plan cache...).
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)


class SparkWorker:
    """A keyed worker serving one dataset from a long-lived SparkSession."""

    def __init__(
        self,
        load: Loader | None = None,
        *,
        settings: settings_mod.SparkWorkerSettings | None = None,
        worker: Worker | None = None,
        worker_settings: WorkerSettings | None = None,
        validate: Validator | None = None,
    ) -> None:
        self.settings = settings if settings is not None else settings_mod.SparkWorkerSettings()
        if load is None:
            cat = catalog.Catalog.from_settings(self.settings)
            load, validate = cat.load, validate or cat.resolve
        self._load = load
        self._validate = validate
        self._worker = worker
        self._worker_settings = worker_settings
        self._handlers: list[tuple[str | None, SparkHandler]] = []
        #: The loaded dataset, once `start` succeeded.
        self.data: LoadedDataset | None = None
        #: Why the key could not be served, once `start` failed permanently.
        self.load_error: str | None = None

    @property
    def worker(self) -> Worker:
        """The underlying `worker_sdk.Worker` (built on first use: it reads WORKER_*)."""
        if self._worker is None:
            self._worker = Worker(self._worker_settings)
            self._worker.on_startup(self._on_startup)
            self._worker.on_shutdown(self._on_shutdown)
            for path, fn in self._handlers:
                self._register(path, fn)
        return self._worker

    def handler(self, path: str | None = None) -> Callable[[SparkHandler], SparkHandler]:
        """Register `fn(request, data)` for `x-rpc-path` = `path` (None: the default)."""

        def register(fn: SparkHandler) -> SparkHandler:
            self._handlers.append((path, fn))
            if self._worker is not None:
                self._register(path, fn)
            return fn

        return register

    def run(self) -> None:
        """Serve until SIGTERM: the entry point of a worker process."""
        self.worker.run()

    # -- loading --------------------------------------------------------------------------

    def start(self, key: str, *, spark: SparkSession | None = None) -> None:
        """Check the key, start Spark (unless given a session), load and cache the data.

        A `DatasetError` is kept in `load_error` and answered to every request; anything
        else propagates (the process dies and its driver restarts it).
        """
        timings: dict[str, float] = {}
        try:
            if self._validate is not None:
                self._validate(key)
            t0 = time.perf_counter()
            if spark is None:
                spark = session.build_session(self.settings)
            timings["spark_start_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            df = self._load(spark, key)
            rows = None
            if self.settings.cache:
                if self.settings.cache_partitions:
                    df = df.coalesce(self.settings.cache_partitions)
                df = df.cache()
                rows = df.count()
            df.createOrReplaceTempView(VIEW_NAME)
            timings["load_s"] = time.perf_counter() - t1
        except catalog.DatasetError as exc:
            self.load_error = str(exc)
            logger.error("key %r cannot be served: %s", key, exc)
            return
        self.data = LoadedDataset(
            key=key, spark=spark, df=df, settings=self.settings, timings=timings, rows=rows
        )
        logger.info(
            "dataset %r loaded: %s rows, spark start %.2f s, load %.2f s",
            key,
            rows,
            timings["spark_start_s"],
            timings["load_s"],
        )

    def call(self, fn: SparkHandler, request: Request) -> Any:
        """Run a handler on the loaded dataset, in a job group cancelled at the deadline."""
        if self.data is None:
            raise HandlerError(
                self.load_error or "the dataset is not loaded",
                details={"reason": "dataset"},
            )
        data = self.data
        timeout = self.settings.query_timeout
        left = request.time_left()
        if left is not None:
            timeout = min(timeout, left)
        return cancellation.run_in_job_group(
            data.spark,
            lambda: fn(request, data),
            timeout=timeout,
            description=f"{request.path or 'default'} {request.correlation_id or ''}",
        )

    # -- worker_sdk wiring ----------------------------------------------------------------

    def _register(self, path: str | None, fn: SparkHandler) -> None:
        assert self._worker is not None

        def run(request: Request) -> Any:  # sync: worker_sdk runs it in a handler thread
            return self.call(fn, request)

        run.__name__ = getattr(fn, "__name__", "spark_handler")
        self._worker.handler(path)(run)

    def _on_startup(self, worker: Worker) -> None:
        self.start(worker.settings.key)

    def _on_shutdown(self, worker: Worker) -> None:
        if self.data is not None:
            self.data.spark.stop()
