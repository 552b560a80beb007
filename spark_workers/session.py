"""The long-lived SparkSession a worker owns, built from its settings.

A worker builds exactly one session and keeps it for its whole life: starting Spark costs
seconds, a query on cached data tens of milliseconds. The Spark settings that matter for
latency and safety are set here, in one place, so the query worker and the benchmark measure
the same thing.

Safety settings win over `extra_conf` (a warning says so): SQL cannot read files by path
(`spark.sql.runSQLOnFiles=false`), and the SQL parser substitutes no variables
(`spark.sql.variable.substitute=false`: with it on, `SELECT '${env:WORKER_AMQP_URI}'` is a
plain literal that reads the JVM's environment, `${spark.x}` its configuration). The driver
JVM exits on OutOfMemoryError (`-XX:+ExitOnOutOfMemoryError`, added to whatever
`spark.driver.extraJavaOptions` says) and is launched without the worker's credentials
(`jvm.launch_environment`).
"""

from __future__ import annotations

import logging
import tempfile
from typing import TYPE_CHECKING

from spark_workers import jvm
from spark_workers import settings as settings_mod

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Loggers pyspark uses to print every failed query with its stack trace: a worker answers
#: bad queries with an error response, so these are noise in its log.
_QUERY_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")

#: Settings `extra_conf` cannot change.
SAFETY_CONF = {
    # SQL cannot read files by path (`SELECT * FROM parquet.`/etc``).
    "spark.sql.runSQLOnFiles": "false",
    # `${env:X}`, `${system:X}`, `${spark.x}` in SQL text stay text.
    "spark.sql.variable.substitute": "false",
}


def spark_conf(settings: settings_mod.SparkWorkerSettings) -> dict[str, str]:
    """The Spark configuration a worker runs with."""
    conf = {
        "spark.app.name": settings.app_name,
        "spark.master": settings.master,
        "spark.driver.memory": settings.driver_memory,
        "spark.ui.enabled": str(settings.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.adaptive.enabled": str(settings.adaptive).lower(),
        # Arrow for toArrow/toPandas: results leave the JVM as columnar batches.
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Local mode: do not wait for a "better" executor that does not exist.
        "spark.locality.wait": "0s",
        "spark.sql.session.timeZone": "UTC",
        # Bounds what one query can bring back to the driver (results are not limited in
        # the plan: see `results`); twice the answer cap leaves room for encoding overhead.
        "spark.driver.maxResultSize": f"{max(2 * settings.max_result_bytes, 1 << 20) >> 10}k",
    }
    if settings.executor_memory:
        conf["spark.executor.memory"] = settings.executor_memory
    if settings.executor_cores:
        conf["spark.executor.cores"] = str(settings.executor_cores)
    conf.update(settings.extra_conf)
    for name, value in SAFETY_CONF.items():
        if conf.get(name, value) != value:
            logger.warning("ignoring %s=%s from extra_conf: it stays %s", name, conf[name], value)
        conf[name] = value
    options = "spark.driver.extraJavaOptions"
    conf[options] = jvm.driver_java_options(conf.get(options))
    return conf


def build_session(settings: settings_mod.SparkWorkerSettings) -> SparkSession:
    """Start (or join, in the same process) the SparkSession described by `settings`."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    conf = spark_conf(settings)
    for name, value in conf.items():
        builder = builder.config(name, value)
    with jvm.launch_environment() as withheld:
        spark = builder.getOrCreate()
    for name, value in SAFETY_CONF.items():  # a session joined in-process keeps its own conf
        spark.conf.set(name, value)
    spark.sparkContext.setLogLevel(settings.log_level)
    jvm.no_delay(spark)
    quiet_query_errors()
    logger.info(
        "SparkSession %s ready (master %s); JVM launched without %d credential-bearing variable(s)",
        spark.version,
        spark.sparkContext.master,
        len(withheld),
    )
    return spark


def warm_up(spark: SparkSession) -> None:
    """Run, once, the kinds of work a key's first request needs, on a few rows: a standby
    worker does this before it has a key, so that its key's load, cache and first query run
    on loaded classes and compiled code (embedded Spark, 1M rows, measured on 2 cores: the
    first answer after the load 4.6 s instead of 9.2 s).

    A small Parquet file written without the JVM (pyarrow) is read, filtered, grouped,
    collected as Arrow and cached (over Spark Connect: `connect.warm_up`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="osrdyne-warm-up-") as tmp:
        ids = list(range(1000))
        table = pa.table({"id": ids, "s": [str(i % 7) for i in ids], "f": [i * 1.5 for i in ids]})
        pq.write_table(table, f"{tmp}/warm.parquet")
        df = spark.read.parquet(f"{tmp}/warm.parquet")
        df.filter("f > 3").groupBy("s").count().toArrow()
        cached = df.cache()
        try:
            cached.filter("f > 3").agg({"f": "avg"}).toArrow()
        finally:
            cached.unpersist()


def quiet_query_errors() -> None:
    """Stop pyspark from logging each failed query: the worker answers them instead."""
    from pyspark.logger import PySparkLogger

    for name in _QUERY_ERROR_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
