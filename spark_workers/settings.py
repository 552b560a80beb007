"""Configuration of a Spark worker, read once from `SPARK_WORKER_*` environment variables.

The defaults are tuned for what these workers do: answer many small queries on a cached
dataset of modest size, where Spark's fixed per-job costs dominate (a single shuffle partition
avoids a second stage and the sampling job of a global sort; adaptive execution re-plans every
query and costs more than it saves on small data). Override them for big datasets.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DatasetFormat = Literal["auto", "parquet", "csv", "json"]


class SparkWorkerSettings(BaseSettings):
    """Settings of one Spark worker process; every field is read from `SPARK_WORKER_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="SPARK_WORKER_", extra="ignore")

    # -- the session ----------------------------------------------------------------------
    master: str = Field(
        default="local[*]",
        description="Spark master URL: `local[*]` embedded, `spark://host:7077` for a "
        "standalone cluster.",
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect URL (`sc://host:15002`): the worker opens a session of "
        "its own on that shared server instead of starting a JVM (`master`, memory and "
        "executor settings are then the server's). None: embedded Spark. See docs/spark.md.",
    )
    connect_timeout: float = Field(
        default=120.0,
        gt=0,
        description="Seconds a Spark Connect worker waits at startup for the server to "
        "answer (a restarting server) before it exits.",
    )
    app_name: str = Field(default="osrdyne-spark-worker", description="Spark application name.")
    driver_memory: str = Field(default="2g", description="`spark.driver.memory` (JVM heap).")
    executor_memory: str | None = Field(
        default=None, description="`spark.executor.memory` on a cluster (None: Spark's default)."
    )
    executor_cores: int | None = Field(
        default=None, ge=1, description="`spark.executor.cores` on a cluster."
    )
    shuffle_partitions: int = Field(
        default=1,
        ge=1,
        description="`spark.sql.shuffle.partitions`. Small data: 1 keeps group-by + order-by "
        "in one stage without a sampling job; raise it for large aggregations or joins.",
    )
    adaptive: bool = Field(
        default=False, description="`spark.sql.adaptive.enabled` (costs latency on small data)."
    )
    ui_enabled: bool = Field(default=False, description="Run the Spark web UI.")
    log_level: str = Field(default="ERROR", description="Spark's log level (JVM side).")
    extra_conf: dict[str, str] = Field(
        default_factory=dict,
        description='More Spark settings, as a JSON object: {"spark.x.y": "value"}.',
    )

    # -- the datasets ---------------------------------------------------------------------
    dataset_root: str = Field(
        default="./datasets",
        description="Directory (or URI: file://, s3a://, hdfs://...) holding the datasets.",
    )
    dataset_uri_template: str | None = Field(
        default=None,
        description="Where a dataset lives, overriding `{root}/{dataset}`: placeholders "
        "`{root}`, `{dataset}` (name or name@version), `{name}` and `{version}`.",
    )
    dataset_format: DatasetFormat = Field(
        default="auto",
        description="Format of the datasets; `auto` looks at file extensions (local roots) "
        "and falls back to Parquet.",
    )
    reload_interval: float = Field(
        default=30.0,
        gt=0,
        description="Seconds after a dataset that could not be loaded (the loader raised: a "
        "missing path, an unreadable file, a schema that does not match) before a request "
        "makes the worker try again; meanwhile every request is answered with the reason.",
    )
    cache: bool = Field(default=True, description="Cache the dataset in memory once loaded.")
    cache_in_background: bool = Field(
        default=True,
        description="Spark Connect: report ready once the dataset is defined, and answer "
        "from its source while the cache is built on a thread of its own: a new key's first "
        "answers come without waiting for the whole dataset to be read into memory (they read "
        "the source until the cache is complete). False: ready only once cached. Embedded "
        "Spark always caches before ready (queries would wait for a cache being built).",
    )
    cache_partitions: int | None = Field(
        default=None,
        ge=1,
        description="Coalesce the cached dataset to this many partitions (None: as read).",
    )

    # -- the queries ----------------------------------------------------------------------
    max_rows: int = Field(default=10_000, ge=1, description="Most rows a query answers.")
    max_result_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Largest encoded answer, in bytes."
    )
    plan_cache_size: int = Field(
        default=256,
        ge=0,
        description="Planned queries kept for reuse (0: off). Planning a query on cached data "
        "costs more than running it; a repeated query (same document) skips it.",
    )
    result_cache_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="Memory for the answers of a key that pins a dataset version "
        "(`name@version`, never rewritten): a repeated query is answered from there without "
        "Spark, least recently used answers dropped first (0: off). A key that can move "
        "(`name`, which ingests and appends re-point) never keeps answers.",
    )
    query_timeout: float = Field(
        default=300.0,
        gt=0,
        description="Seconds a query may take, planning included, when the caller set no "
        "earlier `x-deadline`; the caller is answered at that bound whatever Spark does.",
    )
    cancel_grace: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a query may keep running after it was cancelled at its bound. "
        "Planning cannot be interrupted: past this grace the worker process ends (non-zero "
        "exit) so its driver restarts it rather than keeping a busy JVM thread forever.",
    )

    # -- the size of what clients send (checked before Spark sees it) ---------------------
    max_request_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Largest request body, in bytes."
    )
    max_sql_chars: int = Field(
        default=20_000, ge=100, description="Longest SQL text of a `sql` query, in characters."
    )
    max_in_values: int = Field(
        default=1_000, ge=1, description="Most values of one `in`/`not in` condition."
    )
    max_conditions: int = Field(
        default=100, ge=1, description="Most conditions in a structured query's `where`."
    )
    max_columns: int = Field(
        default=100,
        ge=1,
        description="Most entries in each of `select`, `group_by`, `aggregates`, `order_by`.",
    )
    max_generated: int = Field(
        default=10_000,
        ge=1,
        description="Largest product of the sizes asked of data-generating SQL functions in "
        "one query (`sequence`, `repeat`, `lpad`, `array_repeat`, `stack`...): their sizes "
        "must be constants, multiplied together.",
    )
    max_plan_nodes: int = Field(
        default=10_000,
        ge=100,
        description="Most nodes of a query's parsed plan once each CTE reference is replaced "
        "by its definition (planning works on that expansion).",
    )
