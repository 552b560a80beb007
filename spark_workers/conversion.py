"""Typed values from raw text, and why a row is bad: each value is parsed into its column's
type (inferred or declared); a marker becomes null; a value that does not parse is not nulled
quietly: its row gets a reason (`column dep_time: '5x7' is not a int`) and is a bad row
(`bad_rows`), and so is a record the reader found malformed (wrong number of fields, broken
JSON) and, in UTF encodings, text with bytes that were not valid in it.

Three frames of the same rows: `convert` from text (the bad rows' frame with each value's
text and file, or the lean frame the good rows are written from), `convert_parsed` from a
CSV read whose columns Spark's parser typed where it types as the text path does
(`parser_typed`), and `convert_strict` from a strict read of the same.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spark_workers import read_options
from spark_workers.value_sql import in_list, may_parse, parse, sql_name, sql_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField, StructType

#: The column holding why a row is bad (null or empty: the row is good).
REASON_COLUMN = "_bad_reason"
#: The lean frame's flag: the row is bad (its reason is built only where bad rows are read).
BAD_COLUMN = "_bad"
#: The source file of each row.
FILE_COLUMN = "_source_file"
_REPLACEMENT = "\ufffd"


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
    constant, and `may_parse` leaves out those that cannot be one), and the reason's text
    is built only for a row with one.

    One `selectExpr` of SQL text: built with Column objects, the plan of 8 columns took
    3,170 calls into the JVM (0.6 s, a fifth of a plain read and write of 1M rows). Every
    literal is `sql_text` and every name `sql_name`: nothing a user gives is SQL syntax."""
    typed: list[str] = []
    #: (condition, reason) per check of a value, SQL; the row is bad where any holds.
    checks: list[tuple[str, str]] = []
    for field in schema.fields:
        value, found = _column(field, sql_name(field.name), options)
        typed.append(f"{value} AS {sql_name(field.name)}")
        checks += found
    extra: list[str] = []
    if has_corrupt(df):
        corrupt = sql_name(read_options.CORRUPT_COLUMN)
        checks.insert(0, (f"{corrupt} IS NOT NULL", _malformed(schema, options)))
        if sources:
            extra.append(corrupt)
    # The flag is never null (rows are kept where it is false): any condition true makes it
    # true, none makes it false, whatever a condition's nulls.
    bad = f"coalesce({' OR '.join(condition for condition, _ in checks) or 'false'}, false)"
    if not sources:
        return df.selectExpr(*typed, f"{bad} AS {BAD_COLUMN}")
    reasons = ", ".join(f"CASE WHEN {condition} THEN {text} END" for condition, text in checks)
    reason = f"CASE WHEN {bad} THEN concat_ws('; ', {reasons}) ELSE '' END" if checks else "''"
    raws = [f"{sql_name(f.name)} AS _raw_{i}" for i, f in enumerate(schema.fields)]
    return df.selectExpr(
        *typed,
        f"{reason} AS {REASON_COLUMN}",
        f"input_file_name() AS {FILE_COLUMN}",
        *extra,
        *raws,
    )


def _column(
    field: StructField,
    raw: str,
    options: read_options.ReadOptions,
) -> tuple[str, list[tuple[str, str]]]:
    """Column `field`'s typed value from its text `raw` (SQL), and the (condition, reason)
    pairs that make its row bad."""
    from pyspark.sql import types as T  # noqa: N812

    if isinstance(field.dataType, T.StringType):
        text_markers = options.text_null_values
        value = (
            f"CASE WHEN {in_list(raw, text_markers)} THEN NULL ELSE {raw} END"
            if text_markers
            else raw
        )
        if not options.charset.startswith("UTF"):
            return value, []
        reason = sql_text(f"column {field.name}: not valid {options.charset}")
        # Null-safe: a missing value (an empty field) is no encoding error (`NULL > 0` is
        # null, and a null flag once made a row with an empty text field vanish: neither
        # written nor counted as bad).
        return value, [(f"coalesce(instr({raw}, {sql_text(_REPLACEMENT)}) > 0, false)", reason)]
    type_name = field.dataType.simpleString()
    fmt = options.format_of(field.name)
    parsed = parse(raw, type_name, options, fmt)
    # A marker that parses (a sentinel) is nulled; one that does not is null already.
    sentinels = [
        f"({raw} = {sql_text(m)} AND {parse(sql_text(m), type_name, options, fmt)} IS NOT NULL)"
        for m in options.null_values
        if may_parse(m, type_name, options, fmt)
    ]
    value = (
        f"CASE WHEN {' OR '.join(sentinels)} THEN NULL ELSE {parsed} END" if sentinels else parsed
    )
    failed = f"({parsed} IS NULL AND {raw} IS NOT NULL AND NOT {in_list(raw, options.null_values)})"
    reason = (
        f"concat({sql_text(f'column {field.name}: ' + chr(39))}, substring({raw}, 1, 40), "
        f"{sql_text(chr(39) + f' is not a {type_name}')})"
    )
    return value, [(failed, reason)]


def _malformed(schema: StructType, options: read_options.ReadOptions) -> str:
    what = f"not {len(schema.fields)} fields" if options.format == "csv" else "malformed JSON"
    return sql_text(f"malformed record ({what})")


#: A missing-value marker Spark's CSV parser could read as a value of these types: their
#: columns are then left to the text path (which compares the marker's text).
_INTEGER_LIKE = re.compile(r"[+-]?\d+")


def reader_patterns(
    schema: StructType, options: read_options.ReadOptions
) -> tuple[str | None, str | None]:
    """The `dateFormat` and `timestampFormat` of the CSV read that types columns
    (`parser_typed`): a type's pattern when every column of that type is written in the same
    one (a column's own format, else `--date-format`/`--timestamp-format`), else None (the
    parser's default form: the columns with a pattern of their own stay on the text path)."""
    found: dict[str, set[str | None]] = {"date": set(), "timestamp": set()}
    for field in schema.fields:
        type_name = field.dataType.typeName()
        if type_name in found:
            fmt = options.format_of(field.name)
            default = options.date_format if type_name == "date" else options.timestamp_format
            found[type_name].add(fmt.pattern if fmt is not None and fmt.pattern else default)
    date, timestamp = (next(iter(p)) if len(p) == 1 else None for p in found.values())
    return date, timestamp


def parser_typed(
    schema: StructType, options: read_options.ReadOptions, *, ascii_digits: bool
) -> frozenset[str]:
    """The columns Spark's own CSV parser may type as it reads (`convert_parsed`): those of
    types for which it accepts no value the text path refuses, and reads every value both
    accept alike. tests/spark/test_parser_typed.py holds the differential test: integers,
    floating point and booleans qualify; Java's `parseInt` also takes non-ASCII digits
    (`٣`, `３`) where Spark's cast does not, so integers qualify only for a source with no
    such digit (`ascii_digits`). Dates and timestamps qualify in their default form (with
    no `--date-format` nor `--timestamp-format`, the parser's default reads a value with the
    cast's own function: `2013`, a zone, a fraction alike), and written in a pattern when
    every column of their type is written in that one (`reader_patterns`: the read's
    `dateFormat`/`timestampFormat`; the parser then reads with the formatter `try_to_date`
    and `try_to_timestamp` use, without its fallback to the default form). Other formats
    stay on the text path, as decimals do (they parse by locale, `1,000`). A column one of
    whose markers the parser could read as a value (a sentinel, `-999`, `NaN`, `2013`, any
    word for a pattern of month names) stays on the text path. Not for multi-line records
    nor other formats."""
    if options.format != "csv" or options.multiline:
        return frozenset()
    markers = [m.strip().lower() for m in options.null_values]
    date_pattern, timestamp_pattern = reader_patterns(schema, options)
    typed = set()
    for field in schema.fields:
        type_name = field.dataType.typeName()
        fmt = options.format_of(field.name)
        if fmt is not None and not (fmt.pattern and type_name in ("date", "timestamp")):
            continue  # written in a form of its own: the text path reads it
        if type_name in ("byte", "short", "integer", "long"):
            ok = ascii_digits and not any(_INTEGER_LIKE.fullmatch(m) for m in markers)
        elif type_name in ("float", "double"):
            ok = not any(re.search(r"\d|nan|inf", m) for m in markers)
        elif type_name == "boolean":
            ok = not any(m in ("true", "false") for m in markers)
        elif type_name in ("date", "timestamp"):
            own = fmt.pattern if fmt is not None else None
            read = date_pattern if type_name == "date" else timestamp_pattern
            default = options.date_format if type_name == "date" else options.timestamp_format
            ok = (own or default) == read and not any(
                may_parse(m, type_name, options, fmt) for m in options.null_values
            )
        else:
            ok = False
        if ok:
            typed.add(field.name)
    return frozenset(typed)


#: The struct of a flagged row's values as text, parsed again from its raw record.
TEXT_COLUMN = "_text"


def convert_parsed(
    df: DataFrame, schema: StructType, options: read_options.ReadOptions, typed: frozenset[str]
) -> DataFrame:
    """The lean frame of `convert` (typed values and `BAD_COLUMN`), from a CSV read whose
    `typed` columns Spark's parser typed (`parser_typed`), the others text, with
    `CORRUPT_COLUMN`. A row the parser could not type (`NA` in a number column, a space
    around a number, a wrong number of fields) has its raw record in `CORRUPT_COLUMN`: it is
    parsed again as text (`from_csv`, the reader's options) and converted as `convert` does,
    so it ends up as it would have on the text path: typed, nulled where a marker is, or
    bad with the same reason. Most rows of most files never take that path: their numbers
    are parsed once, by the reader, with no text made for them."""
    from pyspark.sql import functions as F  # noqa: N812

    corrupt = sql_name(read_options.CORRUPT_COLUMN)
    text_ddl = ", ".join(
        [f"{sql_name(f.name)} STRING" for f in schema.fields] + [f"{corrupt} STRING"]
    )
    csv = options.spark_options()
    parse_options = {
        key: csv[key] for key in ("sep", "quote", "escape", "columnNameOfCorruptRecord", "mode")
    }
    with_text = df.select(
        "*", F.from_csv(F.col(corrupt), text_ddl, parse_options).alias(TEXT_COLUMN)
    )
    values: list[str] = []
    good_checks: list[str] = []
    flagged_checks = [f"{TEXT_COLUMN}.{corrupt} IS NOT NULL"]
    for field in schema.fields:
        name = sql_name(field.name)
        again = f"{TEXT_COLUMN}.{name}"
        if field.name in typed:
            value, found = _column(field, again, options)
            values.append(f"CASE WHEN {corrupt} IS NULL THEN {name} ELSE {value} END AS {name}")
            flagged_checks += [condition for condition, _ in found]
            continue
        raw = f"(CASE WHEN {corrupt} IS NULL THEN {name} ELSE {again} END)"
        value, found = _column(field, raw, options)
        values.append(f"{value} AS {name}")
        good_checks += [condition for condition, _ in found]
    bad = " OR ".join(
        [f"({corrupt} IS NOT NULL AND ({' OR '.join(flagged_checks)}))", *good_checks]
    )
    return with_text.selectExpr(*values, f"coalesce({bad}, false) AS {BAD_COLUMN}")


def convert_strict(
    df: DataFrame, schema: StructType, options: read_options.ReadOptions, typed: frozenset[str]
) -> DataFrame:
    """The lean frame of `convert_parsed` from a strict read: Spark's parser typed the
    `typed` columns in FAILFAST mode with no corrupt-record column, so the read stops at
    the first row it cannot type (a marker, a wrong value, a wrong number of fields)
    instead of handing it on. Every row that comes through is one `convert_parsed` takes
    as read: its typed values as they are, the other columns converted from their text, and
    `BAD_COLUMN` from those columns' checks only."""
    values: list[str] = []
    checks: list[str] = []
    for field in schema.fields:
        name = sql_name(field.name)
        if field.name in typed:
            values.append(name)
            continue
        value, found = _column(field, name, options)
        values.append(f"{value} AS {name}")
        checks += [condition for condition, _ in found]
    bad = " OR ".join(checks) or "false"
    return df.selectExpr(*values, f"coalesce({bad}, false) AS {BAD_COLUMN}")


def raw_columns(schema: StructType) -> list[str]:
    """The names `convert` gives the raw text of each column (for the quarantine)."""
    return [f"_raw_{i}" for i in range(len(schema.fields))]


def has_corrupt(df: DataFrame) -> bool:
    return read_options.CORRUPT_COLUMN in df.columns
