"""The long-lived SparkSession a worker owns, built from its settings.

A worker builds exactly one session and keeps it for its whole life: starting Spark costs
seconds, a query on cached data tens of milliseconds. The Spark settings that matter for
latency and safety are set here, in one place, so the query worker and the benchmark measure
the same thing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spark_workers import settings as settings_mod

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Loggers pyspark uses to print every failed query with its stack trace: a worker answers
#: bad queries with an error response, so these are noise in its log.
_QUERY_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


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
        # Safety: SQL cannot read files by path (`SELECT * FROM parquet.`/etc``).
        "spark.sql.runSQLOnFiles": "false",
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
    return conf


def build_session(settings: settings_mod.SparkWorkerSettings) -> SparkSession:
    """Start (or join, in the same process) the SparkSession described by `settings`."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for name, value in spark_conf(settings).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    quiet_query_errors()
    logger.info("SparkSession %s ready (master %s)", spark.version, spark.sparkContext.master)
    return spark


def quiet_query_errors() -> None:
    """Stop pyspark from logging each failed query: the worker answers them instead."""
    from pyspark.logger import PySparkLogger

    for name in _QUERY_ERROR_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
