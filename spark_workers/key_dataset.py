"""The dataset a keyed worker serves: its key checked, its data loaded, cached and registered
as the temp view `dataset`; loaded again after a failure.

A key that names no dataset (`DatasetError` from `validate` or `load`), or whose loader fails
(a missing path, an unreadable file, a schema that does not match: anything the loader or the
cache raises while the JVM lives), does not crash the worker, which would only be restarted
to fail again: it starts, reports ready, and answers every request with that error
(`worker_error`, reason `dataset`). A request that comes `reload_interval` seconds after the
last attempt tries to load the dataset again first (one request at a time; the others are
answered at once), so a dataset restored in place is served without an operator. A worker
that cannot start Spark at all still ends (its start-up failure is reported, docs/protocol.md).

Caching a dataset reads all of it, which takes longer than answering a query from its source.
Over Spark Connect, by default (`cache_in_background`), the worker reports ready once the
dataset is defined, answers from the source, and builds the cache (a session-scoped
checkpoint, a plan of its own) on a thread of its own; once it is complete the worker serves
from memory (`cached` is set). A cache that cannot be built leaves the worker answering from
the source (one log line), unless the server is gone. Embedded Spark caches before `ready`:
it substitutes a cache being built into the plans of queries on the same data, so they would
wait for it anyway; a standby embedded worker instead warms its JVM (`session.warm_up`) so
that loading, caching and the first query of its key run on compiled code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from spark_workers import backend as backend_mod
from spark_workers import cancellation, catalog, ending, result_cache
from spark_workers import settings as settings_mod

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

Loader = Callable[["SparkSession", str], "DataFrame"]
Validator = Callable[[str], Any]
#: The version a key pins when its data can never change, else None (`result_cache`).
Pinned = Callable[[str], str | None]

#: The temp view handlers' SQL reads the dataset from.
VIEW_NAME = "dataset"

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
    #: Where the session runs (embedded Spark, Spark Connect).
    backend: backend_mod.Backend
    #: Seconds spent starting Spark and loading the data (for logs and benchmarks).
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Row count taken when caching (None when caching is off, or still being built).
    rows: int | None = None
    #: State handlers keep with the dataset (the query worker's plan cache...).
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)


class KeyDataset:
    """One key's dataset: loading, caching, reloading, and what requests are answered from."""

    def __init__(
        self,
        load: Loader,
        *,
        settings: settings_mod.SparkWorkerSettings,
        backend: backend_mod.Backend,
        ending: ending.Ending,
        validate: Validator | None,
        pinned: Pinned | None,
        registry: Callable[[], Any],
    ) -> None:
        self.settings = settings
        self.backend = backend
        self._ending = ending
        self._load = load
        self._validate = validate
        #: Which keys name data that never changes (None: no key does, no answer is kept).
        self._pinned = pinned
        #: Where the result cache's gauges go (the worker's metrics, once it has them).
        self._registry = registry
        #: The answers kept for the key's pinned version (`result_cache`); None when the key
        #: can move, or the cache is off.
        self.results: result_cache.ResultCache | None = None
        #: The version the key pins (None: its data can move).
        self.version: str | None = None
        #: The loaded dataset, once `start` succeeded.
        self.data: LoadedDataset | None = None
        #: Why the key could not be served, once `start` failed permanently.
        self.load_error: str | None = None
        #: Runs the requests' Spark work, once the dataset is loaded.
        self.runner: cancellation.Runner | None = None
        #: Set once the dataset is served from memory (or will never be: caching off, a key
        #: that cannot be served, a cache that could not be built).
        self.cached = threading.Event()
        #: Requests being answered (`answering`), and its condition.
        self._active = 0
        self._busy = threading.Condition()
        #: The key, the session and the clock time of the last load that failed (to retry).
        self._key: str | None = None
        self._kept: SparkSession | None = None
        self._failed_at: float | None = None
        self._reloading = threading.Lock()

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
            if spark is None:
                spark = self.backend.start(self.settings)
            timings["spark_start_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            df = self._load(spark, key)
            df.createOrReplaceTempView(VIEW_NAME)
            timings["load_s"] = time.perf_counter() - t1
        except catalog.DatasetError as exc:
            self._cannot_serve(key, str(exc), spark)
            return
        except Exception as exc:
            if spark is None or self.backend.is_lost(exc):
                raise
            self._cannot_serve(key, _loader_error(exc), spark)
            return
        source = LoadedDataset(
            key=key,
            spark=spark,
            df=df,
            settings=self.settings,
            backend=self.backend,
            timings=timings,
        )
        background = self.settings.cache_in_background and self.backend.caches_in_background
        if self.settings.cache and not background:
            try:
                source = self._cache(source)
            except Exception as exc:  # an unreadable file shows when it is read
                if self.backend.is_lost(exc):
                    raise  # the process ends: its driver starts another
                self._cannot_serve(key, _loader_error(exc), spark)
                return
        self._serve(source, background=self.settings.cache and background)

    def reload(self) -> None:
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

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """A request is being answered (a cache built in the background waits for none)."""
        with self._busy:
            self._active += 1
        try:
            yield
        finally:
            with self._busy:
                self._active -= 1
                self._busy.notify_all()

    def _serve(self, source: LoadedDataset, *, background: bool) -> None:
        """The dataset is loaded (and cached, unless in the `background`): watch the JVM and
        answer requests (`data` is set last: a request that sees it finds the rest)."""
        spark = source.spark
        self.runner = cancellation.Runner(
            spark, grace=self.settings.cancel_grace, on_overrun=self._ending.overrun
        )
        self._ending.watching(self.backend.watch(spark))
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
        self.results = result_cache.ResultCache(size, registry=self._registry())

    def _cannot_serve(self, key: str, error: str, spark: SparkSession | None) -> None:
        """The key cannot be served now: every request is answered `error` until a request
        `reload_interval` later loads it (`reload`)."""
        self.load_error = error
        self._kept, self._failed_at = spark, time.monotonic()
        self.cached.set()
        logger.error("key %r cannot be served: %s", key, error)

    def _cache(self, source: LoadedDataset) -> LoadedDataset:
        """Read the dataset into memory, to serve from there: a new `LoadedDataset` (so
        handler state such as planned queries starts afresh on the cached data)."""
        started = time.perf_counter()
        df = source.df
        if self.settings.cache_partitions:
            df = df.coalesce(self.settings.cache_partitions)
        df, rows = self.backend.cache(df)  # session-scoped: released with the session
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
        if self._ending.stopping:
            return  # the session was stopped under it
        if self.backend.server_lost(exc):
            self._ending.end_server_lost(exc)
        else:
            logger.warning("dataset %r not cached, answered from its source: %s", source.key, exc)


#: Longest loader error answered to callers, in characters.
_MAX_ERROR_CHARS = 500
_CONTROL_RUNS = re.compile("[\x00-\x1f\x7f-\x9f]+")


def _loader_error(exc: BaseException) -> str:
    """What callers are told of a loader's failure: its type and message on one line, at
    most `_MAX_ERROR_CHARS` (a Java stack trace, when py4j gives one, is cut)."""
    message = _CONTROL_RUNS.sub(" ", str(exc)).strip()
    error = f"cannot load the dataset: {type(exc).__name__}: {message}"
    return error if len(error) <= _MAX_ERROR_CHARS else error[: _MAX_ERROR_CHARS - 1] + "…"
