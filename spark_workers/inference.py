"""Column types a data engineer can trust: from raw text to a schema.

Spark's own CSV inference types a column as a string as soon as one value is not a number,
so R's `NA` turns every numeric column with a missing value into text: `max()` then answers
`'NA'` and `IS NULL` finds nothing. Here every file is read as text first, and inference
(one aggregation over all rows, not a sample) gives a column whose values are all integers,
numbers, booleans (`true`/`false`), dates or timestamps, apart from the missing-value
markers (`read_options.DEFAULT_NULL_VALUES`), that type, in that order of preference. A
column with a number written with a leading zero (`007`, a code) stays text, and so does a
column with no value at all. A text column keeps its text: `NA` stays `'NA'` there
(Namibia) unless it is one of `--text-null-value`. The values are then typed by
`conversion`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from spark_workers import conversion, manifest, read_options, value_guess
from spark_workers.value_sql import fails, in_list, sql_name, sql_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

#: Candidate types, most specific first.
CANDIDATES = ("int", "bigint", "double", "boolean", "date", "timestamp")
_LEADING_ZERO = r"^[+-]?0\d"


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
    """`fails` of a value of a column with `candidate` formats (the default ones without)."""
    if candidate is None:
        return fails(raw, type_name, options)
    if type_name in ("date", "timestamp"):
        if not candidate.patterns or candidate.kind not in ("date", "timestamp"):
            return fails(raw, type_name, options)
        if type_name == "date" and candidate.kind == "timestamp":
            return "true"  # a pattern with a time: never a date
        tests = [
            fails(raw, type_name, options, read_options.ColumnFormat(pattern=p))
            for p in candidate.patterns
        ]
        return "(" + " AND ".join(tests) + ")"
    return fails(raw, type_name, options, candidate.fmt)


@dataclasses.dataclass(frozen=True)
class _Candidate:
    """A column's formats to try (`value_guess.Guess`): the type they were found for, its
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
    guesses: dict[str, value_guess.Guess] | None = None,
) -> Inferred:
    """The type of each text column of `df`, from all of its rows (one Spark query), the
    formats `guesses` (the sniffer's, from a sample) found tried for their columns.

    Its expressions are SQL text, not Column objects: PySpark makes several calls into the
    JVM for each Column operation, hundreds for one value's kind."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql import types as T  # noqa: N812

    good = df.where(f"{read_options.CORRUPT_COLUMN} IS NULL") if conversion.has_corrupt(df) else df
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
    present = f"(v IS NOT NULL AND NOT {in_list('v', options.null_values)})"
    # The kind of each present value is worked out once, in a projection, and counted by
    # the aggregates (written into each of them, its code was generated three times).
    text = f"(kind = {len(CANDIDATES)})"
    aggregates = [
        "collect_set(kind) AS k",
        f"count_if(kind IS NOT NULL AND v RLIKE {sql_text(_LEADING_ZERO)}) AS z",
        f"count_if({in_list('v', kept)}) AS m",
        "count_if(kind IS NOT NULL) AS n",
        f"count_if({text}) AS t",
        f"first(CASE WHEN {text} THEN v END, true) AS e",
    ]
    # A day/month order the sample left open: the values each order fails on.
    orders = {i: c for i, c in candidates.items() if len(c.patterns) == 2}
    for i, candidate in orders.items():
        for j, pattern in enumerate(candidate.patterns):
            failing = fails(
                "v", candidate.kind, options, read_options.ColumnFormat(pattern=pattern)
            )
            aggregates.append(f"count_if(c = {i} AND kind IS NOT NULL AND {failing}) AS o{i}_{j}")
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
    columns: list[str], options: read_options.ReadOptions, guesses: dict[str, value_guess.Guess]
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


def type_names(schema: StructType) -> dict[str, str]:
    """Column -> type name, for messages and the manifest."""
    return {f.name: _simple(f.dataType) for f in schema.fields}


def _simple(data_type: DataType) -> str:
    return data_type.simpleString()
