"""Where a worker's Spark runs: in its own JVM (`Embedded`) or on a shared Spark Connect
server (`Connect`). Every difference between the two is a method of `Backend`; the rest of
the package asks the backend, never which one it is.

A worker chooses its backend once, from its settings (`chosen`: `SPARK_WORKER_REMOTE` set
means Connect); code handed a session or a DataFrame asks `of(spark)`. The embedded
session is built by `session`, the Connect one by `connect` (see their docstrings for what
differs and why).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from spark_workers import connect, jvm, session, sql_guard, text_guard
from spark_workers import settings as settings_mod

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


class Backend(Protocol):
    """What differs between embedded Spark and Spark Connect."""

    #: `embedded` or `connect` (for logs).
    name: str
    #: Whether the dataset's cache may be built while requests are answered from the source
    #: (Connect: a checkpoint is a plan of its own; embedded Spark would make queries wait
    #: for a cache being built anyway).
    caches_in_background: bool

    def start(self, settings: settings_mod.SparkWorkerSettings) -> SparkSession:
        """A session of the worker's own."""
        ...

    def warm_up(self, spark: SparkSession) -> None:
        """Run once, on a few rows, the kinds of work a key's first request needs."""
        ...

    def cache(self, df: DataFrame) -> tuple[DataFrame, int]:
        """`df` materialised in the session (released with it) and its row count."""
        ...

    def release(self, spark: SparkSession) -> None:
        """End the session, and the data it holds."""
        ...

    def watch(self, spark: SparkSession) -> jvm.Watch | None:
        """The watch of the JVM behind `spark`, when there is one in this process."""
        ...

    def is_lost(self, exc: BaseException) -> bool:
        """Whether `exc` says Spark itself is gone (the JVM, or the Connect server)."""
        ...

    def server_lost(self, exc: BaseException) -> bool:
        """Whether `exc` says the shared server is gone, with the worker's session and data
        (never, embedded: a lost JVM is told by its watch)."""
        ...

    def bounded(self, df: DataFrame, *, max_rows: int) -> DataFrame:
        """`df` as a collect should get it (`results.collect`): over Spark Connect, whose
        server's maxResultSize is not this worker's to set, the plan itself is bounded
        (`limit(max_rows + 1)`)."""
        ...

    def own_sql(
        self,
        spark: SparkSession,
        text: str,
        *,
        view: str,
        params: dict[str, Any],
        limits: sql_guard.Limits,
    ) -> DataFrame:
        """The DataFrame of SQL the worker wrote itself from checked names (values bound)."""
        ...

    def client_sql(
        self, spark: SparkSession, text: str, *, view: str, limits: sql_guard.Limits
    ) -> DataFrame:
        """The DataFrame of a client's SQL text, once the guard allowed it."""
        ...

    def in_group(
        self,
        spark: SparkSession,
        group: str,
        description: str,
        fn: Callable[[], T],
        thread: threading.local,
    ) -> T:
        """`fn()` with the Spark work it starts tagged `group` (on a Spark thread whose own
        state is `thread`), so that `cancel(group)` interrupts that work only."""
        ...

    def cancel(self, spark: SparkSession, group: str) -> None:
        """Interrupt the work tagged `group`."""
        ...


class Embedded:
    """Spark in a JVM of the worker's own (`session`)."""

    name = "embedded"
    caches_in_background = False

    def start(self, settings: settings_mod.SparkWorkerSettings) -> SparkSession:
        return session.build_session(settings)

    def warm_up(self, spark: SparkSession) -> None:
        session.warm_up(spark)

    def cache(self, df: DataFrame) -> tuple[DataFrame, int]:
        cached = df.cache()
        return cached, cached.count()

    def release(self, spark: SparkSession) -> None:
        spark.stop()

    def watch(self, spark: SparkSession) -> jvm.Watch | None:
        return jvm.Watch.of(spark)

    def is_lost(self, exc: BaseException) -> bool:
        return jvm.is_connection_error(exc)

    def server_lost(self, exc: BaseException) -> bool:
        return False

    def bounded(self, df: DataFrame, *, max_rows: int) -> DataFrame:
        return df  # `spark.driver.maxResultSize` bounds what a collect brings back

    def own_sql(
        self,
        spark: SparkSession,
        text: str,
        *,
        view: str,
        params: dict[str, Any],
        limits: sql_guard.Limits,
    ) -> DataFrame:
        own = dataclasses.replace(limits, max_sql_chars=None)
        return sql_guard.checked_sql(spark, text, view=view, params=params, limits=own)

    def client_sql(
        self, spark: SparkSession, text: str, *, view: str, limits: sql_guard.Limits
    ) -> DataFrame:
        return sql_guard.checked_sql(spark, text, view=view, limits=limits)

    def in_group(
        self,
        spark: SparkSession,
        group: str,
        description: str,
        fn: Callable[[], T],
        thread: threading.local,
    ) -> T:
        if not getattr(thread, "active", False):
            # The session's conf, not Spark's defaults, for whatever reads the thread's
            # SQLConf (it stays: Spark's actions restore the session they found).
            gateway: Any = spark._jvm
            gateway.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            jvm.no_delay(spark)  # this thread's py4j connection is new (`jvm.no_delay`)
            thread.active = True
        spark.sparkContext.setJobGroup(group, description, interruptOnCancel=True)
        return fn()

    def cancel(self, spark: SparkSession, group: str) -> None:
        spark.sparkContext.cancelJobGroup(group)


class Connect:
    """A session of the worker's own on a shared Spark Connect server (`connect`)."""

    name = "connect"
    caches_in_background = True

    def start(self, settings: settings_mod.SparkWorkerSettings) -> SparkSession:
        return connect.build_remote_session(settings)

    def warm_up(self, spark: SparkSession) -> None:
        connect.warm_up(spark)

    def cache(self, df: DataFrame) -> tuple[DataFrame, int]:
        return connect.cache(df)

    def release(self, spark: SparkSession) -> None:
        connect.release(spark)

    def watch(self, spark: SparkSession) -> jvm.Watch | None:
        return None  # the JVM is the server's

    def is_lost(self, exc: BaseException) -> bool:
        return connect.is_connection_error(exc)

    def server_lost(self, exc: BaseException) -> bool:
        return connect.is_connection_error(exc)

    def bounded(self, df: DataFrame, *, max_rows: int) -> DataFrame:
        return df.limit(max_rows + 1)  # the server's maxResultSize is not the worker's

    def own_sql(
        self,
        spark: SparkSession,
        text: str,
        *,
        view: str,
        params: dict[str, Any],
        limits: sql_guard.Limits,
    ) -> DataFrame:
        # The guard cannot see a plan before the server runs it (see `connect`); this text is
        # the worker's own, every identifier checked and quoted, every value a bound
        # parameter. Sent lazily: one round trip less than `spark.sql`.
        return connect.lazy_sql(spark, text, params)

    def client_sql(
        self, spark: SparkSession, text: str, *, view: str, limits: sql_guard.Limits
    ) -> DataFrame:
        # Parsed and checked here; the server only sees SQL written from the checked tree.
        return text_guard.checked_sql(spark, text, view=view, limits=limits)

    def in_group(
        self,
        spark: SparkSession,
        group: str,
        description: str,
        fn: Callable[[], T],
        thread: threading.local,
    ) -> T:
        spark.addTag(group)  # thread-local in the client: this request's work only
        try:
            return fn()
        finally:
            spark.removeTag(group)

    def cancel(self, spark: SparkSession, group: str) -> None:
        spark.interruptTag(group)


EMBEDDED = Embedded()
CONNECT = Connect()


def chosen(settings: settings_mod.SparkWorkerSettings) -> Backend:
    """The backend a worker with `settings` runs on."""
    return CONNECT if settings.remote else EMBEDDED


def of(spark: SparkSession) -> Backend:
    """The backend `spark` is a session of."""
    return CONNECT if _is_remote(spark) else EMBEDDED


def _is_remote(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
