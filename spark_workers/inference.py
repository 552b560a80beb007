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
import re
from typing import TYPE_CHECKING

from spark_workers import manifest, read_options, sniffing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructField, StructType

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


#: Text written as a plain SQL literal: letters, digits and a few signs, none of which ends
#: or escapes one. Anything else is hex (a plain literal parses and plans faster).
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9 _./:+=,;-]*")


def sql_text(value: str) -> str:
    """`value` as a Spark SQL string literal that no character of it can end or escape
    (markers, formats and messages come from users): quoted as it is when every character
    is one of `_PLAIN_TEXT`'s (allowed, not escaped), else its UTF-8 bytes in hex, cast to
    text."""
    if _PLAIN_TEXT.fullmatch(value):
        return f"'{value}'"
    return f"CAST(X'{value.encode().hex()}' AS STRING)"


def sql_name(name: str) -> str:
    """A column name as a SQL identifier (`read_options.check_columns` refuses backticks;
    doubled anyway)."""
    return "`" + name.replace("`", "``") + "`"


def _in(raw: str, values: list[str] | tuple[str, ...]) -> str:
    """`raw IN (values)` in SQL, false for no values."""
    if not values:
        return "false"
    return f"{raw} IN ({', '.join(sql_text(v) for v in values)})"


def _parse(
    raw: str,
    type_name: str,
    options: read_options.ReadOptions,
    fmt: read_options.ColumnFormat | None = None,
) -> str:
    """`raw` (SQL) parsed as `type_name`, null where it does not parse; written as `fmt`
    says where the column has a format of its own."""
    pattern = fmt.pattern if fmt is not None else None
    if type_name == "date" and (pattern or options.date_format):
        return f"try_to_date({raw}, {sql_text(pattern or options.date_format or '')})"
    if type_name in ("timestamp", "timestamp_ntz") and (pattern or options.timestamp_format):
        chosen = pattern or options.timestamp_format or ""
        parsed = f"try_to_timestamp({raw}, {sql_text(chosen)})"
        return f"CAST({parsed} AS TIMESTAMP_NTZ)" if type_name == "timestamp_ntz" else parsed
    if type_name == "boolean":
        words = (
            (TRUE_WORDS, FALSE_WORDS) if fmt is not None and fmt.words else (("true",), ("false",))
        )
        cases = " ".join(
            f"WHEN {sql_text(w)} THEN {value}"
            for value, spelled in zip(("true", "false"), words, strict=True)
            for w in spelled
        )
        return f"CASE lower(trim({raw})) {cases} END"
    if fmt is not None and (fmt.decimal != "." or fmt.thousands) and _is_number(type_name):
        return _number(raw, type_name, fmt)
    return f"try_cast({raw} AS {type_name})"


#: Booleans as R, spreadsheets and DuckDB write them (any case), with a `words` format.
TRUE_WORDS = ("true", "t", "yes")
FALSE_WORDS = ("false", "f", "no")


def same_family(type_name: str, guessed: str) -> bool:
    """Whether a declared type (Spark's `typeName`) takes the format of a guessed one."""
    numbers = ("byte", "short", "integer", "long", "float", "double", "decimal")
    if guessed in ("int", "double"):
        return type_name in numbers or type_name.startswith("decimal")
    return type_name == guessed


def _is_number(type_name: str) -> bool:
    return type_name in ("tinyint", "smallint", "int", "bigint", "float", "double") or (
        type_name.startswith("decimal")
    )


def _number(raw: str, type_name: str, fmt: read_options.ColumnFormat) -> str:
    """`raw` as a number written with `fmt`'s separators (`1.234,5`): only where every
    group of digits is where a thousands separator puts them, then the separators
    translated to Spark's form."""
    digits = r"\d+"
    if fmt.thousands:
        digits = rf"(\d+|\d{{1,3}}({re.escape(fmt.thousands)}\d{{3}})+)"
    decimal = re.escape(fmt.decimal)
    integral = type_name in ("tinyint", "smallint", "int", "bigint")
    shape = (
        f"^[+-]?{digits}$"
        if integral
        else rf"^[+-]?({digits}({decimal}\d*)?|{decimal}\d+)([eE][+-]?\d+)?$"
    )
    value = f"trim({raw})"
    translated = f"translate({value}, {sql_text(fmt.decimal + (fmt.thousands or ''))}, '.')"
    return (
        f"CASE WHEN {value} RLIKE {sql_text(shape)} THEN try_cast({translated} AS {type_name}) END"
    )


def _fails(
    raw: str,
    type_name: str,
    options: read_options.ReadOptions,
    fmt: read_options.ColumnFormat | None = None,
) -> str:
    """True where a present value is not of `type_name` as inference understands it."""
    bad = f"{_parse(raw, type_name, options, fmt)} IS NULL"
    pattern = fmt.pattern if fmt is not None else None
    if type_name == "date" and not (options.date_format or pattern):
        bad += f" OR NOT {raw} RLIKE {sql_text(_DATE)}"  # Spark's cast takes '2013' as a date
    if type_name == "timestamp" and not (options.timestamp_format or pattern):
        bad += f" OR NOT trim({raw}) RLIKE {sql_text(_TIMESTAMP)}"
    return f"({bad})"


def _kind(raw: str, options: read_options.ReadOptions, candidate: _Candidate | None = None) -> str:
    """The most specific candidate type of one present value (its index in `CANDIDATES`,
    `len(CANDIDATES)` for text), `candidate`'s formats tried where the column has some."""
    cases = " ".join(
        f"WHEN NOT {_test(raw, type_name, options, candidate)} THEN {index}"
        for index, type_name in enumerate(CANDIDATES)
    )
    return f"CASE {cases} ELSE {len(CANDIDATES)} END"


def _test(
    raw: str, type_name: str, options: read_options.ReadOptions, candidate: _Candidate | None
) -> str:
    """`_fails` of a value of a column with `candidate` formats (the default ones without)."""
    if candidate is None:
        return _fails(raw, type_name, options)
    if type_name in ("date", "timestamp"):
        if not candidate.patterns or candidate.kind not in ("date", "timestamp"):
            return _fails(raw, type_name, options)
        if type_name == "date" and candidate.kind == "timestamp":
            return "true"  # a pattern with a time: never a date
        tests = [
            _fails(raw, type_name, options, read_options.ColumnFormat(pattern=p))
            for p in candidate.patterns
        ]
        return "(" + " AND ".join(tests) + ")"
    return _fails(raw, type_name, options, candidate.fmt)


@dataclasses.dataclass(frozen=True)
class _Candidate:
    """A column's formats to try (`sniffing.Guess`): the type they were found for, its
    date or timestamp patterns (two: a day/month order to decide), its number and boolean
    format."""

    kind: str
    patterns: tuple[str, ...]
    fmt: read_options.ColumnFormat | None


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
    #: The format of each typed column written other than in the default form.
    formats: dict[str, read_options.ColumnFormat] = dataclasses.field(default_factory=dict)
    #: Text columns that look like dates, and why they stayed text (with the option that
    #: types them).
    date_text: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Present (non-missing) values per column, all rows.
    values: dict[str, int] = dataclasses.field(default_factory=dict)


def infer(
    df: DataFrame,
    columns: list[str],
    options: read_options.ReadOptions,
    guesses: dict[str, sniffing.Guess] | None = None,
) -> Inferred:
    """The type of each text column of `df`, from all of its rows (one Spark query), the
    formats `guesses` (the sniffer's, from a sample) found tried for their columns.

    Its expressions are SQL text, not Column objects: PySpark makes several calls into the
    JVM for each Column operation, hundreds for one value's kind."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql import types as T  # noqa: N812

    good = df.where(f"{read_options.CORRUPT_COLUMN} IS NULL") if _has_corrupt(df) else df
    candidates = _candidates(columns, options, guesses or {})
    # One (column, value) row per cell: the kind of a value is one expression, compiled once
    # (per-column expressions side by side made generated code grow past what Janino
    # compiles quickly: 19 columns took 10x the time of 3). Only the columns with formats
    # of their own get a branch of their own.
    cells = ", ".join(f"named_struct('c', {i}, 'v', {sql_name(n)})" for i, n in enumerate(columns))
    special = " ".join(
        f"WHEN {i} THEN {_kind('v', options, candidate)}" for i, candidate in candidates.items()
    )
    kind = f"CASE c {special} ELSE {_kind('v', options)} END" if special else _kind("v", options)
    kept = [m for m in options.null_values if m and m not in options.text_null_values]
    present = f"(v IS NOT NULL AND NOT {_in('v', options.null_values)})"
    # The kind of each present value is worked out once, in a projection, and counted by
    # the aggregates (written into each of them, its code was generated three times).
    text = f"(kind = {len(CANDIDATES)})"
    aggregates = [
        "collect_set(kind) AS k",
        f"count_if(kind IS NOT NULL AND v RLIKE {sql_text(_LEADING_ZERO)}) AS z",
        f"count_if({_in('v', kept)}) AS m",
        "count_if(kind IS NOT NULL) AS n",
        f"count_if({text}) AS t",
        f"first(CASE WHEN {text} THEN v END, true) AS e",
    ]
    # A day/month order the sample left open: the values each order fails on.
    orders = {i: c for i, c in candidates.items() if len(c.patterns) == 2}
    for i, candidate in orders.items():
        for j, pattern in enumerate(candidate.patterns):
            fails = _fails("v", candidate.kind, options, read_options.ColumnFormat(pattern=pattern))
            aggregates.append(f"count_if(c = {i} AND kind IS NOT NULL AND {fails}) AS o{i}_{j}")
    rows = (
        good.selectExpr(f"explode(array({cells})) AS cell")
        .selectExpr("cell.c AS c", "cell.v AS v")
        .where("v IS NOT NULL")
        .selectExpr("c", "v", f"CASE WHEN {present} THEN {kind} END AS kind")
        .groupBy("c")
        .agg(*[F.expr(a) for a in aggregates])
        .collect()
    )
    found = {row["c"]: row for row in rows}
    order_fails = {
        (i, j): sum(int(r[f"o{i}_{j}"] or 0) for r in rows) for i in orders for j in (0, 1)
    }
    result = Inferred(T.StructType([]), {})
    fields = []
    for i, name in enumerate(columns):
        row = found.get(i)
        kinds = set(row["k"]) if row is not None else set()
        chosen = _choose(kinds, bool(row["z"]) if row is not None else False)
        result.values[name] = int(row["n"]) if row is not None else 0
        if (found_format := candidates.get(i)) is not None and chosen != "string":
            chosen = _with_format(result, name, chosen, found_format, order_fails, i)
        elif i not in candidates and (guess := (guesses or {}).get(name)) and guess.why_text:
            result.date_text[name] = f"{guess.why_text}; {_typing_option(name)}"
        why = result.date_text.get(name)
        metadata = {manifest.TEXT_DATES_METADATA: why} if why and chosen == "string" else None
        fields.append(T.StructField(name, T._parse_datatype_string(chosen), True, metadata))
        if row is None or chosen != "string":
            continue
        if row["m"] and kinds:
            result.text_markers[name] = row["m"]
        typed = _choose(kinds - {len(CANDIDATES)}, bool(row["z"]))
        if typed != "string" and row["t"] * 100 <= row["n"]:
            result.nearly_typed[name] = (typed, row["t"], row["n"], row["e"])
    result.schema = T.StructType(fields)
    return result


def _candidates(
    columns: list[str], options: read_options.ReadOptions, guesses: dict[str, sniffing.Guess]
) -> dict[int, _Candidate]:
    """The columns whose values the sample found written in a form of their own, by index;
    a `--date-format` or `--timestamp-format` given is the only pattern of its type."""
    found = {}
    for i, name in enumerate(columns):
        guess = guesses.get(name)
        if guess is None:
            continue
        patterns = tuple(p for p in guess.patterns if p)
        if guess.type == "date" and options.date_format:
            patterns = ()
        if guess.type == "timestamp" and options.timestamp_format:
            patterns = ()
        fmt = guess.column_format("")
        if patterns or fmt is not None:
            found[i] = _Candidate(guess.type, patterns, fmt)
    return found


def _with_format(
    result: Inferred,
    name: str,
    chosen: str,
    candidate: _Candidate,
    order_fails: dict[tuple[int, int], int],
    index: int,
) -> str:
    """`chosen` (a type) with the column's format recorded; text where the day/month order
    is not decided by the data (the reason recorded)."""
    if chosen in ("date", "timestamp") and candidate.patterns:
        patterns = candidate.patterns
        if len(patterns) == 2:
            fits = [p for j, p in enumerate(patterns) if not order_fails[(index, j)]]
            if len(fits) != 1:
                why = (
                    "its dates read either way round (no day past 12): "
                    if fits
                    else "its dates are written both day first and month first: "
                )
                result.date_text[name] = why + _typing_option(name, patterns, chosen)
                return "string"
            patterns = (fits[0],)
        result.formats[name] = read_options.ColumnFormat(pattern=patterns[0])
    elif chosen in ("int", "bigint", "double") and candidate.fmt is not None:
        if candidate.fmt.decimal != "." or candidate.fmt.thousands:
            result.formats[name] = read_options.ColumnFormat(
                decimal=candidate.fmt.decimal, thousands=candidate.fmt.thousands
            )
    elif chosen == "boolean" and candidate.fmt is not None and candidate.fmt.words:
        result.formats[name] = read_options.ColumnFormat(words=True)
    return chosen


def _typing_option(name: str, patterns: tuple[str, ...] = (), kind: str = "date") -> str:
    """The ingest options that type column `name` as dates."""
    if patterns:
        given = " or ".join(f"--{kind}-format '{p}'" for p in patterns)
        return f"{given} types it"
    return f"--schema with `{name}` DATE and its --date-format types it"


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
    constant, and `_may_parse` leaves out those that cannot be one), and the reason's text
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
    if _has_corrupt(df):
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


#: Words Spark's date and timestamp parsers have read as values (in some versions).
_SPECIAL_MOMENTS = ("epoch", "now", "today", "yesterday", "tomorrow")

#: Datetime pattern letters whose field may be written in letters (month and day names,
#: eras, AM/PM, zones, quarters by name): `MMM`, `LLL`, `E`, `G`, `a`, `B`, `z`, `V`, `O`,
#: `X`/`x` (`Z`), `QQQ`. A pattern without them reads digits and punctuation only.
_WORD_FIELDS = re.compile(r"[MLQq]{3,}|[EGaBzVOXxZ]")


def _unquoted(pattern: str) -> str:
    """A datetime pattern without its quoted literals (`'T'`, `'at'`)."""
    return re.sub(r"'[^']*'", "", pattern)


def _may_parse(
    marker: str,
    type_name: str,
    options: read_options.ReadOptions,
    fmt: read_options.ColumnFormat | None = None,
) -> bool:
    """False when missing-value marker `marker` cannot be a value of `type_name` whatever
    Spark's parser does: ASCII text with no digit is no number, date nor timestamp (nor
    `NaN`, `Infinity`), and no boolean unless it spells one. Any other marker is asked to
    Spark, in the plan (`_column`): a sentinel, `-999`. The bench's 8 columns with the six
    default markers: a plan of 2.4 kB of SQL instead of 7.5."""
    if not marker.isascii():
        return True
    lower = marker.lower()
    if type_name == "boolean":
        words = fmt is not None and fmt.words and lower.strip() in TRUE_WORDS + FALSE_WORDS
        return "true" in lower or "false" in lower or words
    if type_name in ("date", "timestamp", "timestamp_ntz"):
        patterns = [
            fmt.pattern if fmt is not None else None,
            options.date_format,
            options.timestamp_format,
        ]
        if any(p is not None and _WORD_FIELDS.search(_unquoted(p)) for p in patterns):
            return True  # a pattern of words (month names, AM/PM, zones) needs no digit
        return any(c.isdigit() for c in marker) or any(w in lower for w in _SPECIAL_MOMENTS)
    if any(c.isdigit() for c in marker):
        return True
    if type_name in ("float", "double"):
        return "inf" in lower or "nan" in lower
    return type_name not in ("tinyint", "smallint", "int", "bigint") and not type_name.startswith(
        "decimal"
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
            f"CASE WHEN {_in(raw, text_markers)} THEN NULL ELSE {raw} END" if text_markers else raw
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
    parsed = _parse(raw, type_name, options, fmt)
    # A marker that parses (a sentinel) is nulled; one that does not is null already.
    sentinels = [
        f"({raw} = {sql_text(m)} AND {_parse(sql_text(m), type_name, options, fmt)} IS NOT NULL)"
        for m in options.null_values
        if _may_parse(m, type_name, options, fmt)
    ]
    value = (
        f"CASE WHEN {' OR '.join(sentinels)} THEN NULL ELSE {parsed} END" if sentinels else parsed
    )
    failed = f"({parsed} IS NULL AND {raw} IS NOT NULL AND NOT {_in(raw, options.null_values)})"
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
                _may_parse(m, type_name, options, fmt) for m in options.null_values
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


def _has_corrupt(df: DataFrame) -> bool:
    return read_options.CORRUPT_COLUMN in df.columns


def type_names(schema: StructType) -> dict[str, str]:
    """Column -> type name, for messages and the manifest."""
    return {f.name: _simple(f.dataType) for f in schema.fields}


def _simple(data_type: DataType) -> str:
    return data_type.simpleString()
