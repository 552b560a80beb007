"""Keyed Spark workers: a `worker_sdk.Worker` that holds one dataset in a long-lived session.

One room over 500 lines on purpose: a keyed worker's life (start Spark, load, cache, serve,
reload, lose its JVM or its server, end) is one state machine over one lock and one set of
fields; its handlers' wrapper, its hooks and its endings read and change the same state.

A data engineer declares how a key becomes a DataFrame and writes handlers; this module owns
the rest. At startup (a `Worker.on_startup` hook, so `ready` is reported only once the data is
in memory) it checks the key, builds the SparkSession, loads the DataFrame, caches it and
registers it as the temp view `dataset`. Each handler runs in a handler thread inside a Spark
job group cancelled at the request's deadline.

A key that names no dataset (`DatasetError` from `validate` or `load`), or whose loader fails
(a missing path, an unreadable file, a schema that does not match: anything the loader or the
cache raises while the JVM lives), does not crash the worker, which would only be restarted
to fail again: it starts, reports ready, and answers every request with that error
(`worker_error`, reason `dataset`). A request that comes `reload_interval` seconds after the
last attempt tries to load the dataset again first (one request at a time; the others are
answered at once), so a dataset restored in place is served without an operator. A worker
that cannot start Spark at all still ends (its start-up failure is reported, docs/protocol.md).

A worker whose JVM is gone, on the other hand, cannot serve anything: when the JVM exits (an
OutOfMemoryError ends it, see `session`; `System.exit`; a crash) or stops answering, the
requests in flight are answered with `worker_error` (reason `resources` after an OOM, else
`jvm_lost`), requests not yet started go back to the queue, and the process ends with exit
code 70 (`EXIT_JVM_LOST`) once drained, so its driver starts a fresh one. Work still running
`cancel_grace` seconds after its bound (planning cannot be interrupted) ends the process the
same way, with exit code 71 (`EXIT_OVERRUN`). Each logs one line saying why.

With `SPARK_WORKER_REMOTE=sc://...` the worker starts no JVM: it holds a session of its own
on a shared Spark Connect server (`spark_workers.connect`), and a lost server ends it with
exit code 72 (`EXIT_SERVER_LOST`) after giving the request in flight back to the queue.

A standby worker (started ahead of demand, docs/protocol.md) starts Spark before it is
offered keys (a `Worker.on_standby` hook): it holds a started JVM and SparkSession, or an
open Connect session, and a new key only loads its dataset.

Caching a dataset reads all of it, which takes longer than answering a query from its source.
Over Spark Connect, by default (`cache_in_background`), the worker reports ready once the
dataset is defined, answers from the source, and builds the cache (a session-scoped
checkpoint, a plan of its own) on a thread of its own; once it is complete the worker serves
from memory (`cached` is set). A cache that cannot be built leaves the worker answering from
the source (one log line), unless the server is gone. Embedded Spark caches before `ready`:
it substitutes a cache being built into the plans of queries on the same data, so they would
wait for it anyway; a standby embedded worker instead warms its JVM (`session.warm_up`) so
that loading, caching and the first query of its key run on compiled code.

    app = SparkWorker(load=lambda spark, key: spark.read.parquet(f"/data/{key}"))

    @app.handler()
    def count(request: Request, data: LoadedDataset) -> int:
        return data.df.count()

    app.run()
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from spark_workers import cancellation, catalog, connect, jvm, result_cache, session
from spark_workers import settings as settings_mod
from worker_sdk import HandlerError, Reply, Request, Requeue, Worker, WorkerSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

Loader = Callable[["SparkSession", str], "DataFrame"]
Validator = Callable[[str], Any]
SparkHandler = Callable[[Request, "LoadedDataset"], Any]
#: A request's query in a normal form, for the result cache (None: not kept).
CacheKey = Callable[[Request, "LoadedDataset"], Hashable | None]
#: The version a key pins when its data can never change, else None (`result_cache`).
Pinned = Callable[[str], str | None]

#: The temp view handlers' SQL reads the dataset from.
VIEW_NAME = "dataset"

#: Exit codes of a worker that ends itself: its JVM is gone, or work overran its bound.
EXIT_JVM_LOST = 70
EXIT_OVERRUN = 71
#: Exit code of a Spark Connect worker whose server went away (with its session and data).
EXIT_SERVER_LOST = 72

#: Seconds to wait for the JVM process to exit once py4j cannot reach it (to tell an OOM).
_EXIT_WAIT = 5.0
#: Seconds a broken results stream waits for the JVM's exit before it is a query's failure.
_STREAM_EXIT_WAIT = 2.0
#: Seconds past the drain timeout after which a worker ending itself exits regardless.
_HARD_EXIT_MARGIN = 15.0
#: A Connect worker caching in the background lets requests go first: it waits this long for
#: a request already queued to arrive, then until none is being answered, at most
#: `_CACHE_YIELD` seconds in all (the first answers, from the source, then do not share the
#: server's cores with the cache's build).
_CACHE_SETTLE = 0.25
_CACHE_YIELD = 10.0


@dataclasses.dataclass
class LoadedDataset:
    """What a handler gets besides the request: the session and the key's cached DataFrame."""

    key: str
    spark: SparkSession
    df: DataFrame
    settings: settings_mod.SparkWorkerSettings
    #: Seconds spent starting Spark and loading the data (for logs and benchmarks).
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Row count taken when caching (None when caching is off, or still being built).
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
        pinned: Pinned | None = None,
    ) -> None:
        self.settings = settings if settings is not None else settings_mod.SparkWorkerSettings()
        if load is None:
            cat = catalog.Catalog.from_settings(self.settings)
            load, validate = cat.load, validate or cat.resolve
            pinned = pinned or cat.pinned_version
        self._load = load
        self._validate = validate
        #: Which keys name data that never changes (None: no key does, no answer is kept).
        self._pinned = pinned
        self._worker = worker
        self._worker_settings = worker_settings
        self._handlers: list[tuple[str | None, SparkHandler, CacheKey | None]] = []
        #: The answers kept for the key's pinned version (`result_cache`); None when the key
        #: can move, or the cache is off.
        self.results: result_cache.ResultCache | None = None
        #: The version the key pins (None: its data can move).
        self.version: str | None = None
        #: The loaded dataset, once `start` succeeded.
        self.data: LoadedDataset | None = None
        #: Why the key could not be served, once `start` failed permanently.
        self.load_error: str | None = None
        #: Why the JVM is gone, once it is.
        self.lost: jvm.JvmLost | None = None
        #: The code the process ends with, once it must end (`EXIT_JVM_LOST`, `EXIT_OVERRUN`).
        self.exit_code: int | None = None
        self._runner: cancellation.Runner | None = None
        self._watch: jvm.Watch | None = None
        self._owns_process = False  # set by `run()`: ending the worker ends this process
        self._stopping = False
        self._fatal_lock = threading.Lock()
        #: The session a standby worker started before it had a key.
        self._warm: SparkSession | None = None
        #: Set once the dataset is served from memory (or will never be: caching off, a key
        #: that cannot be served, a cache that could not be built).
        self.cached = threading.Event()
        #: Requests being answered (`call`), and its condition.
        self._active = 0
        self._busy = threading.Condition()
        #: The key, the session and the clock time of the last load that failed (to retry).
        self._key: str | None = None
        self._kept: SparkSession | None = None
        self._failed_at: float | None = None
        self._reloading = threading.Lock()

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
        self._owns_process = True
        try:
            self.worker.run()
        finally:
            if self.exit_code is not None:
                logger.info("worker process exiting with code %d", self.exit_code)
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                # Not sys.exit: a Spark thread may still be stuck in a JVM call, and the
                # interpreter would wait for it forever at exit.
                os._exit(self.exit_code)

    # -- loading --------------------------------------------------------------------------

    def start(self, key: str, *, spark: SparkSession | None = None) -> None:
        """Check the key, start Spark (unless given a session), load and cache the data.

        A `DatasetError`, or any failure of the loader or the cache while Spark lives, is kept
        in `load_error` and answered to every request (and tried again after
        `reload_interval`); a failure to start Spark, or a lost JVM or server, propagates
        (the process dies and its driver restarts it).
        """
        self._key = key
        timings: dict[str, float] = {}
        try:
            if self._validate is not None:
                self._validate(key)
            t0 = time.perf_counter()
            if spark is None and self.settings.remote:
                spark = connect.build_remote_session(self.settings)
            elif spark is None:
                spark = session.build_session(self.settings)
            timings["spark_start_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            df = self._load(spark, key)
            df.createOrReplaceTempView(VIEW_NAME)
            timings["load_s"] = time.perf_counter() - t1
        except catalog.DatasetError as exc:
            self._cannot_serve(key, str(exc), spark)
            return
        except Exception as exc:
            if spark is None or _spark_lost(spark, exc):
                raise
            self._cannot_serve(key, _loader_error(exc), spark)
            return
        source = LoadedDataset(key=key, spark=spark, df=df, settings=self.settings, timings=timings)
        background = self.settings.cache_in_background and connect.is_remote(spark)
        if self.settings.cache and not background:
            try:
                source = self._cache(source)
            except Exception as exc:  # an unreadable file shows when it is read
                if _spark_lost(spark, exc):
                    raise  # the process ends: its driver starts another
                self._cannot_serve(key, _loader_error(exc), spark)
                return
        self._serve(source, background=self.settings.cache and background)

    def _serve(self, source: LoadedDataset, *, background: bool) -> None:
        """The dataset is loaded (and cached, unless in the `background`): watch the JVM and
        answer requests (`data` is set last: a request that sees it finds the rest)."""
        spark = source.spark
        self._runner = cancellation.Runner(
            spark, grace=self.settings.cancel_grace, on_overrun=self._overrun
        )
        self._watch = None if connect.is_remote(spark) else jvm.Watch.of(spark)
        if self._watch is not None:
            self._watch.subscribe(self._jvm_exited)
        self.load_error, self._failed_at, self._kept = None, None, None
        self._keep_answers(source.key)
        self.data = source  # from the source until a background cache is complete
        if background:
            threading.Thread(
                target=self._cache_in_background, args=(source,), name="dataset cache", daemon=True
            ).start()
        else:
            self.cached.set()
        timings = source.timings
        logger.info(
            "dataset %r loaded: spark start %.2f s, load %.2f s%s",
            source.key,
            timings["spark_start_s"],
            timings["load_s"],
            ", caching in the background" if not self.cached.is_set() else "",
        )

    def _keep_answers(self, key: str) -> None:
        """The result cache, when `key` pins a version that never changes and the cache is
        on (`result_cache_bytes`); None otherwise."""
        self.version = self._pinned(key) if self._pinned is not None else None
        size = self.settings.result_cache_bytes
        if self.version is None or size <= 0:
            self.results = None
            return
        metrics = self._worker.metrics if self._worker is not None else None
        self.results = result_cache.ResultCache(
            size, registry=metrics.registry if metrics is not None else None
        )

    def _cannot_serve(self, key: str, error: str, spark: SparkSession | None) -> None:
        """The key cannot be served now: every request is answered `error` until a request
        `reload_interval` later loads it (`_reload`)."""
        self.load_error = error
        self._kept, self._failed_at = spark, time.monotonic()
        self.cached.set()
        logger.error("key %r cannot be served: %s", key, error)

    def _reload(self) -> None:
        """Load the dataset again if the last attempt failed `reload_interval` ago (by one
        request at a time: the others are answered the last error at once)."""
        failed_at, key = self._failed_at, self._key
        if failed_at is None or key is None or self.data is not None:
            return
        if time.monotonic() - failed_at < self.settings.reload_interval:
            return
        if not self._reloading.acquire(blocking=False):
            return
        try:
            if self.data is None and self._failed_at == failed_at:
                logger.info("key %r: loading its dataset again", key)
                self.cached.clear()
                self.start(key, spark=self._kept)
        finally:
            self._reloading.release()

    def _cache(self, source: LoadedDataset) -> LoadedDataset:
        """Read the dataset into memory, to serve from there: a new `LoadedDataset` (so
        handler state such as planned queries starts afresh on the cached data)."""
        started = time.perf_counter()
        df = source.df
        if self.settings.cache_partitions:
            df = df.coalesce(self.settings.cache_partitions)
        if connect.is_remote(source.spark):
            df, rows = connect.cache(df)  # session-scoped: released with the session
        else:
            df = df.cache()
            rows = df.count()
        df.createOrReplaceTempView(VIEW_NAME)
        timings = {**source.timings, "cache_s": time.perf_counter() - started}
        logger.info("dataset %r cached: %d rows in %.2f s", source.key, rows, timings["cache_s"])
        return dataclasses.replace(source, df=df, rows=rows, timings=timings, extras={})

    def _cache_in_background(self, source: LoadedDataset) -> None:
        """`_cache` on a thread of its own, while requests are answered from the source
        (they go first: `_CACHE_YIELD`)."""
        try:
            time.sleep(_CACHE_SETTLE)
            with self._busy:
                self._busy.wait_for(lambda: self._active == 0, _CACHE_YIELD - _CACHE_SETTLE)
            self.data = self._cache(source)
        except Exception as exc:
            self._cache_failed(source, exc)
        finally:
            self.cached.set()

    def _cache_failed(self, source: LoadedDataset, exc: Exception) -> None:
        """A cache that could not be built in the background: the worker goes on answering
        from the source, unless what failed is the server (then it ends, as a handler would)."""
        if self._stopping:
            return  # the session was stopped under it
        if connect.is_remote(source.spark) and connect.is_connection_error(exc):
            self._end_server_lost(exc)
        else:
            logger.warning("dataset %r not cached, answered from its source: %s", source.key, exc)

    def call(self, fn: SparkHandler, request: Request, *, cache_key: CacheKey | None = None) -> Any:
        """Run a handler on the loaded dataset, on a Spark thread in a job group; answered
        (`DeadlineExceeded`) at the request's deadline or `query_timeout`, whatever Spark does.
        With `cache_key` and a pinned version, a kept answer is returned without Spark, and a
        new one is kept (`result_cache`)."""
        if self.data is None:
            self._reload()
        if self.data is None:
            raise HandlerError(
                self.load_error or "the dataset is not loaded",
                details={"reason": "dataset"},
            )
        if self.lost is not None or self.exit_code is not None:
            # Not this request's fault: another worker (or this one, restarted) serves it.
            raise Requeue("the worker is ending: " + (self.lost.message if self.lost else ""))
        data, runner, results = self.data, self._runner, self.results
        assert runner is not None
        kept: Hashable | None = None
        if results is not None and cache_key is not None:
            normal = cache_key(request, data)
            if normal is not None:
                kept = (request.path, self.version, normal)
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
        self, fn: SparkHandler, request: Request, data: LoadedDataset, runner: cancellation.Runner
    ) -> Any:
        timeout = self.settings.query_timeout
        left = request.time_left()
        if left is not None:
            timeout = min(timeout, left)
        with self._busy:
            self._active += 1
        try:
            return runner.run(
                lambda: fn(request, data),
                timeout=timeout,
                description=f"{request.path or 'default'} {request.correlation_id or ''}",
            )
        except cancellation.DeadlineExceeded:
            raise
        except Exception as exc:
            if connect.is_remote(data.spark) and connect.is_connection_error(exc):
                self._server_lost(exc, request)
            lost = self._lost_by(exc)
            if lost is None:
                raise
            details = {"reason": lost.reason, "exit_code": lost.exit_code}
            raise HandlerError(lost.message, details=details) from exc
        finally:
            with self._busy:
                self._active -= 1
                self._busy.notify_all()

    # -- the end of a worker that cannot go on --------------------------------------------

    def _lost_by(self, exc: BaseException) -> jvm.JvmLost | None:
        """Whether `exc` means the JVM is gone (then the worker ends), and why."""
        if self.lost is None and self._watch is not None and self._watch.lost is not None:
            self._jvm_exited(self._watch.lost)  # seen exiting before its subscribers heard
        if self.lost is not None:
            return self.lost
        if not jvm.is_connection_error(exc):
            if not jvm.is_stream_error(exc) or self._watch is None:
                return None
            # The results' stream broke: the JVM may be dying (its exit not seen yet, seen in
            # CI: the caller was told `query_failed` for an out-of-memory), or Arrow refused
            # the data. Only an exit seen shortly after says which.
            watched = self._watch.wait_lost(_STREAM_EXIT_WAIT)
            if watched is None:
                return None
            self._jvm_exited(watched)
            return self.lost
        watched = self._watch.wait_lost(_EXIT_WAIT) if self._watch is not None else None
        lost = watched or jvm.JvmLost("jvm_lost", None)
        self._jvm_exited(lost)
        return self.lost

    def _server_lost(self, exc: BaseException, request: Request) -> None:
        """The Spark Connect server went away (its session with it): end the worker, and give
        `request` back to the queue, once (see `connect`)."""
        self._end_server_lost(exc)
        if request.redelivered:
            raise HandlerError(
                "the Spark Connect server went away while this request ran, and it had "
                "been delivered before (a request is requeued once)",
                details={"reason": "server_lost"},
            ) from exc
        raise Requeue("the Spark Connect server went away") from exc

    def _end_server_lost(self, exc: BaseException) -> None:
        """The Spark Connect server is gone, and this worker's session and data with it."""
        with self._fatal_lock:
            if self.lost is None:
                self.lost = jvm.JvmLost("server_lost", None)
        self._end(EXIT_SERVER_LOST, f"the Spark Connect server is gone: {str(exc)[:200]}")

    def _jvm_exited(self, lost: jvm.JvmLost) -> None:
        if self._stopping:
            return  # the worker stops anyway: the JVM goes with it
        with self._fatal_lock:
            if self.lost is None:
                self.lost = lost
        self._end(EXIT_JVM_LOST, lost.cause)

    def _overrun(self, description: str, seconds: float) -> None:
        self._end(
            EXIT_OVERRUN,
            f"{description.strip()} is still running {seconds:.0f} s after it was cancelled "
            "(planning cannot be interrupted)",
        )

    def _end(self, code: int, why: str) -> None:
        """End the worker: stop taking requests, answer those in flight, exit with `code`."""
        with self._fatal_lock:
            if self.exit_code is not None:
                return
            self.exit_code = code
        logger.error("ending the worker (exit code %d): %s", code, why)
        if not self._owns_process:
            return  # an embedded worker (tests): the caller decides
        os.kill(os.getpid(), signal.SIGTERM)  # worker_sdk's staged shutdown, then `run` exits
        grace = self.worker.settings.drain_timeout + _HARD_EXIT_MARGIN
        timer = threading.Timer(grace, os._exit, args=(code,))
        timer.name, timer.daemon = "hard exit", True
        timer.start()

    # -- worker_sdk wiring ----------------------------------------------------------------

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
        if self.settings.remote:
            self._warm = connect.build_remote_session(self.settings)
        else:
            self._warm = session.build_session(self.settings)
        started = time.perf_counter() - t0
        session.warm_up(self._warm)
        logger.info(
            "standby: spark started in %.2f s, warmed up in %.2f s",
            started,
            time.perf_counter() - t0 - started,
        )

    def _on_startup(self, worker: Worker) -> None:
        self.start(worker.settings.key, spark=self._warm)

    def _on_shutdown(self, worker: Worker) -> None:
        self._stopping = True
        if self._watch is not None:
            self._watch.unsubscribe(self._jvm_exited)
        if self._runner is not None:
            self._runner.close()
        if self.data is None or self.exit_code is not None:
            return  # not when ending: the JVM or server is gone, or a thread is stuck
        if connect.is_remote(self.data.spark):
            connect.release(self.data.spark)  # the session's views and data go with it
        else:
            self.data.spark.stop()


def _reply(answer: result_cache.Answer, outcome: str) -> Reply:
    return Reply(
        answer.body, headers={result_cache.HEADER: outcome}, content_type=answer.content_type
    )


#: Longest loader error answered to callers, in characters.
_MAX_ERROR_CHARS = 500
_CONTROL_RUNS = re.compile("[\x00-\x1f\x7f-\x9f]+")


def _loader_error(exc: BaseException) -> str:
    """What callers are told of a loader's failure: its type and message on one line, at
    most `_MAX_ERROR_CHARS` (a Java stack trace, when py4j gives one, is cut)."""
    message = _CONTROL_RUNS.sub(" ", str(exc)).strip()
    error = f"cannot load the dataset: {type(exc).__name__}: {message}"
    return error if len(error) <= _MAX_ERROR_CHARS else error[: _MAX_ERROR_CHARS - 1] + "…"


def _spark_lost(spark: SparkSession, exc: BaseException) -> bool:
    """Whether `exc` says Spark itself is gone (the JVM, or the Connect server)."""
    if connect.is_remote(spark):
        return connect.is_connection_error(exc)
    return jvm.is_connection_error(exc)
