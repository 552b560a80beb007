"""The sniffer's decisions on bytes written as tools write them (no JVM): encodings,
delimiters, headers, and per column the format of its values; the shape of the literals the
query side takes for dates."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_workers import read_options, sniffing, text_date_guard, value_guess

MARKERS = set(read_options.DEFAULT_NULL_VALUES)


def sniff(path: Path, data: bytes, **options: object) -> sniffing.Sniffed:
    path.write_bytes(data)
    found = sniffing.sniff(str(path), read_options.ReadOptions.model_validate(options))
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("name\nMüller\n".encode(), None),
        (b"\xef\xbb\xbfname\nM\xc3\xbcller\n", None),
        ("name\nMüller\n€uro\n".encode("cp1252"), "windows-1252"),
        ("name\nMüller\n".encode("latin-1") + b"\x81\n", "ISO-8859-1"),
    ],
)
def test_encodings(tmp_path: Path, data: bytes, encoding: str | None) -> None:
    found = sniff(tmp_path / "f.csv", data)
    assert found.options.encoding == encoding
    assert found.names == ["name"]  # no byte order mark in the name


def test_a_utf8_character_cut_by_a_part_is_still_utf8() -> None:
    assert sniffing.detect_encoding("aé".encode()[:-1]) == "UTF-8"


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|"])
def test_delimiters(tmp_path: Path, delimiter: str) -> None:
    rows = ["a,b", "1,x y", "2,z"] if delimiter == "," else ["a;b", "1,5;x", "2,25;y"]
    text = "\n".join(r.replace(";", delimiter) for r in rows) + "\n"
    found = sniff(tmp_path / "f.csv", text.encode())
    assert (found.options.delimiter or ",") == delimiter
    assert len(found.names) == 2


def test_headers(tmp_path: Path) -> None:
    assert sniff(tmp_path / "a.csv", b"1.5,2\n3.5,4\n").options.header is False
    assert sniff(tmp_path / "b.csv", b"x,y\n3.5,4\n").options.header is None  # the default
    years = b"country,1960,1961\nAruba,4.82,4.655\nFrance,2.85,2.8\n"
    assert sniff(tmp_path / "c.csv", years).options.header is None
    words = b'"name","YES"\n"a",60.3\n"b",52.3\n'
    assert sniff(tmp_path / "d.csv", words).options.header is None
    r_rows = sniff(tmp_path / "e.csv", b'"","x","x"\n"1",2,3\n')
    assert r_rows.names == ["column0", "x", "x_1"] and r_rows.options.renamed_header


@pytest.mark.parametrize(
    ("values", "type_name", "patterns"),
    [
        (["2012/01/01", "2012/12/31"], "date", ("yyyy/M/d",)),
        (["2010/01/01 00:00", "2010/01/01 23:00"], "timestamp", ("yyyy/M/d H:mm",)),
        (["2010/01/01 00:00:00"], "timestamp", ("yyyy/M/d H:mm:ss",)),
        (["13/02/2020", "01/03/2020"], "date", ("d/M/yyyy",)),
        (["02/13/2020", "3/1/2020"], "date", ("M/d/yyyy",)),
        (["01/02/2020", "02/03/2020"], "date", ("d/M/yyyy", "M/d/yyyy")),
        (["Jan 1 2000", "Feb 1 2000"], "date", ("MMM d yyyy",)),
        (["1-Mar-2021", "15-Apr-2021"], "date", ("d-MMM-yyyy",)),
        (["Jan-1-1995"], "date", ("MMM-d-yyyy",)),
        (["January 5, 2020"], "date", ("MMMM d, yyyy",)),
        (["1/5/2020 3:04 PM", "1/13/2020 11:05 AM"], "timestamp", ("M/d/yyyy h:mm a",)),
        (["2012-01-01", "NA"], "date", ("",)),
        (["2010-01-01 00:00+01:00"], "timestamp", ("",)),
        (["2016-02-15T00:00:00Z"], "timestamp", ("",)),
        (["2010/01/01 00:00+01:00"], "timestamp", ("yyyy/M/d H:mmXXX",)),
    ],
)
def test_dates_and_timestamps(values: list[str], type_name: str, patterns: tuple[str, ...]) -> None:
    found = value_guess.guess(values, MARKERS)
    assert (found.type, found.patterns) == (type_name, patterns)


@pytest.mark.parametrize(
    ("values", "decimal", "type_name", "fmt"),
    [
        (["1", "2", "NA"], ".", "int", None),
        (["007", "010"], ".", "string", None),
        (["00M", "01C"], ".", "string", None),
        (["1,234", "12", "1,000,000"], ".", "int", {"thousands": ","}),
        (["1,234.5", "3"], ".", "double", {"thousands": ","}),
        (["1,5", "2"], ",", "double", {"decimal": ","}),
        (["1.234,5", "2"], ",", "double", {"decimal": ",", "thousands": "."}),
        (["1,2,3"], ".", "string", None),
        (["TRUE", "FALSE", "NA"], ".", "boolean", None),
        (["T", "F"], ".", "boolean", {"words": True}),
        (["F", "F"], ".", "string", None),
        (["yes", "no"], ".", "boolean", {"words": True}),
    ],
)
def test_numbers_and_booleans(
    values: list[str], decimal: value_guess.Decimal, type_name: str, fmt: dict[str, object] | None
) -> None:
    found = value_guess.guess(values, MARKERS, decimal)
    assert found.type == type_name
    expected = read_options.ColumnFormat.model_validate(fmt) if fmt else None
    assert found.column_format() == expected


def test_a_mix_of_date_forms_is_text_with_the_reason() -> None:
    found = value_guess.guess(["2012/01/01", "Jan 2 2012", "2012/01/03"], MARKERS)
    assert found.type == "string" and found.why_text is not None
    assert "more than one way" in found.why_text


@pytest.mark.parametrize(
    ("literal", "looks"),
    [
        ("2014-06-01", True),
        ("2014-06", True),
        ("2014/06/01", True),
        ("01/06/2014", True),
        ("1-Jun-2014", True),
        ("Jun 1 2014", True),
        ("2014-06-01 10:00:00", True),
        ("2014-06-01T10:00", True),
        ("2014", False),
        ("rain", False),
        ("10:00", False),
        ("1.5", False),
        ("00M", False),
    ],
)
def test_date_looking_literals(literal: str, looks: bool) -> None:
    assert bool(text_date_guard.DATE_LIKE.fullmatch(literal)) is looks
