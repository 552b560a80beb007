"""One ingest: raw files in, a checked, described, atomically published dataset version out.

Its stages, in order (`_ingest`):

1. **read** (`_read`, `source_read`): the source sniffed (`sniffing`), read as text (Parquet
   as it is), its schema declared or inferred (`inference`), the schema chosen said;
2. **type** (`typed_frames`): the frames the good rows are written from, typed by Spark's
   parser where it types as we do, else converted from the text (`conversion`), with a
   bad-row flag;
3. **write** (`staged_write`): the good rows written aside, the rows read and the bad ones
   observed as they go by (where the parser types: strictly first, a read that stops at a
   row it does not type, and only then the read that flags such rows);
4. **check** (`_check`): statistics and checks from the written files, the bad rows with
   their reasons by mode (read again, by the text path, only if there are some);
5. **publish** (`_describe`, `versions.publish`): the manifest, then rename, then move the
   NAME link.

Nothing is visible to workers before the last step; any failure before it removes what was
written aside. `pipeline ingest` is the command line of this module.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from spark_workers import (
    appending,
    bad_rows,
    checks,
    conversion,
    inference,
    manifest,
    pipeline_errors,
    read_options,
    schema_choice,
    sniffing,
    source_read,
    staged_write,
    typed_frames,
    versions,
    written,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


@dataclasses.dataclass
class Request:
    """What to ingest and how."""

    src: str
    root: str
    name: str
    version: str
    options: read_options.ReadOptions
    checks: checks.Checks | None = None
    partition_by: tuple[str, ...] = ()
    files: int = 2
    promote: bool = True
    #: Add to the current version's rows (`appending`) instead of a version of its own.
    append: bool = False
    #: The columns identifying a row: duplicates dropped (`appending`).
    dedup_on: tuple[str, ...] = ()
    #: Print the schema the ingest would use, write nothing.
    dry_run: bool = False

    @property
    def dataset(self) -> str:
        return f"{self.name}@{self.version}"


@dataclasses.dataclass
class Result:
    target: str
    manifest: dict[str, Any]
    bad: list[bad_rows.BadRow]


def run(spark: SparkSession, request: Request, *, say: Callable[[str], None]) -> Result:
    """Ingest `request`; `say` gets the lines a user reads (schema, counts, reports)."""
    with _ingest_conf(spark):
        try:
            return _run(spark, request, say=say)
        except Exception as exc:
            mismatch = _header_mismatch(exc)
            if mismatch is None:
                raise
            raise pipeline_errors.SourceError(mismatch) from exc


#: How Spark's CSV reader begins the message of a header unlike the schema.
_HEADER_MISMATCH = "CSV header does not conform to the schema"


def _header_mismatch(exc: BaseException) -> str | None:
    """Spark's own message (header, schema, file) when a CSV file's header is not the
    columns', from a failed job's exception or its causes; None for any other failure."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return None
        text = str(seen)
        at = text.find(_HEADER_MISMATCH)
        if at >= 0:
            lines = [line.strip() for line in text[at:].splitlines()]
            kept = []
            for line in lines:
                if not line or line.startswith(("at ", "\tat ")) or "Exception" in line:
                    break
                kept.append(line)
            return "; ".join(kept).replace("schema.;", "schema:", 1)[:2000]
        seen = seen.__cause__ or seen.__context__
    return None


#: Session settings while ingesting, restored afterwards (the session may be shared).
_INGEST_CONF = {
    # Spark's optimizer derives constraints from every alias of a plan, and the typed
    # columns' expressions (a parse and a reason per column) made it run out of a 1 GB heap
    # on a 19-column file, planning the bad rows' query.
    "spark.sql.constraintPropagation.enabled": "false",
    # Timestamps written as Parquet's INT64 microseconds, not the legacy INT96 (deprecated
    # by Parquet, read by every engine, and by Arrow for the statistics in a third of the
    # time: 1M values, 20-70 ms -> 15).
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Spark 4 reads CSV in seven charsets only unless told to use the JVM's: Windows-1252
    # (what the sniffer finds in Western European exports) and ISO-8859-15 need it.
    "spark.sql.legacy.javaCharsets": "true",
}


@contextlib.contextmanager
def _ingest_conf(spark: SparkSession) -> Iterator[None]:
    """`_INGEST_CONF` set on `spark` while ingesting; the session's own values restored
    afterwards."""
    before = {name: spark.conf.get(name, None) for name in _INGEST_CONF}
    for name, value in _INGEST_CONF.items():
        spark.conf.set(name, value)
    try:
        yield
    finally:
        for name, kept in before.items():
            if kept is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, kept)


def _run(spark: SparkSession, request: Request, *, say: Callable[[str], None]) -> Result:
    versions.check_free(request.root, request.name, request.dataset, promote=request.promote)
    # The source's checksum, read from the start, while the plan is made (one core is free
    # then; during the write, both are Spark's): a thread, hashlib leaves the GIL. Stopped,
    # not waited for, when the ingest fails.
    hashing = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="source-checksum")
    stop = threading.Event()
    try:
        source = hashing.submit(manifest.source_files, request.src, stop)
        return _ingest(spark, request, source, say=say)
    finally:
        stop.set()
        hashing.shutdown(wait=False, cancel_futures=True)


def _ingest(
    spark: SparkSession,
    request: Request,
    source: concurrent.futures.Future[dict[str, Any]],
    *,
    say: Callable[[str], None],
) -> Result:
    """The stages, in order (see the module). `source`: the source's files and checksum,
    being read."""
    read = _read(spark, request, say=say)
    if request.dry_run:
        return Result(target="", manifest={"inference": read.chosen.entry()}, bad=[])
    request, schema = read.request, read.schema
    frames = read.frames or typed_frames.typed(
        spark, request.src, request.options, schema, read.text
    )
    for column in request.partition_by:
        if column not in schema.fieldNames():
            raise pipeline_errors.SchemaError(
                f"no column {column!r} to partition by in {schema.fieldNames()}"
            )
    if request.checks is not None:
        request.checks.bind(schema)
    appending.check_key(request.dedup_on, schema)
    staged = versions.staging(request.root, request.dataset)
    try:
        observed = staged_write.write(spark, request, frames, schema, staged, read.base)
        checked = _check(spark, read, staged, observed, say=say)
        described = _describe(read, staged, observed, checked, source.result(), say=say)
        versions.publish(
            request.root,
            staged,
            request.name,
            request.dataset,
            promote=request.promote,
            expected=read.base.dataset if read.base is not None else None,
        )
    except BaseException:
        versions.discard(staged)
        versions.discard(staged_write.strict_directory(staged))
        raise
    return Result(target=f"{request.root}/{request.dataset}", manifest=described, bad=checked.bad)


@dataclasses.dataclass(frozen=True)
class _Read:
    """What the read stage found: the request with the options the source needs (formats
    found, the dialect sniffed; an append's partitioning), the schema and how it was
    chosen, the dataset appended to, and the source as text (made when first called:
    with a declared schema, only for the bad rows, when there are some; its plan took
    20-30 ms). A Parquet source comes with its frames: its rows are typed already."""

    request: Request
    schema: StructType
    chosen: schema_choice.SchemaChoice
    base: appending.Base | None
    text: Callable[[], DataFrame]
    frames: typed_frames.Frames | None = None


def _read(spark: SparkSession, request: Request, *, say: Callable[[str], None]) -> _Read:
    """The read stage: the source's dialect, text and schema (declared, an append's, or
    inferred), the choice said."""
    from pyspark.sql import functions as F  # noqa: N812

    options = request.options
    declared = read_options.parse_schema(spark, options.schema_ddl) if options.schema_ddl else None
    base = appending.base_of(spark, request.root, request.name) if request.append else None
    if base is not None:
        appending.check_compatible(base, declared, request.partition_by)
        declared = base.schema  # the increment is typed as the dataset is
        request = dataclasses.replace(request, partition_by=base.partition_by)
    sniffed = source_read.sniff(request.src, options)
    if sniffed is not None:
        options = sniffed.options
    inferred: inference.Inferred | None = None
    text: Callable[[], DataFrame]
    frames: typed_frames.Frames | None = None
    if declared is not None and options.format != "parquet":
        schema = declared
        options = source_read.declared_formats(declared, sniffed, options)
        frozen = options
        text = functools.cache(
            lambda: source_read.read_text(spark, request.src, frozen, declared)[0]
        )
    elif options.format == "parquet":
        frame, _ = source_read.read_text(spark, request.src, options, declared)
        schema = frame.schema
        text = functools.cache(lambda: frame)
        flagged = frame.select("*", F.lit(False).alias(conversion.BAD_COLUMN))
        frames = typed_frames.Frames(full=lambda: flagged)
    else:
        schema, options, inferred, text = _inferred(spark, request.src, options, sniffed, say)
    request = dataclasses.replace(request, options=options)
    chosen = schema_choice.SchemaChoice.of(schema, options, inferred, sniffed, declared is not None)
    for line in chosen.lines():
        say(line)
    say(("declared" if declared else "inferred") + f" schema: {manifest.schema_ddl(schema)}")
    return _Read(request, schema, chosen, base, text, frames)


def _inferred(
    spark: SparkSession,
    src: str,
    options: read_options.ReadOptions,
    sniffed: sniffing.Sniffed | None,
    say: Callable[[str], None],
) -> tuple[StructType, read_options.ReadOptions, inference.Inferred, Callable[[], DataFrame]]:
    """The inferred schema of the source, the options with the formats found, what inference
    said (its notes printed), and the source as text."""
    names = sniffed.names if sniffed is not None else None
    frame, columns = source_read.read_text(spark, src, options, None, names=names)
    inferred = inference.infer(frame, columns, options, sniffed.guesses if sniffed else None)
    options = options.model_copy(update={"formats": {**inferred.formats, **options.formats}})
    for column, count in inferred.text_markers.items():
        say(
            f"note: text column {column!r} holds {count} missing-value marker(s),"
            " kept as text (--text-null-value MARKER makes them missing)"
        )
    for column, (typed_as, odd, values, example) in inferred.nearly_typed.items():
        say(
            f"note: column {column!r} is text because {odd} of {values} values are "
            f"not {typed_as} (e.g. {example!r}): declare it {typed_as} with --schema "
            "to quarantine them instead"
        )
    for column, why in inferred.date_text.items():
        say(f"note: column {column!r} is text: {why}")
    return inferred.schema, options, inferred, functools.cache(lambda: frame)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """What the check stage found: the counts (statistics and checks), the bad rows and
    where they were quarantined."""

    counts: dict[str, Any]
    bad: list[bad_rows.BadRow]
    quarantine: str | None


def _check(
    spark: SparkSession,
    read: _Read,
    staged: str,
    observed: staged_write.Observed,
    *,
    say: Callable[[str], None],
) -> _Checked:
    """The check stage, on the rows written aside: the manifest's statistics and the checks
    from the written files (`written`, `checks.counters`) with those counted as the rows
    went by, the bad rows (read again from the text only when there are some) judged by
    mode, and the unique checks."""
    request, schema = read.request, read.schema
    options = request.options
    files = written.Files.read(staged)
    counters = checks.counters(request.checks, schema) if request.checks is not None else {}
    stats = written.statistics(spark, files, schema, request.partition_by, counters)
    counts = dict(stats.counts) | observed.checks
    bad = (
        bad_rows.collect(conversion.convert(read.text(), schema, options), schema, options)
        if observed.bad
        else []
    )
    bad_rows.judge(bad, options, count=observed.bad)
    quarantine = bad_rows.write_quarantine(staged, bad) if options.mode == "permissive" else None
    if request.checks is not None:
        counts.update(checks.unique_counts(request.checks, spark, staged, schema, stats))
        failed = checks.failures(request.checks, counts, lambda: spark.read.parquet(staged))
        if failed:
            say(checks.report(failed))
            raise pipeline_errors.ChecksFailed(f"{len(failed)} check(s) failed: nothing published")
    if bad:
        say(f"{observed.bad} bad row(s), {options.mode}: " + bad[0].describe())
    return _Checked(counts, bad, quarantine)


def _describe(
    read: _Read,
    staged: str,
    observed: staged_write.Observed,
    checked: _Checked,
    described_source: dict[str, Any],
    *,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The manifest of the version written aside (written there, and returned)."""
    request, schema, base = read.request, read.schema, read.base
    options, counts = request.options, checked.counts
    bad_count, added = observed.bad, observed.added
    duplicates = observed.read - bad_count - added
    if request.dedup_on:
        say(f"{duplicates} duplicate row(s) on {list(request.dedup_on)} dropped")
    if request.append:
        to = f"to {base.dataset!r} ({base.rows} rows)" if base else "as the first version"
        say(f"{added} row(s) appended {to}")
    described = {
        "manifest": manifest.FORMAT,
        "dataset": request.dataset,
        "name": request.name,
        "version": request.version,
        "created": manifest.now(),
        "rows": counts["stat:rows"],
        "schema": manifest.schema_entries(schema),
        "schema_ddl": manifest.schema_ddl(schema),
        "schema_inferred": not read.chosen.declared,
        "inference": read.chosen.entry(),
        "columns": manifest.columns_from(counts, schema),
        "partition_by": list(request.partition_by),
        "files": manifest.data_files(staged),
        "source": described_source,
        "options": options.summary(),
        "bad_rows": {"mode": options.mode, "count": bad_count, "quarantine": checked.quarantine},
        "dedup": {"on": list(request.dedup_on), "duplicates": duplicates}
        if request.dedup_on
        else None,
        "append": {
            "to": base.dataset if base is not None else None,
            "rows_before": base.rows if base is not None else 0,
            "rows_added": added,
        }
        if request.append
        else None,
        "checks": request.checks.model_dump(mode="json", exclude_defaults=True)
        if request.checks
        else None,
    }
    manifest.write(staged, described)
    return described
