"""One ingest: raw files in, a checked, described, atomically published dataset version out.

    read (as text, or typed by Spark's parser where it types as we do) -> types (declared
    or inferred) -> typed rows + a bad-row flag
    -> write the good rows aside, observing the rows read and the bad ones (where the
       parser types: strictly first, a read that stops at a row it does not type, and
       only then the read that flags such rows; see `_Frames`)
    -> statistics and checks from the written files
    -> bad rows with their reasons by mode (read again only if any)
    -> manifest
    -> publish (rename, then move the NAME link)

Nothing is visible to workers before the last step; any failure before it removes what was
written aside. `pipeline ingest` is the command line of this module.
"""

from __future__ import annotations

import codecs
import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from spark_workers import (
    appending,
    bad_rows,
    checks,
    inference,
    manifest,
    read_options,
    schema_choice,
    sniffing,
    versions,
    written,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


class IngestError(Exception):
    """The ingest stops; nothing is published (the message says why)."""


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


Stage = Callable[[str], Any]


def run(spark: SparkSession, request: Request, *, say: Callable[[str], None]) -> Result:
    """Ingest `request`; `say` gets the lines a user reads (schema, counts, reports)."""
    with _ingest_conf(spark):
        try:
            return _run(spark, request, say=say)
        except Exception as exc:
            mismatch = _header_mismatch(exc)
            if mismatch is None:
                raise
            raise IngestError(mismatch) from exc


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
    from pyspark.sql import functions as F  # noqa: N812

    options = request.options
    declared = read_options.parse_schema(spark, options.schema_ddl) if options.schema_ddl else None
    base = appending.base_of(spark, request.root, request.name) if request.append else None
    if base is not None:
        appending.check_compatible(base, declared, request.partition_by)
        declared = base.schema  # the increment is typed as the dataset is
        request = dataclasses.replace(request, partition_by=base.partition_by)
    sniffed = _sniff(request.src, options)
    if sniffed is not None:
        options = sniffed.options
    # `text`: the source as text, made when first called. With a declared schema, only if
    # needed: for the bad rows, when there are some (its plan took 20-30 ms).
    inferred: inference.Inferred | None = None
    text: Callable[[], DataFrame]
    if declared is not None and options.format != "parquet":
        schema = declared
        options = _declared_formats(declared, sniffed, options)
        frozen = options
        text = functools.cache(lambda: read_text(spark, request.src, frozen, declared)[0])
    elif options.format == "parquet":
        frame, _ = read_text(spark, request.src, options, declared)
        schema = frame.schema
        text = functools.cache(lambda: frame)
        flagged = frame.select("*", F.lit(False).alias(inference.BAD_COLUMN))
        frames = _Frames(full=lambda: flagged)
    else:
        schema, options, inferred, text = _inferred(spark, request.src, options, sniffed, say)
    request = dataclasses.replace(request, options=options)
    chosen = schema_choice.SchemaChoice.of(schema, options, inferred, sniffed, declared is not None)
    for line in chosen.lines():
        say(line)
    say(("declared" if declared else "inferred") + f" schema: {manifest.schema_ddl(schema)}")
    if request.dry_run:
        return Result(target="", manifest={"inference": chosen.entry()}, bad=[])
    if options.format != "parquet":
        frames = _typed(spark, request.src, options, schema, text)
    for column in request.partition_by:
        if column not in schema.fieldNames():
            raise IngestError(f"no column {column!r} to partition by in {schema.fieldNames()}")
    if request.checks is not None:
        request.checks.bind(schema)
    appending.check_key(request.dedup_on, schema)
    staged = versions.staging(request.root, request.dataset)
    try:
        result = _write_checked(
            spark, request, frames, text, schema, staged, chosen, base, source, say
        )
        versions.publish(
            request.root,
            staged,
            request.name,
            request.dataset,
            promote=request.promote,
            expected=base.dataset if base is not None else None,
        )
    except BaseException:
        versions.discard(staged)
        versions.discard(_strict_directory(staged))
        raise
    return dataclasses.replace(result, target=f"{request.root}/{request.dataset}")


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
    frame, columns = read_text(spark, src, options, None, names=names)
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


def _write_checked(
    spark: SparkSession,
    request: Request,
    frames: _Frames,
    text: Callable[[], DataFrame],
    schema: StructType,
    staged: str,
    chosen: schema_choice.SchemaChoice,
    base: appending.Base | None,
    source: concurrent.futures.Future[dict[str, Any]],
    say: Callable[[str], None],
) -> Result:
    """Write the good rows of `frames` aside, counting as they go by (Spark observations: the
    rows read, the bad ones, the checks not counted from the files); then the manifest's
    statistics and the other checks from the written files (`written`, `checks.counters`),
    the bad rows (read again from `text` only when there are some) and the unique checks.
    `source`: the source's files and checksum, being read."""
    options = request.options
    observed = _write(spark, request, frames, schema, staged, base)
    files = written.Files.read(staged)
    counters = checks.counters(request.checks, schema) if request.checks is not None else {}
    stats = written.statistics(spark, files, schema, request.partition_by, counters)
    counts = dict(stats.counts) | observed.checks
    described_source = source.result()
    # Read again, with each value's text and file, only when there are bad rows.
    bad_count, read_rows, added = observed.bad, observed.read, observed.added
    bad = (
        bad_rows.collect(inference.convert(text(), schema, options), schema, options)
        if bad_count
        else []
    )
    try:
        bad_rows.judge(bad, options, count=bad_count)
    except bad_rows.BadRowsError as exc:
        raise IngestError(str(exc)) from exc
    quarantine = bad_rows.write_quarantine(staged, bad) if options.mode == "permissive" else None
    if request.checks is not None:
        counts.update(checks.unique_counts(request.checks, spark, staged, schema, stats))
        failed = checks.failures(request.checks, counts, lambda: spark.read.parquet(staged))
        if failed:
            say(checks.report(failed))
            raise IngestError(f"{len(failed)} check(s) failed: nothing published")
    if bad:
        say(f"{bad_count} bad row(s), {options.mode}: " + bad[0].describe())
    duplicates = read_rows - bad_count - added
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
        "schema_inferred": not chosen.declared,
        "inference": chosen.entry(),
        "columns": manifest.columns_from(counts, schema),
        "partition_by": list(request.partition_by),
        "files": manifest.data_files(staged),
        "source": described_source,
        "options": options.summary(),
        "bad_rows": {"mode": options.mode, "count": bad_count, "quarantine": quarantine},
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
    return Result(target=staged, manifest=described, bad=bad)


@dataclasses.dataclass(frozen=True)
class _Observed:
    """What the write counted: rows read, bad ones, rows added to the version (after
    deduplication), and the checks' failures (`check:...` counts)."""

    read: int
    bad: int
    added: int
    checks: dict[str, int]


#: The message of the strict write's stop at a bad row (`_write`): it is read again.
_STRICT_STOP = "osrdyne ingest: a bad row stops the strict read"
#: Spark's error class of a FAILFAST read's stop at a row its parser does not type.
_MALFORMED = "MALFORMED_RECORD_IN_PARSING"


def _strict_directory(staged: str) -> str:
    """Where the strict write goes (renamed to `staged` once done): a write that stopped
    may leave files behind for a moment (a task being cancelled), never in `staged`."""
    return f"{staged}-strict"


def _write(
    spark: SparkSession,
    request: Request,
    frames: _Frames,
    schema: StructType,
    staged: str,
    base: appending.Base | None,
) -> _Observed:
    """Write the good rows of `frames` (and the base's, when appending) to `staged`: the
    strict frame where there is one, stopped at the first row it does not type or any bad
    row (then nothing it wrote is kept), else, or then, the full frame."""
    if frames.strict is None:
        return _write_frame(spark, request, frames.full(), schema, staged, base, strict=False)
    attempt = _strict_directory(staged)
    try:
        with _quiet_task_failures(spark):
            observed = _write_frame(
                spark, request, frames.strict, schema, attempt, base, strict=True
            )
    except Exception as exc:
        if not _stopped_strict(exc):
            raise
        versions.discard(attempt)
    else:
        os.rename(attempt, staged)
        return observed
    observed = _write_frame(spark, request, frames.full(), schema, staged, base, strict=False)
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


def _write_frame(
    spark: SparkSession,
    request: Request,
    typed: DataFrame,
    schema: StructType,
    staged: str,
    base: appending.Base | None,
    *,
    strict: bool,
) -> _Observed:
    """Write the good rows of `typed` (and the base's, when appending) to `staged`. With
    `strict`, a bad row stops the write instead of being counted; the rows read are then
    counted only where the ingest needs them apart from those written."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812

    for field in schema.fields:
        if field.metadata:  # a text column of dates, and why (`text_date_guard` reads it)
            typed = typed.withMetadata(field.name, field.metadata)
    flag = inference.sql_name(inference.BAD_COLUMN)
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
        good = typed.where(f"assert_true(NOT {flag}, {inference.sql_text(_STRICT_STOP)}) IS NULL")
    else:
        good = typed
    if not (strict and plain and not in_read):
        read = Observation("rows")
        good = good.observe(
            read, F.expr("count(1) AS rows"), F.expr(f"count_if({flag}) AS bad"), *in_read
        )
    if not strict:
        good = good.where(f"NOT {flag}")
    good = good.drop(inference.BAD_COLUMN)
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
    return _Observed(
        read=rows,
        bad=bad,
        added=rows - bad if plain else int(added.get.get("rows") or 0),
        checks={k: int(v or 0) for k, v in found.items()},
    )


@dataclasses.dataclass(frozen=True)
class _Frames:
    """What the good rows are written from: `full`, every row typed with `BAD_COLUMN` (bad
    rows flagged, not lost), made when first called; and, where Spark's parser types
    columns and the source does not start with missing-value markers, `strict`, tried
    first (`inference.convert_strict`): a read that stops at the first row it does not
    type, with no per-row cost for rows it could not (Spark's corrupt-record column: about
    a sixth of a plain read's CPU time at 1M rows)."""

    full: Callable[[], DataFrame]
    strict: DataFrame | None = None


def _typed(
    spark: SparkSession,
    src: str,
    options: read_options.ReadOptions,
    schema: StructType,
    text: Callable[[], DataFrame],
) -> _Frames:
    """The lean frames the good rows are written from: read with Spark's parser typing the
    columns it types as the text path would (`inference.parser_typed`), or converted from
    `text`."""
    integers = any(
        f.dataType.typeName() in ("byte", "short", "integer", "long") for f in schema.fields
    )
    ascii_digits = integers and _no_other_digits(src, options)
    by_parser = inference.parser_typed(schema, options, ascii_digits=ascii_digits)
    if not by_parser:
        converted = inference.convert(text(), schema, options, sources=False)
        return _Frames(full=lambda: converted)

    def full() -> DataFrame:
        read = _parser_read(spark, src, options, schema, by_parser, corrupt=True)
        return inference.convert_parsed(read, schema, options, by_parser)

    if _markers_at_start(src, options):
        made = full()
        return _Frames(full=lambda: made)
    strict = _parser_read(spark, src, options, schema, by_parser, corrupt=False)
    return _Frames(
        full=functools.cache(full),
        strict=inference.convert_strict(strict, schema, options, by_parser),
    )


def _parser_read(
    spark: SparkSession,
    src: str,
    options: read_options.ReadOptions,
    schema: StructType,
    by_parser: frozenset[str],
    *,
    corrupt: bool,
) -> DataFrame:
    """The CSV source with the `by_parser` columns typed by Spark's parser, the others
    text; with `corrupt`, permissive with the corrupt-record column, else failing fast."""
    from pyspark.sql import types as T  # noqa: N812

    fields = [
        f if f.name in by_parser else T.StructField(f.name, T.StringType(), True)
        for f in schema.fields
    ]
    reader_options = options.spark_options()
    date_pattern, timestamp_pattern = inference.reader_patterns(schema, options)
    if date_pattern is not None:
        reader_options["dateFormat"] = date_pattern
    if timestamp_pattern is not None:
        reader_options["timestampFormat"] = timestamp_pattern
    if corrupt:
        fields.append(T.StructField(read_options.CORRUPT_COLUMN, T.StringType(), True))
    else:
        reader_options["mode"] = "FAILFAST"
        del reader_options["columnNameOfCorruptRecord"]
    with _reading(src):
        return spark.read.options(**reader_options).schema(T.StructType(fields)).csv(src)


@contextlib.contextmanager
def _reading(src: str) -> Iterator[None]:
    """Spark's failure to open the source (no such path, an unreadable file) as an
    IngestError naming it."""
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        first = str(exc).strip().splitlines()
        raise IngestError(f"cannot read {src}: {first[0] if first else exc}") from exc


_BLOCK = 4 << 20


def _no_other_digits(src: str, options: read_options.ReadOptions) -> bool:
    """Whether the local source holds no decimal digit but ASCII's (then Spark's integer
    parse accepts exactly what the text path does; Java's `parseInt` takes every Unicode
    decimal digit). Each file is read in blocks into one buffer; a block of ASCII only (its
    largest byte below 128, numpy) is done with; of any other, the bytes from 128 up (in
    UTF-8 and the single-byte charsets, no other character holds one) are decoded and their
    distinct characters looked at. UTF-16 is decoded whole. About 10 ms for 60 MB of ASCII
    (reading into new blocks and dropping their ASCII bytes took 70-110 ms, a twentieth of
    the bench's ingest). A remote source is not read: False."""
    import numpy as np

    found = manifest.source_paths(src)
    if found is None:
        return False
    wide = options.charset.startswith("UTF-16")
    decoder_of = codecs.getincrementaldecoder(codecs.lookup(options.charset).name)
    buffer = bytearray(_BLOCK)
    for path in found[1]:
        decoder = decoder_of(errors="replace")
        with open(path, "rb", buffering=0) as data:
            while size := data.readinto(buffer):
                block = np.frombuffer(buffer, np.uint8, count=size)
                if wide:
                    rest = block.tobytes()
                elif block.max() < 128:
                    continue
                else:
                    rest = block[block >= 128].tobytes()
                if any(c.isdecimal() and not c.isascii() for c in set(decoder.decode(rest))):
                    return False
    return True


#: How much of each source file `_markers_at_start` reads, and of all files at most.
_SAMPLE = 1 << 20
_SAMPLE_TOTAL = 16 << 20


def _markers_at_start(src: str, options: read_options.ReadOptions) -> bool:
    """Whether a missing-value marker other than the empty one stands as a field (between
    delimiters or line ends, quoted or not) in the first megabyte of a source file (of at
    most 16 files' worth): then the parser is expected to meet rows it does not type (R's
    `NA` in a number column), and the ingest does not try a strict read first (`_Frames`).
    A marker met later only costs the strict read's part done. True for a remote source."""
    import re

    found = manifest.source_paths(src)
    if found is None:
        return True
    markers = [m for m in options.null_values if m]
    if not markers:
        return False
    sep = re.escape(options.delimiter or ",")
    quote = re.escape(options.quote or '"')
    pattern = re.compile(
        rf"(?:^|{sep})[ \t]*{quote}?(?:{'|'.join(re.escape(m) for m in markers)}){quote}?"
        rf"[ \t]*(?:{sep}|\r?$)",
        re.MULTILINE,
    )
    budget = _SAMPLE_TOTAL
    for path in found[1]:
        if budget <= 0:
            break
        with open(path, "rb") as data:
            head = data.read(min(_SAMPLE, budget))
        budget -= len(head)
        text = codecs.getincrementaldecoder(codecs.lookup(options.charset).name)(
            errors="replace"
        ).decode(head)
        # A marker's text anywhere first (a fraction of a millisecond), as a field then.
        if any(marker in text for marker in markers) and pattern.search(text):
            return True
    return False


def read_text(
    spark: SparkSession,
    src: str,
    options: read_options.ReadOptions,
    declared: StructType | None,
    *,
    names: list[str] | None = None,
) -> tuple[DataFrame, list[str]]:
    """The source with every column as text (Parquet: as it is), and the column names
    (`names`, the sniffer's, when given: no job to read a header)."""
    from pyspark.sql import types as T  # noqa: N812

    with _reading(src):
        if options.format == "parquet":
            df = spark.read.parquet(src)
            return df, df.columns
        reader = spark.read.options(**options.spark_options())
        if names is None:
            names = _names(spark, src, options, declared)
        else:
            _check_names(src, names)
        text_schema = T.StructType(
            [T.StructField(n, T.StringType(), True) for n in names]
            + [T.StructField(read_options.CORRUPT_COLUMN, T.StringType(), True)]
        )
        df = reader.schema(text_schema).format(options.format).load(src)
        return df, names


def _check_names(src: str, names: list[str]) -> None:
    try:
        read_options.check_columns(names)
    except read_options.ReadOptionsError as exc:
        raise IngestError(f"{src}: {exc}") from exc


def _sniff(src: str, options: read_options.ReadOptions) -> sniffing.Sniffed | None:
    """The sniffer's dialect and column guesses (`sniffing`), its failure an IngestError;
    with renamed header names, every file's header checked here (Spark's check would
    compare them with the new names)."""
    try:
        sniffed = sniffing.sniff(src, options)
        if sniffed is not None and sniffed.options.renamed_header:
            sniffing.check_headers(src, sniffed.options)
    except sniffing.SniffError as exc:
        raise IngestError(str(exc)) from exc
    return sniffed


def _declared_formats(
    declared: StructType, sniffed: sniffing.Sniffed | None, options: read_options.ReadOptions
) -> read_options.ReadOptions:
    """`options` with the formats the sniffer found for the declared columns of their
    kind (a DATE column written `2012/01/01`), where no format was given for them; a
    day/month order the sample left open is refused (`--date-format` settles it)."""
    if sniffed is None:
        return options
    formats = dict(options.formats)
    for field in declared.fields:
        guess = sniffed.guesses.get(field.name)
        type_name = field.dataType.typeName()
        if guess is None or field.name in formats:
            continue
        kind = {"timestamp_ntz": "timestamp"}.get(type_name, type_name)
        given = options.date_format if kind == "date" else options.timestamp_format
        if kind in ("date", "timestamp") and guess.type == kind and not given:
            patterns = tuple(p for p in guess.patterns if p)
            if len(patterns) == 2:
                raise IngestError(
                    f"column {field.name!r}: its dates read either way round in the sample "
                    f"(no day past 12): --{kind}-format '{patterns[0]}' or "
                    f"'{patterns[1]}' says which"
                )
            fmt = guess.column_format()
        elif inference.same_family(kind, guess.type):
            fmt = guess.column_format("")
        else:
            fmt = None
        if fmt is not None:
            formats[field.name] = fmt
    return options.model_copy(update={"formats": formats})


def _names(
    spark: SparkSession,
    src: str,
    options: read_options.ReadOptions,
    declared: StructType | None,
) -> list[str]:
    """Column names: the declared schema's, else the first file's header (or `_c0`...
    without one), else those JSON objects use."""
    if declared is not None:
        # A header is checked against them by Spark's reader, in every file as it is read
        # (`ReadOptions.spark_options`: enforceSchema off): no job of its own here.
        return declared.fieldNames()
    if options.format == "json":
        found = spark.read.options(**options.spark_options()).json(src).columns
    else:
        found = spark.read.options(**options.spark_options()).csv(src).columns
    names = [n for n in found if n != read_options.CORRUPT_COLUMN]
    try:
        read_options.check_columns(names)
    except read_options.ReadOptionsError as exc:
        raise IngestError(f"{src}: {exc}") from exc
    return names
