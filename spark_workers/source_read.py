"""The ingest's read stage: the source's dialect sniffed (`sniffing`), the formats of the
declared columns filled in from it, and the source read with every column as text (Parquet
as it is), its column names checked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from spark_workers import pipeline_errors, read_options, sniffing, value_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


@contextlib.contextmanager
def reading(src: str) -> Iterator[None]:
    """Spark's failure to open the source (no such path, an unreadable file) as a
    `SourceError` naming it."""
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        first = str(exc).strip().splitlines()
        raise pipeline_errors.SourceError(
            f"cannot read {src}: {first[0] if first else exc}"
        ) from exc


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

    with reading(src):
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
    except pipeline_errors.ReadOptionsError as exc:
        raise pipeline_errors.SourceError(f"{src}: {exc}") from exc


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
    except pipeline_errors.ReadOptionsError as exc:
        raise pipeline_errors.SourceError(f"{src}: {exc}") from exc
    return names


def sniff(src: str, options: read_options.ReadOptions) -> sniffing.Sniffed | None:
    """The sniffer's dialect and column guesses (`sniffing`); with renamed header names,
    every file's header checked here (Spark's check would compare them with the new
    names)."""
    sniffed = sniffing.sniff(src, options)
    if sniffed is not None and sniffed.options.renamed_header:
        sniffing.check_headers(src, sniffed.options)
    return sniffed


def declared_formats(
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
                raise pipeline_errors.SchemaError(
                    f"column {field.name!r}: its dates read either way round in the sample "
                    f"(no day past 12): --{kind}-format '{patterns[0]}' or "
                    f"'{patterns[1]}' says which"
                )
            fmt = guess.column_format()
        elif value_sql.same_family(kind, guess.type):
            fmt = guess.column_format("")
        else:
            fmt = None
        if fmt is not None:
            formats[field.name] = fmt
    return options.model_copy(update={"formats": formats})
