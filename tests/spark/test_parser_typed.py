"""Spark's own CSV parser types some columns as it reads (`conversion.parser_typed`,
`convert_parsed`): the written rows must be exactly what the text path makes
(`conversion.convert`), value by value and bad row by bad row. A differential test over
the values where parsers disagree (spaces around numbers, signs, leading zeros, exponents,
Java's `1.5d` and hex floats, `NaN`/`Inf` in every spelling, overflow, non-ASCII digits,
booleans in case and with spaces, markers, wrong field counts, invalid UTF-8) and a real
dataset with `NA`s; the source scan that keeps integers on the text path when a digit
other than ASCII's is in the file; and markers that would parse as values (sentinels).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from spark_workers import conversion, manifest, read_options, source_read, typed_frames, value_sql
from tests.spark import real_data

EDGES = [
    "3", "+3", "-3", " 3", "3 ", "3\t", "007", "-0", "3.0", "1e3", "0x10", "1_000", "1,000",
    "2147483648", "9223372036854775808", "-129", "40000", "\u00a03", "\u22123", "1.5", "1.5d",
    "1.5f", "0x1p3", "NaN", "nan", "Inf", "-Inf", "+Inf", "Infinity", "inf", "-infinity",
    " 1.5", "1.5 ", "1e309", "1e-400", "1,5", ".5", "5.", "+.5", "1e", "--1", "true", "TRUE",
    " true", "False", "t", "1", "yes", "", "NA", "N/A", "NULL", "null", "\\N", "na", "1L",
    "2013", "2013-01", "2013-1-1", "2013-01-01", " 2013-01-01", "2013-01-01 ", "20130101",
    "2013-02-30", "2013-13-01", "+2013-01-01", "-0001-01-01", "0001-01-01", "9999-12-31",
    "10000-01-01", "2013-01-01T05:00", "2013-01-01 05:00:00", "2013-01-01T05:00:00Z",
    "2013-01-01 05:00:00.123456789", "2013-01-01 05:00:00+01:00", "2013-01-01 05:00:00 +0100",
    "2013-01-01 05:00:00GMT", "2013-01-01 05:00:00 GMT", "2013-01-01T05:00:00GMT+01:00",
    "2013-01-01 05:00:00 UTC", "2013-01-01 05:00:00 Europe/Paris", "2013-01-01 24:00:00",
    "2013-01-01 05:60:00", "2013-01-01T", "T05:00:00", "05:00:00", "1/1/2013", "01/01/2013",
    "Jan 1 2013", "2013-01-01 5:0:0", "2013-01-01 05:00:00.", "2013-01-01 05:00:00,5",
    "epoch", "now", "today", "1356998400",
]  # fmt: skip
TYPES = [
    "INT", "BIGINT", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "BOOLEAN", "DATE", "TIMESTAMP",
    "STRING",
]  # fmt: skip
DDL = "n INT, " + ", ".join(f"c{i} {t}" for i, t in enumerate(TYPES))
GOOD = ["1", "1", "1", "1", "1.5", "1.5", "true", "2013-01-01", "2013-01-01 05:00:00", "x"]


def _write_edges(path: Path) -> None:
    """One row per (edge value, column): the value in that column, good values around it;
    then rows with a field too many or too few, and one with invalid UTF-8."""
    lines = ["n," + ",".join(f"c{i}" for i in range(len(TYPES)))]
    n = 0
    for value in EDGES:
        quoted = '"' + value.replace('"', '""') + '"' if "," in value else value
        for column in range(len(TYPES)):
            fields = list(GOOD)
            fields[column] = quoted
            lines.append(f"{n}," + ",".join(fields))
            n += 1
    lines.append(f"{n}," + ",".join(GOOD) + ",extra")
    lines.append(f"{n + 1}," + ",".join(GOOD[:-1]))
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data + f"{n + 2},1,1,1,1,1.5,1.5,true,".encode() + b"\xff\xfe\n")


def _rows(df: Any) -> list[tuple[Any, ...]]:
    """The rows of `df`, sorted; dates and timestamps as Spark's text (Python's datetime
    ends at year 9999, Spark's cast reads `40000` as a date)."""
    df = df.selectExpr(
        *[
            f"CAST(`{name}` AS STRING) AS `{name}`"
            if kind in ("date", "timestamp")
            else f"`{name}`"
            for name, kind in df.dtypes
        ]
    )

    def plain(value: Any) -> Any:
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    return sorted(
        (tuple(plain(v) for v in row) for row in df.collect()),
        key=lambda row: (row[0] is None, row[0] if row[0] is not None else -1, repr(row)),
    )


def _both_ways(
    spark: Any, src: Path, schema: Any, options: read_options.ReadOptions
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], frozenset[str]]:
    """The rows by the text path, the rows as the ingest makes them, and the columns the
    parser typed there."""
    text, _ = source_read.read_text(spark, str(src), options, schema)
    by_text = conversion.convert(text, schema, options, sources=False)
    ascii_digits = typed_frames.no_other_digits(str(src), options)
    typed = conversion.parser_typed(schema, options, ascii_digits=ascii_digits)
    frames = typed_frames.typed(spark, str(src), options, schema, lambda: text)
    return _rows(by_text), _rows(frames.full()), typed


def test_the_parser_types_what_the_text_path_types_value_by_value(
    spark: Any, tmp_path: Path
) -> None:
    src = tmp_path / "edges.csv"
    _write_edges(src)
    options = read_options.ReadOptions(schema_ddl=DDL)
    schema = read_options.parse_schema(spark, DDL)

    by_text, by_parser, typed = _both_ways(spark, src, schema, options)

    assert typed == {"n", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"}  # the parser
    assert len(by_text) == len(EDGES) * len(TYPES) + 3
    assert by_parser == by_text
    bad = [row for row in by_text if row[-1]]
    assert 0 < len(bad) < len(by_text)  # both sides had bad rows and good ones to agree on


def test_a_digit_other_than_asciis_keeps_integers_on_the_text_path(
    spark: Any, tmp_path: Path
) -> None:
    """Java's `parseInt` reads `٣` and `３` as 3; Spark's cast, and so the text path, refuses
    them (a bad row). The source scan finds such a digit anywhere in the file, in UTF-8 and
    in UTF-16, and the integers are then read as text: the same rows either way."""
    options = read_options.ReadOptions(schema_ddl="a INT, b DOUBLE, t STRING")
    schema = read_options.parse_schema(spark, "a INT, b DOUBLE, t STRING")
    for digit in ("\u0663", "\uff13", "\u0969"):  # Arabic-Indic, fullwidth, Devanagari
        src = tmp_path / f"digits-{ord(digit)}.csv"
        src.write_text(f"a,b,t\n1,1.5,x\n{digit},2.5,y\n3,3.5,caf\u00e9\n", encoding="utf-8")
        assert not typed_frames.no_other_digits(str(src), options)
        by_text, by_parser, typed = _both_ways(spark, src, schema, options)
        assert typed == {"b"} and by_parser == by_text
        assert [(row[0], row[-1]) for row in by_text] == [(1, False), (3, False), (None, True)]
    plain = tmp_path / "plain.csv"
    plain.write_text("a,b,t\n1,1.5,caf\u00e9\n", encoding="utf-8")
    assert typed_frames.no_other_digits(str(plain), options)  # non-ASCII text, no other digit
    wide = tmp_path / "wide.csv"
    wide.write_text("a,b,t\n\u0663,1.5,x\n", encoding="utf-16")
    utf16 = read_options.ReadOptions(schema_ddl="a INT, b DOUBLE, t STRING", encoding="utf-16")
    assert not typed_frames.no_other_digits(str(wide), utf16)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 64])
def test_the_digit_scan_finds_a_digit_across_its_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """The scan reads a file in blocks (4 MB): a digit whose bytes a block boundary splits,
    after blocks of ASCII only and of other non-ASCII text, is found in UTF-8 and in UTF-16
    (odd block sizes split its code units too); a file without one passes."""
    monkeypatch.setattr(typed_frames, "_BLOCK", block)
    for encoding in ("utf-8", "utf-16"):
        options = read_options.ReadOptions(schema_ddl="a INT, t STRING", encoding=encoding)
        head = "a,t\n" + "1,x\n" * 20 + "2,caf\u00e9 \u00fcber\n"
        src = tmp_path / f"split-{encoding}-{block}.csv"
        src.write_text(head + "\u0969,y\n", encoding=encoding)
        assert not typed_frames.no_other_digits(str(src), options)
        clean = tmp_path / f"clean-{encoding}-{block}.csv"
        clean.write_text(head + "3,y\n", encoding=encoding)
        assert typed_frames.no_other_digits(str(clean), options)


def test_a_marker_the_parser_could_read_keeps_its_columns_on_the_text_path(
    spark: Any, tmp_path: Path
) -> None:
    schema = read_options.parse_schema(spark, "a INT, b DOUBLE, c BOOLEAN")
    sentinels = read_options.ReadOptions(null_values=("-999", "NaN", "FALSE", "NA"))
    assert conversion.parser_typed(schema, sentinels, ascii_digits=True) == frozenset()
    words = read_options.ReadOptions(null_values=("NA", "missing"))
    assert conversion.parser_typed(schema, words, ascii_digits=True) == {"a", "b", "c"}
    src = tmp_path / "s.csv"
    src.write_text("a,b,c\n-999,NaN,FALSE\n1,2.5,true\nNA,missing,NA\n")
    for options in (sentinels, words):
        by_text, by_parser, _ = _both_ways(spark, src, schema, options)
        assert by_parser == by_text
    by_text, _, _ = _both_ways(spark, src, schema, sentinels)
    # The sentinels nulled; `missing` is no marker there: a bad row.
    assert sorted(by_text, key=repr) == [
        (1, 2.5, True, False),
        (None, None, None, False),
        (None, None, None, True),
    ]


def test_real_flights_with_nas_are_the_same_rows_either_way(spark: Any, tmp_path: Path) -> None:
    src = real_data.flights_csv(tmp_path / "flights.csv")
    ddl = (
        "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay DOUBLE,"
        " arr_time INT, sched_arr_time INT, arr_delay DOUBLE, carrier STRING, flight INT,"
        " tailnum STRING, origin STRING, dest STRING, air_time DOUBLE, distance DOUBLE,"
        " hour INT, minute INT, time_hour TIMESTAMP"
    )
    options = read_options.ReadOptions(schema_ddl=ddl)
    schema = read_options.parse_schema(spark, ddl)
    assert manifest.source_paths(str(src)) is not None

    by_text, by_parser, typed = _both_ways(spark, src, schema, options)

    assert {"dep_time", "time_hour"} <= typed
    assert by_parser == by_text
    nulls = sum(1 for row in by_text if row[3] is None)
    assert nulls > 0  # the NAs of dep_time were met, and nulled the same way


MARKER_EDGES = [
    *EDGES, "n/a", "none", "-", "--", ".", "?", "missing", "-999", "9999", "#N/A", "NaN%",
    "epoch", "now", "today", "Jan", "T", "Z", "2013", "2013-01-01", "0001-01-01 00:00:00",
    "１２", "٣", "\u00a0", "infinite", "true-ish", "FALSE!", "None", "nil", "N", "Y",
]  # fmt: skip
MARKER_TYPES = [
    "tinyint", "smallint", "int", "bigint", "float", "double", "decimal(10,2)", "date",
    "timestamp", "timestamp_ntz", "boolean",
]  # fmt: skip


def test_a_marker_left_out_of_the_plan_never_parses(spark: Any) -> None:
    """`_may_parse` leaves a missing-value marker out of a column's sentinel test only where
    Spark's own parse of it is null, for every type, default formats and custom ones."""
    for options in (
        read_options.ReadOptions(),
        read_options.ReadOptions(date_format="yyyy/MM/dd", timestamp_format="dd MMM yyyy HH:mm"),
    ):
        pairs = [
            (marker, type_name)
            for marker in MARKER_EDGES
            for type_name in MARKER_TYPES
            if not value_sql.may_parse(marker, type_name, options)
        ]
        assert len(pairs) > len(MARKER_TYPES) * 5  # the filter does leave markers out
        tests = ", ".join(
            f"{value_sql.parse(value_sql.sql_text(m), t, options)} IS NOT NULL" for m, t in pairs
        )
        row = spark.sql(f"SELECT array({tests})").collect()[0][0]
        parsed = [pair for pair, parses in zip(pairs, row, strict=True) if parses]
        assert parsed == []


def test_dates_and_timestamps_in_other_digits_are_typed_alike(spark: Any, tmp_path: Path) -> None:
    """Dates and timestamps are parser-typed whatever digits the source holds (the digit
    scan is for integers): a date or time written in Arabic-Indic, fullwidth or Devanagari
    digits is read the same way by Spark's parser and by the text path's cast."""
    ddl = "d DATE, t TIMESTAMP, s STRING"
    options = read_options.ReadOptions(schema_ddl=ddl)
    schema = read_options.parse_schema(spark, ddl)
    src = tmp_path / "digits.csv"
    rows = ["d,t,s", "2013-01-01,2013-01-01 05:00:00,ok"]
    for zero in ("\u0660", "\uff10", "\u0966"):
        digit = {str(i): chr(ord(zero) + i) for i in range(10)}
        date = "".join(digit.get(c, c) for c in "2013-01-02")
        moment = "".join(digit.get(c, c) for c in "2013-01-02 06:07:08")
        rows += [f"{date},2013-01-01 05:00:00,d", f"2013-01-01,{moment},t"]
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")

    by_text, by_parser, typed = _both_ways(spark, src, schema, options)

    assert typed == {"d", "t"}
    assert by_parser == by_text and len(by_text) == 7


#: Spellings around patterned dates and timestamps: padding, a month 13, a day 30 of
#: February, spaces, signs, years of other widths, the other separator, ISO forms, other
#: digits, markers, times without seconds or with them, 12-hour times.
PATTERNED_EDGES = [
    "2012/01/01", "2012/1/1", "2012/12/31", "2012/13/01", "2012/02/30", "2012/02/29",
    "2013/02/29", " 2012/01/01", "2012/01/01 ", "+2012/01/01", "-2012/01/01", "12/1/1",
    "02012/01/01", "2012/001/01", "2012-01-01", "2012/01/01T00:00", "20120101", "2012/1",
    "1/1/2012", "01/01/2012", "31/12/2012", "12/31/2012", "1.1.2012",
    "\u0662\u0660\u0661\u0662/1/1",
    "2012/1/1 5:00", "2012/1/1 05:00", "2012/1/1 5:00:00", "2012/1/1 24:00", "2012/1/1 5:60",
    "2012/1/1 5:00 PM", "1/1/2012 5:00", "1/1/2012 12:00 AM", "1/1/2012 12:00 PM",
    "13/1/2012 5:00", "1/1/2012 5:00 pm", "1/1/2012 13:00 PM", "", "NA", "NULL", "-", "epoch",
    "now", "today", "x",
]  # fmt: skip


@pytest.mark.parametrize(
    ("date", "timestamp"),
    [("yyyy/M/d", "yyyy/M/d H:mm"), ("d/M/yyyy", "d/M/yyyy H:mm"), ("M/d/yyyy", "M/d/yyyy h:mm a")],
)
def test_patterned_dates_and_timestamps_are_typed_by_the_parser_as_by_the_text_path(
    spark: Any, tmp_path: Path, date: str, timestamp: str
) -> None:
    """Columns whose values are written in a pattern (the sniffer's `formats`, or
    `--date-format`/`--timestamp-format`) are typed by Spark's parser with that pattern as
    the read's `dateFormat`/`timestampFormat` when every column of their type has it; the
    rows are those of the text path's `try_to_date`/`try_to_timestamp`, value by value."""
    ddl = "n INT, d DATE, e DATE, t TIMESTAMP, s STRING"
    formats = {
        "d": read_options.ColumnFormat(pattern=date),
        "e": read_options.ColumnFormat(pattern=date),
        "t": read_options.ColumnFormat(pattern=timestamp),
    }
    good = {"d": "2012/1/2", "e": "2012/1/2", "t": "2012/1/2 3:04"}
    if date != "yyyy/M/d":
        good = {"d": "2/1/2012", "e": "2/1/2012", "t": "2/1/2012 3:04"}
    if timestamp.endswith(" a"):
        good["t"] = "2/1/2012 3:04 PM"
    lines = ["n,d,e,t,s"]
    for value in PATTERNED_EDGES:
        for column in ("d", "t"):
            fields = dict(good, **{column: value})
            lines.append(f"{len(lines)},{fields['d']},{fields['e']},{fields['t']},x")
    src = tmp_path / "patterned.csv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    schema = read_options.parse_schema(spark, ddl)
    # AM/PM is a word a marker could spell: no markers there, so the parser takes the column.
    markers = () if timestamp.endswith(" a") else read_options.DEFAULT_NULL_VALUES
    options = read_options.ReadOptions(schema_ddl=ddl, formats=formats, null_values=markers)

    by_text, by_parser, typed = _both_ways(spark, src, schema, options)

    assert typed == {"d", "e", "t"}  # `n` too but for the Arabic-Indic digits in the file
    assert by_parser == by_text
    good_rows = [row for row in by_text if not row[-1]]
    assert len(good_rows) >= 5 and len(by_text) - len(good_rows) >= 5  # both sides had both
    # A column of its own pattern beside them: the read keeps no pattern for dates, and
    # every date column is typed on the text path.
    mixed = dict(formats, e=read_options.ColumnFormat(pattern="yyyy-MM-dd"))
    other = options.model_copy(update={"formats": mixed})
    assert conversion.reader_patterns(schema, other) == (None, timestamp)
    by_text, by_parser, typed = _both_ways(spark, src, schema, other)
    assert typed == {"t"} and by_parser == by_text


def test_a_marker_a_pattern_of_words_could_read_keeps_its_column_on_the_text_path(
    spark: Any,
) -> None:
    """A pattern of digits reads no word (`NA` stays a marker the parser cannot take); a
    pattern with month names or AM/PM could read one: such a column is left to the text
    path while a marker of letters is set."""
    schema = read_options.parse_schema(spark, "d DATE, t TIMESTAMP")
    digits = read_options.ReadOptions(
        formats={
            "d": read_options.ColumnFormat(pattern="yyyy/M/d"),
            "t": read_options.ColumnFormat(pattern="yyyy/M/d H:mm"),
        }
    )
    assert conversion.parser_typed(schema, digits, ascii_digits=True) == {"d", "t"}
    words = read_options.ReadOptions(
        formats={
            "d": read_options.ColumnFormat(pattern="d-MMM-yyyy"),
            "t": read_options.ColumnFormat(pattern="M/d/yyyy h:mm a"),
        }
    )
    assert conversion.parser_typed(schema, words, ascii_digits=True) == frozenset()
    no_markers = words.model_copy(update={"null_values": ()})
    assert conversion.parser_typed(schema, no_markers, ascii_digits=True) == {"d", "t"}
