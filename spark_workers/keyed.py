"""Keyed Spark workers: a `worker_sdk.Worker` that holds one dataset in a long-lived session.

A data engineer declares how a key becomes a DataFrame and writes handlers; this module owns
the rest. At startup (a `Worker.on_startup` hook, so `ready` is reported only once the data is
in memory) it checks the key, builds the SparkSession, loads the DataFrame, caches it and
registers it as the temp view `dataset` (`key_dataset`: also what a key that cannot be served
is answered, and when it is loaded again). Each handler runs in a handler thread inside a
Spark job group cancelled at the request's deadline.

A worker whose JVM is gone, on the other hand, cannot serve anything: when the JVM exits (an
OutOfMemoryError ends it, see `session`; `System.exit`; a crash) or stops answering, the
requests in flight are answered with `worker_error` (reason `resources` after an OOM, else
`jvm_lost`), requests not yet started go back to the queue, and the process ends with exit
code 70 (`ending.EXIT_JVM_LOST`) once drained, so its driver starts a fresh one. Work still
running `cancel_grace` seconds after its bound (planning cannot be interrupted) ends the
process the same way, with exit code 71 (`ending.EXIT_OVERRUN`). Each logs one line saying
why (`ending`).

With `SPARK_WORKER_REMOTE=sc://...` the worker starts no JVM: it holds a session of its own
on a shared Spark Connect server (`backend.Connect`, `connect`), and a lost server ends it
with exit code 72 (`ending.EXIT_SERVER_LOST`) after giving the request in flight back to the
queue.

A standby worker (started ahead of demand, docs/protocol.md) starts Spark before it is
offered keys (a `Worker.on_standby` hook): it holds a started JVM and SparkSession, or an
open Connect session, and a new key only loads its dataset.

    app = SparkWorker(load=lambda spark, key: spark.read.parquet(f"/data/{key}"))

    @app.handler()
    def count(request: Request, data: key_dataset.LoadedDataset) -> int:
        return data.df.count()

    app.run()
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from spark_workers import backend as backend_mod
from spark_workers import cancellation, catalog, ending, jvm, key_dataset, result_cache
from spark_workers import settings as settings_mod
from worker_sdk import HandlerError, Reply, Request, Requeue, Worker, WorkerSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

SparkHandler = Callable[[Request, key_dataset.LoadedDataset], Any]
#: A request's query in a normal form, for the result cache (None: not kept).
CacheKey = Callable[[Request, key_dataset.LoadedDataset], Hashable | None]


class SparkWorker:
    """A keyed worker serving one dataset from a long-lived SparkSession."""

    def __init__(
        self,
        load: key_dataset.Loader | None = None,
        *,
        settings: settings_mod.SparkWorkerSettings | None = None,
        worker: Worker | None = None,
        worker_settings: WorkerSettings | None = None,
        validate: key_dataset.Validator | None = None,
        pinned: key_dataset.Pinned | None = None,
    ) -> None:
        self.settings = settings if settings is not None else settings_mod.SparkWorkerSettings()
        #: Where Spark runs: chosen once, from the settings (a session given to `start`
        #: must be of this backend).
        self.backend = backend_mod.chosen(self.settings)
        if load is None:
            cat = catalog.Catalog.from_settings(self.settings)
            load, validate = cat.load, validate or cat.resolve
            pinned = pinned or cat.pinned_version
        self._worker = worker
        self._worker_settings = worker_settings
        self._handlers: list[tuple[str | None, SparkHandler, CacheKey | None]] = []
        #: Whether, and why, the worker must end (its JVM or server is gone, work overran).
        self.ending = ending.Ending(lambda: self.worker.settings.drain_timeout)
        #: The key's dataset: loaded, cached, loaded again after a failure.
        self.dataset = key_dataset.KeyDataset(
            load,
            settings=self.settings,
            backend=self.backend,
            ending=self.ending,
            validate=validate,
            pinned=pinned,
            registry=self._metrics_registry,
        )
        #: The session a standby worker started before it had a key.
        self._warm: SparkSession | None = None

    @property
    def worker(self) -> Worker:
        """The underlying `worker_sdk.Worker` (built on first use: it reads WORKER_*)."""
        if self._worker is None:
            self._worker = Worker(self._worker_settings)
            self._worker.on_standby(self._on_standby)
            self._worker.on_startup(self._on_startup)
            self._worker.on_shutdown(self._on_shutdown)
            for path, fn, cache_key in self._handlers:
                self._register(path, fn, cache_key)
        return self._worker

    @property
    def data(self) -> key_dataset.LoadedDataset | None:
        """The loaded dataset, once `start` succeeded."""
        return self.dataset.data

    @property
    def cached(self) -> threading.Event:
        """Set once the dataset is served from memory (or will never be)."""
        return self.dataset.cached

    @property
    def load_error(self) -> str | None:
        """Why the key could not be served, once `start` failed permanently."""
        return self.dataset.load_error

    @property
    def results(self) -> result_cache.ResultCache | None:
        """The answers kept for the key's pinned version (None: not kept)."""
        return self.dataset.results

    @property
    def version(self) -> str | None:
        """The version the key pins (None: its data can move)."""
        return self.dataset.version

    @property
    def lost(self) -> jvm.JvmLost | None:
        """Why the JVM (or the Connect server) is gone, once it is."""
        return self.ending.lost

    @property
    def exit_code(self) -> int | None:
        """The code the process ends with, once it must end."""
        return self.ending.exit_code

    def handler(
        self, path: str | None = None, *, cache_key: CacheKey | None = None
    ) -> Callable[[SparkHandler], SparkHandler]:
        """Register `fn(request, data)` for `x-rpc-path` = `path` (None: the default).

        `cache_key(request, data)`: the request's query in a normal form (hashable; None:
        this request's answer is not kept). With it, the answers of a key that pins its
        version are kept and answered again from memory (`result_cache`)."""

        def register(fn: SparkHandler) -> SparkHandler:
            self._handlers.append((path, fn, cache_key))
            if self._worker is not None:
                self._register(path, fn, cache_key)
            return fn

        return register

    def run(self) -> None:
        """Serve until SIGTERM: the entry point of a worker process. Exits non-zero when the
        worker had to end itself (its JVM is gone, or work overran its bound)."""
        self.ending.owns_process = True
        try:
            self.worker.run()
        finally:
            code = self.ending.exit_code
            if code is not None:
                logger.info("worker process exiting with code %d", code)
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                # Not sys.exit: a Spark thread may still be stuck in a JVM call, and the
                # interpreter would wait for it forever at exit.
                os._exit(code)

    def start(self, key: str, *, spark: SparkSession | None = None) -> None:
        """Check the key, start Spark (unless given a session), load and cache the data
        (`KeyDataset.start`)."""
        self.dataset.start(key, spark=spark)

    def call(self, fn: SparkHandler, request: Request, *, cache_key: CacheKey | None = None) -> Any:
        """Run a handler on the loaded dataset, on a Spark thread in a job group; answered
        (`DeadlineExceeded`) at the request's deadline or `query_timeout`, whatever Spark does.
        With `cache_key` and a pinned version, a kept answer is returned without Spark, and a
        new one is kept (`result_cache`)."""
        dataset = self.dataset
        if dataset.data is None:
            dataset.reload()
        if dataset.data is None:
            raise HandlerError(
                dataset.load_error or "the dataset is not loaded",
                details={"reason": "dataset"},
            )
        lost = self.ending.lost
        if lost is not None or self.ending.exit_code is not None:
            # Not this request's fault: another worker (or this one, restarted) serves it.
            raise Requeue("the worker is ending: " + (lost.message if lost else ""))
        data, runner, results = dataset.data, dataset.runner, dataset.results
        assert runner is not None
        kept: Hashable | None = None
        if results is not None and cache_key is not None:
            normal = cache_key(request, data)
            if normal is not None:
                kept = (request.path, dataset.version, normal)
                answer = results.get(kept)
                if answer is not None:
                    return _reply(answer, result_cache.HIT)
        result = self._run(fn, request, data, runner)
        if kept is None or results is None:
            return result
        answer = result_cache.Answer(*Reply(result).encoded())
        results.put(kept, answer)
        return _reply(answer, result_cache.MISS)

    def _run(
        self,
        fn: SparkHandler,
        request: Request,
        data: key_dataset.LoadedDataset,
        runner: cancellation.Runner,
    ) -> Any:
        timeout = self.settings.query_timeout
        left = request.time_left()
        if left is not None:
            timeout = min(timeout, left)
        with self.dataset.answering():
            try:
                return runner.run(
                    lambda: fn(request, data),
                    timeout=timeout,
                    description=f"{request.path or 'default'} {request.correlation_id or ''}",
                )
            except cancellation.DeadlineExceeded:
                raise
            except Exception as exc:
                if self.backend.server_lost(exc):
                    self.ending.server_lost(exc, request)
                lost = self.ending.lost_by(exc)
                if lost is None:
                    raise
                details = {"reason": lost.reason, "exit_code": lost.exit_code}
                raise HandlerError(lost.message, details=details) from exc

    # -- worker_sdk wiring ----------------------------------------------------------------

    def _metrics_registry(self) -> Any:
        metrics = self._worker.metrics if self._worker is not None else None
        return metrics.registry if metrics is not None else None

    def _register(self, path: str | None, fn: SparkHandler, cache_key: CacheKey | None) -> None:
        assert self._worker is not None

        def run(request: Request) -> Any:  # sync: worker_sdk runs it in a handler thread
            return self.call(fn, request, cache_key=cache_key)

        run.__name__ = getattr(fn, "__name__", "spark_handler")
        self._worker.handler(path)(run)

    def _on_standby(self, worker: Worker) -> None:
        """A standby starts Spark (a JVM and SparkSession, or a Connect session) before it is
        offered keys: a new key then pays only for loading its dataset. A worker started for
        its key starts Spark in `start`, after checking the key."""
        t0 = time.perf_counter()
        self._warm = self.backend.start(self.settings)
        started = time.perf_counter() - t0
        self.backend.warm_up(self._warm)
        logger.info(
            "standby: spark started in %.2f s, warmed up in %.2f s",
            started,
            time.perf_counter() - t0 - started,
        )

    def _on_startup(self, worker: Worker) -> None:
        self.start(worker.settings.key, spark=self._warm)

    def _on_shutdown(self, worker: Worker) -> None:
        self.ending.stop_watching()
        if self.dataset.runner is not None:
            self.dataset.runner.close()
        data = self.dataset.data
        if data is None or self.ending.exit_code is not None:
            return  # not when ending: the JVM or server is gone, or a thread is stuck
        self.backend.release(data.spark)  # the session's views and data go with it


def _reply(answer: result_cache.Answer, outcome: str) -> Reply:
    return Reply(
        answer.body, headers={result_cache.HEADER: outcome}, content_type=answer.content_type
    )
