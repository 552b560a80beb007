"""The ingest's type stage: the lean frames the good rows are written from (`Frames`), every
value typed as the schema says and each row flagged bad or not (`conversion.BAD_COLUMN`).

Spark's CSV parser types the columns it types as the text path would
(`conversion.parser_typed`): integers only for a source holding no digit but ASCII's
(`no_other_digits`), and a strict read tried first unless the source starts with
missing-value markers (`markers_at_start`). Other columns, and other sources, are converted
from their text (`conversion.convert`).
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from spark_workers import conversion, manifest, read_options, source_read

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


@dataclasses.dataclass(frozen=True)
class Frames:
    """What the good rows are written from: `full`, every row typed with `BAD_COLUMN` (bad
    rows flagged, not lost), made when first called; and, where Spark's parser types
    columns and the source does not start with missing-value markers, `strict`, tried
    first (`conversion.convert_strict`): a read that stops at the first row it does not
    type, with no per-row cost for rows it could not (Spark's corrupt-record column: about
    a sixth of a plain read's CPU time at 1M rows)."""

    full: Callable[[], DataFrame]
    strict: DataFrame | None = None


def typed(
    spark: SparkSession,
    src: str,
    options: read_options.ReadOptions,
    schema: StructType,
    text: Callable[[], DataFrame],
) -> Frames:
    """The lean frames the good rows are written from: read with Spark's parser typing the
    columns it types as the text path would (`conversion.parser_typed`), or converted from
    `text`."""
    integers = any(
        f.dataType.typeName() in ("byte", "short", "integer", "long") for f in schema.fields
    )
    ascii_digits = integers and no_other_digits(src, options)
    by_parser = conversion.parser_typed(schema, options, ascii_digits=ascii_digits)
    if not by_parser:
        converted = conversion.convert(text(), schema, options, sources=False)
        return Frames(full=lambda: converted)

    def full() -> DataFrame:
        read = _parser_read(spark, src, options, schema, by_parser, corrupt=True)
        return conversion.convert_parsed(read, schema, options, by_parser)

    if markers_at_start(src, options):
        made = full()
        return Frames(full=lambda: made)
    strict = _parser_read(spark, src, options, schema, by_parser, corrupt=False)
    return Frames(
        full=functools.cache(full),
        strict=conversion.convert_strict(strict, schema, options, by_parser),
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
    date_pattern, timestamp_pattern = conversion.reader_patterns(schema, options)
    if date_pattern is not None:
        reader_options["dateFormat"] = date_pattern
    if timestamp_pattern is not None:
        reader_options["timestampFormat"] = timestamp_pattern
    if corrupt:
        fields.append(T.StructField(read_options.CORRUPT_COLUMN, T.StringType(), True))
    else:
        reader_options["mode"] = "FAILFAST"
        del reader_options["columnNameOfCorruptRecord"]
    with source_read.reading(src):
        return spark.read.options(**reader_options).schema(T.StructType(fields)).csv(src)


_BLOCK = 4 << 20


def no_other_digits(src: str, options: read_options.ReadOptions) -> bool:
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


#: How much of each source file `markers_at_start` reads, and of all files at most.
_SAMPLE = 1 << 20
_SAMPLE_TOTAL = 16 << 20


def markers_at_start(src: str, options: read_options.ReadOptions) -> bool:
    """Whether a missing-value marker other than the empty one stands as a field (between
    delimiters or line ends, quoted or not) in the first megabyte of a source file (of at
    most 16 files' worth): then the parser is expected to meet rows it does not type (R's
    `NA` in a number column), and the ingest does not try a strict read first (`Frames`).
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
