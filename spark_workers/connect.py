"""Spark Connect mode: many keyed workers share one long-lived Spark instead of one JVM each.

With `SPARK_WORKER_REMOTE=sc://host:port` a worker starts no JVM: it opens a session of its
own on the shared Spark Connect server (`SparkSession.builder.remote(...).create()`, a new
server-side session per worker, never a shared one), loads its dataset there and keeps it
as a session-scoped local checkpoint (`localCheckpoint(eager=True)`). A stopping worker
releases its session; the server then drops the checkpoint's blocks at its next cleanup
(Spark's ContextCleaner acts on the JVM's garbage collection: the project's server collects
every minute, `spark.cleaner.periodicGC.interval`). A worker killed without saying goodbye
is released the same way once the server's idle-session timeout expires it. (`persist()`
would be freed at once by `unpersist()`, but its cache is the server's, shared by equal
plans across sessions, and outlives a killed worker.) The temp view `dataset` is
session-scoped too: one key's session cannot name another's.

What works differently from the embedded mode, and why:

- **Client SQL text is checked without the server.** The embedded guard decides on Spark's
  parsed and analysed plans; over Connect the only way to see a plan is to have the server
  analyse it, and analysing `EXECUTE IMMEDIATE '<command>'` runs the command (measured with
  Spark 4.3: `explain` of a lazy SQL relation `EXECUTE IMMEDIATE 'DROP VIEW dataset'` dropped
  the view). So `text_guard` parses the text in the worker (sqlglot), checks it against the
  embedded guard's allowlist and sends the server only SQL written from the checked tree.
  Structured queries: their SQL is written by the worker from checked column names, values
  bound as parameters.
- **Cancellation** tags the work of each request (`SparkSession.addTag`, thread-local in the
  client) and interrupts that tag only (`interruptTag`): other keys' sessions, and other
  requests of the same key, are not touched.
- **Results** are bounded in the plan (`limit(max_rows + 1)`): `spark.driver.maxResultSize`
  is the server's, not settable per session.
- **The server going away** (restart, crash) ends the worker (exit code 72,
  `ending.EXIT_SERVER_LOST`): its server-side session, views and cached data are gone with
  the server. The request in flight goes back to the queue once (answered with
  `worker_error`, reason `server_lost`, if it was already redelivered: a query that crashes
  the server does not get to crash it forever); the driver starts a new worker, which waits
  for the server (`connect_timeout`) and loads the dataset again.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from spark_workers import session as session_mod
from spark_workers import settings as settings_mod

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

#: Session settings a Connect worker sets on its own session (the server's static settings,
#: heap and maxResultSize included, are the server's: see scripts/ensure_spark_connect.sh).
SESSION_CONF_KEYS = (
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled",
    "spark.sql.session.timeZone",
    *session_mod.SAFETY_CONF,
)

#: Error classes the server answers once the session the client holds is not its own.
_SESSION_GONE = ("INVALID_HANDLE.SESSION_CHANGED", "INVALID_HANDLE.SESSION_NOT_FOUND")
#: Retries of a call while the server is unreachable (about 2.5 s in all).
_RETRIES = 5
#: Seconds between attempts to reach the server at startup.
_RETRY_INTERVAL = 1.0


class ServerUnavailable(Exception):
    """The Spark Connect server did not answer within `connect_timeout` (the worker exits and
    its driver tries again later)."""


def session_conf(settings: settings_mod.SparkWorkerSettings) -> dict[str, str]:
    """The session settings a Connect worker sets (safety settings always win)."""
    conf = session_mod.spark_conf(settings)
    return {name: conf[name] for name in SESSION_CONF_KEYS}


def build_remote_session(settings: settings_mod.SparkWorkerSettings) -> SparkSession:
    """A new session of this worker's own on the server at `settings.remote`, waiting up to
    `settings.connect_timeout` seconds for the server to answer."""
    from pyspark.sql import SparkSession

    assert settings.remote is not None
    deadline = time.monotonic() + settings.connect_timeout
    # One session object, however many attempts: with a new session per attempt, the
    # checkpoint of the one that finally answered was looked up in another server-side
    # session (measured, pyspark 4.3: DATAFRAME_NOT_FOUND once the server was back).
    spark: Any = SparkSession.builder.remote(settings.remote).create()  # lazy: no call yet
    spark.client.set_retry_policies([retry_policy()])
    attempt = 0
    while True:
        attempt += 1
        try:
            for name, value in session_conf(settings).items():
                spark.conf.set(name, value)
            break
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            if time.monotonic() >= deadline:
                raise ServerUnavailable(
                    f"no Spark Connect server at {_redacted(settings.remote)} after "
                    f"{attempt} attempts ({settings.connect_timeout:.0f} s)"
                ) from exc
            if attempt == 1:
                logger.warning(
                    "Spark Connect at %s does not answer (%s): retrying for %.0f s",
                    _redacted(settings.remote),
                    type(exc).__name__,
                    settings.connect_timeout,
                )
            time.sleep(_RETRY_INTERVAL)
    session_mod.quiet_query_errors()
    logger.info(
        "Spark Connect session %s on %s (Spark %s)",
        spark.session_id,
        _redacted(settings.remote),
        spark.version,
    )
    return spark  # type: ignore[no-any-return]


def retry_policy() -> Any:
    """How long a call keeps retrying an unreachable server: a few seconds (a blip), not
    pyspark's default ten minutes. A restarted server has lost the session anyway; the
    worker ends and its requests wait in the queue for the next one (see the docstring)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(
        max_retries=_RETRIES, backoff_multiplier=2.0, initial_backoff=100, max_backoff=1000
    )


def lazy_sql(spark: SparkSession, text: str, args: dict[str, Any] | None = None) -> DataFrame:
    """The DataFrame of the query `text` (named `args` bound as literals), sent to the server
    only when it runs. `spark.sql` first executes the text as a command to learn it is a
    query: one round trip more, for the same relation (the server answers with the very SQL
    relation it was sent). Only for text known to be a query: the worker's own, or client
    SQL `text_guard` passed."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import SQL

    named = {name: F.lit(value) for name, value in (args or {}).items()}
    return ConnectDataFrame(SQL(text, named_args=named), spark)  # type: ignore[arg-type]


def warm_up(spark: SparkSession) -> None:
    """`session.warm_up` over Spark Connect, where the server may not see this machine's
    files: the same kinds of query on generated rows (the client's own paths: plans, Arrow
    batches)."""
    df = spark.range(1000).selectExpr("id", "CAST(id % 7 AS STRING) AS s", "id * 1.5 AS f")
    df.filter("f > 3").groupBy("s").count().toArrow()


def cache(df: DataFrame) -> tuple[DataFrame, int]:
    """`df` materialised in the session (released with it) and its row count."""
    cached = df.localCheckpoint(eager=True)
    return cached, cached.count()


def release(spark: SparkSession) -> None:
    """Release the worker's server-side session: its views and checkpointed data go."""
    try:
        spark.stop()
    except Exception:  # the server may be gone already: nothing left to release then
        logger.warning("could not release the Spark Connect session", exc_info=True)


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` (or its cause) means the server is unreachable or lost this session."""
    import grpc
    from pyspark.errors import PySparkException
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, grpc.RpcError) and _code(current) in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.CANCELLED,
        ):
            return True
        if isinstance(current, PySparkException):
            error_class = current.getCondition() or ""
            if error_class.startswith(_SESSION_GONE):
                return True
        # The client's own transport error (not a query's error, whose message may echo a
        # client's value): pyspark renders the gRPC status or the server's handle error.
        if type(current) is SparkConnectGrpcException:
            text = str(current)
            if any(mark in text for mark in _SESSION_GONE) or "StatusCode.UNAVAILABLE" in text:
                return True
        current = current.__cause__ or current.__context__
    return False


def _code(error: Any) -> Any:
    try:
        return error.code()
    except Exception:
        return None


def _redacted(url: str) -> str:
    """The URL without its parameters (`;token=...` carries a secret)."""
    return url.split(";", 1)[0].split("/;", 1)[0]
