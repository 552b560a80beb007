"""The ingest's write stage: the good rows of the typed frames (`typed_frames`) written aside,
to the staging directory, counting as they go by (Spark observations: the rows read, the bad
ones, the checks not counted from the files).

Where Spark's parser types columns, the strict frame is written first: a read that stops at
the first row it does not type, or at any bad row (then nothing it wrote is kept, and the
full frame, which flags such rows, is written instead).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from spark_workers import appending, checks, conversion, typed_frames, value_sql, versions, written

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


class WriteRequest(Protocol):
    """What the write takes of an ingest's request (`ingest.Request`)."""

    @property
    def checks(self) -> checks.Checks | None: ...
    @property
    def partition_by(self) -> tuple[str, ...]: ...
    @property
    def files(self) -> int: ...
    @property
    def dedup_on(self) -> tuple[str, ...]: ...


@dataclasses.dataclass(frozen=True)
class Observed:
    """What the write counted: rows read, bad ones, rows added to the version (after
    deduplication), and the checks' failures (`check:...` counts)."""

    read: int
    bad: int
    added: int
    checks: dict[str, int]


#: The message of the strict write's stop at a bad row (`write`): it is read again.
_STRICT_STOP = "osrdyne ingest: a bad row stops the strict read"
#: Spark's error class of a FAILFAST read's stop at a row its parser does not type.
_MALFORMED = "MALFORMED_RECORD_IN_PARSING"


def strict_directory(staged: str) -> str:
    """Where the strict write goes (renamed to `staged` once done): a write that stopped
    may leave files behind for a moment (a task being cancelled), never in `staged`."""
    return f"{staged}-strict"


def write(
    spark: SparkSession,
    request: WriteRequest,
    frames: typed_frames.Frames,
    schema: StructType,
    staged: str,
    base: appending.Base | None,
) -> Observed:
    """Write the good rows of `frames` (and the base's, when appending) to `staged`: the
    strict frame where there is one, stopped at the first row it does not type or any bad
    row (then nothing it wrote is kept), else, or then, the full frame."""
    if frames.strict is None:
        return write_frame(spark, request, frames.full(), schema, staged, base, strict=False)
    attempt = strict_directory(staged)
    try:
        with _quiet_task_failures(spark):
            observed = write_frame(
                spark, request, frames.strict, schema, attempt, base, strict=True
            )
    except Exception as exc:
        if not _stopped_strict(exc):
            raise
        versions.discard(attempt)
    else:
        os.rename(attempt, staged)
        return observed
    observed = write_frame(spark, request, frames.full(), schema, staged, base, strict=False)
    # Again: a task of the stopped write, being cancelled, may have written after the first.
    versions.discard(attempt)
    return observed


#: Spark's loggers that report a failed task, job and write at ERROR, with stack traces.
_TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
)


@contextlib.contextmanager
def _quiet_task_failures(spark: SparkSession) -> Iterator[None]:
    """`_TASK_FAILURE_LOGGERS` off while the strict write runs (its stop at a row is
    expected: the rows are read again), their levels restored afterwards. A failure of
    any other kind still reaches the caller, as the write's exception."""
    jvm: Any = spark._jvm
    log4j = jvm.org.apache.logging.log4j
    configurator = log4j.core.config.Configurator
    before = {name: log4j.LogManager.getLogger(name).getLevel() for name in _TASK_FAILURE_LOGGERS}
    for name in before:
        configurator.setLevel(name, log4j.Level.OFF)
    try:
        yield
    finally:
        for name, level in before.items():
            configurator.setLevel(name, level)


def _stopped_strict(exc: BaseException) -> bool:
    """Whether a failed write is the strict read's stop at a row (Spark's FAILFAST error,
    or `_STRICT_STOP` raised), from its text or its causes'."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        text = str(seen)
        if _MALFORMED in text or _STRICT_STOP in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def write_frame(
    spark: SparkSession,
    request: WriteRequest,
    typed: DataFrame,
    schema: StructType,
    staged: str,
    base: appending.Base | None,
    *,
    strict: bool,
) -> Observed:
    """Write the good rows of `typed` (and the base's, when appending) to `staged`. With
    `strict`, a bad row stops the write instead of being counted; the rows read are then
    counted only where the ingest needs them apart from those written."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812

    for field in schema.fields:
        if field.metadata:  # a text column of dates, and why (`text_date_guard` reads it)
            typed = typed.withMetadata(field.name, field.metadata)
    flag = value_sql.sql_name(conversion.BAD_COLUMN)
    # Most checks are counted from the written files, with their statistics
    # (`checks.counters`); the others here, as the rows go by: when the rows written are
    # the good rows read (nothing appended nor deduplicated), in the one observation that
    # counts the bad rows (one accumulator per row instead of two).
    plain = base is None and not request.dedup_on
    in_read = (
        checks.aggregates(request.checks, schema, among=f"NOT {flag}")
        if plain and request.checks is not None
        else []
    )
    read: Observation | None = None
    if strict:
        # Spark's `assert_true` is null where it holds, and fails the job where not.
        good = typed.where(f"assert_true(NOT {flag}, {value_sql.sql_text(_STRICT_STOP)}) IS NULL")
    else:
        good = typed
    if not (strict and plain and not in_read):
        read = Observation("rows")
        good = good.observe(
            read, F.expr("count(1) AS rows"), F.expr(f"count_if({flag}) AS bad"), *in_read
        )
    if not strict:
        good = good.where(f"NOT {flag}")
    good = good.drop(conversion.BAD_COLUMN)
    added = Observation("new rows")
    after: Observation | None = None
    if not plain:
        if request.dedup_on:
            good = appending.first_of_each_key(good, request.dedup_on)
        if base is not None:
            existing = appending.read_base(spark, base)
            if request.dedup_on:
                good = appending.not_in(good, existing, request.dedup_on)
            good = existing.unionByName(good.observe(added, F.count(F.lit(1)).alias("rows")))
        else:
            good = good.observe(added, F.count(F.lit(1)).alias("rows"))
        during = checks.aggregates(request.checks, schema) if request.checks is not None else []
        if during:
            after = Observation("checks")
            good = good.observe(after, *during)
    out = (
        good.repartition(request.files, *request.partition_by)
        if request.partition_by
        else good.repartition(request.files)
    )
    writer = out.write.mode("errorifexists")
    if request.partition_by:
        writer = writer.partitionBy(*request.partition_by)
    writer.parquet(staged)
    counted = dict(read.get) if read is not None else {}
    # Not counted as they went by: every row read was written (its footers count them).
    rows = int(counted.pop("rows", 0) or 0) if read is not None else written.Files.read(staged).rows
    bad = int(counted.pop("bad", 0) or 0)
    found = counted if plain else (dict(after.get) if after is not None else {})
    return Observed(
        read=rows,
        bad=bad,
        added=rows - bad if plain else int(added.get.get("rows") or 0),
        checks={k: int(v or 0) for k, v in found.items()},
    )
