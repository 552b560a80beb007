"""Column types a data engineer can trust, and the typed values: from raw text to a schema.

Spark's own CSV inference types a column as a string as soon as one value is not a number,
so R's `NA` turns every numeric column with a missing value into text: `max()` then answers
`'NA'` and `IS NULL` finds nothing. Here every file is read as text first, and:

- **inference** (one aggregation over all rows, not a sample): a column whose values are all
  integers, numbers, booleans (`true`/`false`), dates or timestamps, apart from the
  missing-value markers (`read_options.DEFAULT_NULL_VALUES`), gets that type, in that order
  of preference. A column with a number written with a leading zero (`007`, a code) stays
  text, and so does a column with no value at all. A text column keeps its text: `NA`
  stays `'NA'` there (Namibia) unless it is one of `--text-null-value`;
- **conversion**: each value is parsed into its column's type (inferred or declared); a
  marker becomes null; a value that does not parse is not nulled quietly: its row gets a
  reason (`column dep_time: '5x7' is not a int`) and is a bad row (`bad_rows`), and so is a
  record the reader found malformed (wrong number of fields, broken JSON) and, in UTF
  encodings, text with bytes that were not valid in it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from spark_workers import read_options

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

#: The column holding why a row is bad (null or empty: the row is good).
REASON_COLUMN = "_bad_reason"
#: The lean frame's flag: the row is bad (its reason is built only where bad rows are read).
BAD_COLUMN = "_bad"
#: The source file of each row.
FILE_COLUMN = "_source_file"
#: Candidate types, most specific first.
CANDIDATES = ("int", "bigint", "double", "boolean", "date", "timestamp")
_DATE = r"^\d{4}-\d{2}-\d{2}$"
_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?(Z|[+-]\d{2}:?\d{2})?$"
_LEADING_ZERO = r"^[+-]?0\d"
_REPLACEMENT = "\ufffd"


def _parse(raw: Column, type_name: str, options: read_options.ReadOptions) -> Column:
    """`raw` parsed as `type_name`, null where it does not parse."""
    from pyspark.sql import functions as F  # noqa: N812

    if type_name == "date" and options.date_format:
        return F.call_function("try_to_date", raw, F.lit(options.date_format))
    if type_name in ("timestamp", "timestamp_ntz") and options.timestamp_format:
        parsed = F.call_function("try_to_timestamp", raw, F.lit(options.timestamp_format))
        return parsed.cast(type_name) if type_name == "timestamp_ntz" else parsed
    if type_name == "boolean":
        word = F.lower(F.trim(raw))
        return F.when(word == "true", True).when(word == "false", False)
    return raw.try_cast(type_name)


def _fails(raw: Column, type_name: str, options: read_options.ReadOptions) -> Column:
    """True where a present value is not of `type_name` as inference understands it."""
    from pyspark.sql import functions as F  # noqa: N812

    bad = _parse(raw, type_name, options).isNull()
    if type_name == "date" and not options.date_format:
        bad = bad | ~raw.rlike(_DATE)  # Spark's cast takes '2013' as a date: not here
    if type_name == "timestamp" and not options.timestamp_format:
        bad = bad | ~F.trim(raw).rlike(_TIMESTAMP)
    return bad


def _kind(raw: Column, options: read_options.ReadOptions) -> Column:
    """The most specific candidate type of one present value (its index in `CANDIDATES`,
    `len(CANDIDATES)` for text)."""
    from pyspark.sql import functions as F  # noqa: N812

    kind = F.when(~_fails(raw, CANDIDATES[0], options), 0)
    for index, type_name in enumerate(CANDIDATES[1:], start=1):
        kind = kind.when(~_fails(raw, type_name, options), index)
    return kind.otherwise(len(CANDIDATES))


#: Kinds that widen into one another: integers into numbers, dates into timestamps.
_CHAINS = ({0, 1, 2}, {3}, {4, 5})


def _choose(kinds: set[int], leading_zero: bool) -> str:
    if not kinds:
        return "string"  # no value at all: nothing says what it is
    for chain in _CHAINS:
        if kinds <= chain:
            widest = CANDIDATES[max(kinds)]
            if leading_zero and widest not in ("date", "timestamp"):
                return "string"  # 007, 01234: codes, not numbers
            return widest
    return "string"


@dataclasses.dataclass
class Inferred:
    """What inference found: the schema, the text columns holding missing-value markers
    (kept as text: the ingest says so, `--text-null-value` makes them missing), and those
    that would have been typed but for a few values."""

    schema: StructType
    text_markers: dict[str, int]
    #: Text columns whose values but a few (at most 1%) are of one type: (type, how many
    #: are not, values, an example). A typo in a number column, most likely.
    nearly_typed: dict[str, tuple[str, int, int, str]] = dataclasses.field(default_factory=dict)


def infer(df: DataFrame, columns: list[str], options: read_options.ReadOptions) -> Inferred:
    """The type of each text column of `df`, from all of its rows (one Spark query)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql import types as T  # noqa: N812

    good = df.where(F.col(read_options.CORRUPT_COLUMN).isNull()) if _has_corrupt(df) else df
    # One (column, value) row per cell: the kind of a value is one expression, compiled once
    # (per-column expressions side by side made generated code grow past what Janino
    # compiles quickly: 19 columns took 10x the time of 3).
    cells = good.select(
        F.explode(
            F.array(
                *[
                    F.struct(F.lit(i).alias("c"), F.col(f"`{n}`").alias("v"))
                    for i, n in enumerate(columns)
                ]
            )
        ).alias("cell")
    ).select("cell.c", "cell.v")
    raw = F.col("v")
    kind = _kind(raw, options)
    kept = [m for m in options.null_values if m and m not in options.text_null_values]
    marker = raw.isin(kept)
    present = raw.isNotNull() & ~raw.isin(list(options.null_values))
    rows = (
        cells.where(raw.isNotNull())
        .groupBy("c")
        .agg(
            F.collect_set(F.when(present, kind)).alias("k"),
            F.count_if(present & raw.rlike(_LEADING_ZERO)).alias("z"),
            F.count_if(marker).alias("m"),
            F.count_if(present).alias("n"),
            F.count_if(present & (kind == len(CANDIDATES))).alias("t"),
            F.first(F.when(present & (kind == len(CANDIDATES)), raw), ignorenulls=True).alias("e"),
        )
        .collect()
    )
    found = {row["c"]: row for row in rows}
    fields, markers, nearly = [], {}, {}
    for i, name in enumerate(columns):
        row = found.get(i)
        kinds = set(row["k"]) if row is not None else set()
        chosen = _choose(kinds, bool(row["z"]) if row is not None else False)
        fields.append(T.StructField(name, T._parse_datatype_string(chosen), True))
        if row is None or chosen != "string":
            continue
        if row["m"] and kinds:
            markers[name] = row["m"]
        typed = _choose(kinds - {len(CANDIDATES)}, bool(row["z"]))
        if typed != "string" and row["t"] * 100 <= row["n"]:
            nearly[name] = (typed, row["t"], row["n"], row["e"])
    return Inferred(T.StructType(fields), markers, nearly)


def convert(
    df: DataFrame, schema: StructType, options: read_options.ReadOptions, *, sources: bool = True
) -> DataFrame:
    """`df` (text columns named as `schema`'s) typed as `schema`. With `sources`: also
    `REASON_COLUMN` (why the row is bad, or empty), `FILE_COLUMN`, each value's text
    (`raw_columns`) and `CORRUPT_COLUMN` when present, which the bad rows are read with.
    Without: the lean frame the good rows are written from, `BAD_COLUMN` (a boolean) beside
    the typed values and nothing else: no text is built or copied for a row there.

    Ordered for the common row, every value of which parses: the markers are looked at only
    where a value did not parse (a marker that parses as the column's type, a sentinel such
    as `-999`, is compared with every value; the optimizer drops the others' comparison, a
    constant), and the reason's text is built only for a row with one."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql import types as T  # noqa: N812

    typed: list[Column] = []
    #: (condition, reason) per check of a value; the row is bad where any condition holds.
    checks: list[tuple[Column, Column]] = []
    checks_encoding = options.charset.startswith("UTF")
    markers = [F.lit(m) for m in options.null_values]
    for field in schema.fields:
        raw = F.col(f"`{field.name}`")
        type_name = field.dataType.simpleString()
        if isinstance(field.dataType, T.StringType):
            text_markers = list(options.text_null_values)
            value = F.when(raw.isin(text_markers), None).otherwise(raw) if text_markers else raw
            typed.append(value.alias(field.name))
            if checks_encoding:
                checks.append(
                    (
                        F.instr(raw, _REPLACEMENT) > 0,
                        F.lit(f"column {field.name}: not valid {options.charset}"),
                    )
                )
            continue
        parsed = _parse(raw, type_name, options)
        # A marker that parses (a sentinel) is nulled; one that does not is null already.
        sentinel = F.lit(False)
        for marker in markers:
            sentinel = sentinel | ((raw == marker) & _parse(marker, type_name, options).isNotNull())
        typed.append(F.when(sentinel, None).otherwise(parsed).alias(field.name))
        failed = parsed.isNull() & raw.isNotNull() & ~raw.isin(markers)
        shown = F.substring(raw, 1, 40)
        checks.append(
            (
                failed,
                F.concat(F.lit(f"column {field.name}: '"), shown, F.lit(f"' is not a {type_name}")),
            )
        )
    extra: list[Column] = []
    if _has_corrupt(df):
        corrupt = F.col(read_options.CORRUPT_COLUMN)
        what = f"not {len(schema.fields)} fields" if options.format == "csv" else "malformed JSON"
        checks.insert(0, (corrupt.isNotNull(), F.lit(f"malformed record ({what})")))
        if sources:
            extra.append(corrupt)
    bad = F.lit(False)
    for condition, _ in checks:
        bad = bad | condition
    if not sources:
        return df.select(*typed, bad.alias(BAD_COLUMN))
    reasons = [F.when(condition, text) for condition, text in checks]
    reason = F.when(bad, F.concat_ws("; ", *reasons)).otherwise(F.lit("")) if checks else F.lit("")
    raws = [F.col(f"`{f.name}`").alias(f"_raw_{i}") for i, f in enumerate(schema.fields)]
    return df.select(
        *typed,
        reason.alias(REASON_COLUMN),
        F.input_file_name().alias(FILE_COLUMN),
        *extra,
        *raws,
    )


def raw_columns(schema: StructType) -> list[str]:
    """The names `convert` gives the raw text of each column (for the quarantine)."""
    return [f"_raw_{i}" for i in range(len(schema.fields))]


def _has_corrupt(df: DataFrame) -> bool:
    return read_options.CORRUPT_COLUMN in df.columns


def type_names(schema: StructType) -> dict[str, str]:
    """Column -> type name, for messages and the manifest."""
    return {f.name: _simple(f.dataType) for f in schema.fields}


def _simple(data_type: DataType) -> str:
    return data_type.simpleString()
