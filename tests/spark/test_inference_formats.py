"""What people write in files, typed with the ingest's defaults (issue 47's examples), each
on a real file shipped on PyPI or on one written exactly as the tool that makes such files
writes it (pandas' `to_csv` with its options, R's `write.csv`, a spreadsheet's export); and
the query side refusing a text column compared with a date, through a keyed worker.

- dates written `2012/01/01` (vega_datasets' seattle-weather.csv) and timestamps
  `2010/01/01 00:00` (seattle-temps.csv): DATE and TIMESTAMP; the range query of the issue
  answers DuckDB's 92 rows;
- month names: `Jan 1 2000` (vega_datasets' stocks.csv), `1-Mar-2021` (a spreadsheet);
- day first decided by the data (a day past 12), and an order the data cannot decide: the
  column stays text, the ingest and the manifest say why and which `--date-format` types
  it, and a query comparing it with a date is refused naming the column and the option;
- a European export: `;`, decimal comma, Windows-1252 (pandas `to_csv(sep=";",
  decimal=",", encoding="cp1252")`); a UTF-8 byte order mark (statsmodels' danish_data);
- leading-zero codes kept as text (`00M` in vega_datasets' airports.csv, `007`);
- booleans as R writes them (`TRUE`/`FALSE`/`NA`) and `T`/`F`; tab- and pipe-separated
  files; thousands separators; timestamps with zones;
- `--dry-run` prints the schema and writes nothing; the manifest records the formats.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from spark_workers import manifest
from tests.spark import corpus
from tests.spark.conftest import call
from tests.spark.test_real_data import ingest, serve, sql

pytestmark = pytest.mark.timeout(300)


def vega(name: str) -> Path:
    return corpus._package_dir("vega_datasets") / "_data" / name


def described(root: Path, name: str) -> dict[str, Any]:
    found = manifest.read(str(root / f"{name}@v1"))
    assert found is not None
    return found


def types_of(found: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["type"] for c in found["schema"]}


def test_slash_dates_are_dates_and_the_issue_query_answers_92_rows(
    spark: Any, tmp_path: Path
) -> None:
    src = vega("seattle-weather.csv")
    result = ingest(src, tmp_path, "--name", "weather", "--version", "v1")
    assert result.exit_code == 0, result.output
    assert "date           DATE       yyyy/M/d" in result.output  # the schema shown
    found = described(tmp_path, "weather")
    assert types_of(found)["date"] == "date"
    assert found["options"]["formats"]["date"]["pattern"] == "yyyy/M/d"  # the manifest
    assert found["inference"]["columns"]["date"]["format"] == "yyyy/M/d"
    app = serve(spark, tmp_path, "weather")
    query = (
        "SELECT weather, count(*) AS n FROM dataset WHERE date >= '2014-06-01' AND "
        "date < '2014-09-01' GROUP BY weather"
    )
    rows = sql(app, query)
    duck = duckdb.sql(query.replace("dataset", f"read_csv('{src}')")).fetchall()
    assert sum(r["n"] for r in rows) == 92
    assert sorted((r["weather"], r["n"]) for r in rows) == sorted(duck)
    (years,) = sql(app, "SELECT count(DISTINCT year(date)) AS years FROM dataset")
    assert years["years"] == 4


def test_slash_timestamps_without_seconds_are_timestamps(spark: Any, tmp_path: Path) -> None:
    src = vega("seattle-temps.csv")
    result = ingest(src, tmp_path, "--name", "temps", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "temps")
    assert types_of(found)["date"] == "timestamp"
    assert found["options"]["formats"]["date"]["pattern"] == "yyyy/M/d H:mm"
    app = serve(spark, tmp_path, "temps")
    rows = sql(app, "SELECT hour(date) AS h, count(*) AS n FROM dataset GROUP BY 1 ORDER BY 1")
    assert [r["h"] for r in rows] == list(range(24))
    assert found["columns"]["date"]["min"] == "2010-01-01 00:00:00"  # UTC, as Spark writes it


def test_month_names(spark: Any, tmp_path: Path) -> None:
    stocks = vega("stocks.csv")  # `Jan 1 2000`
    result = ingest(stocks, tmp_path, "--name", "stocks", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "stocks")
    assert types_of(found)["date"] == "date"
    assert (found["columns"]["date"]["min"], found["columns"]["date"]["max"]) == (
        "2000-01-01",
        "2010-03-01",
    )
    # A spreadsheet's `d-mmm-yyyy`, as LibreOffice and Excel export it.
    sheet = tmp_path / "sheet.csv"
    days = [dt.date(2021, 3, 1) + dt.timedelta(days=17 * i) for i in range(40)]
    sheet.write_text(
        "day,amount\r\n"
        + "".join(f"{d.day}-{d.strftime('%b')}-{d.year},{i}\r\n" for i, d in enumerate(days))
    )
    result = ingest(sheet, tmp_path, "--name", "sheet", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "sheet")
    assert types_of(found)["day"] == "date"
    assert found["columns"]["day"]["max"] == days[-1].isoformat()


def _european(path: Path, days: list[dt.date]) -> pd.DataFrame:
    """A frame written as pandas writes a European export: `;`, decimal comma, dates day
    first, Windows-1252."""
    frame = pd.DataFrame(
        {
            "Kunde": [
                ["Müller", "Café Žižek", "€uro GmbH", "Ødegård"][i % 4] for i in range(len(days))
            ],
            "Datum": [d.strftime("%d/%m/%Y") for d in days],
            "Betrag": [1234.5 + i / 4 for i in range(len(days))],
            "PLZ": [f"{i:05d}" for i in range(len(days))],
        }
    )
    frame.to_csv(path, sep=";", decimal=",", encoding="cp1252", index=False)
    return frame


def test_a_european_export_day_first_decided_by_the_data(spark: Any, tmp_path: Path) -> None:
    days = [dt.date(2024, 1, 1) + dt.timedelta(days=9 * i) for i in range(60)]
    src = tmp_path / "export.csv"
    frame = _european(src, days)
    assert b"1234,5" in src.read_bytes() and "Müller".encode("cp1252") in src.read_bytes()
    result = ingest(src, tmp_path, "--name", "export", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "export")
    assert types_of(found) == {
        "Kunde": "string",
        "Datum": "date",
        "Betrag": "double",
        "PLZ": "string",
    }
    assert found["inference"]["dialect"] == {
        "format": "csv", "delimiter": ";", "quote": '"', "header": True,
        "encoding": "windows-1252", "decimal": ",",
    }  # fmt: skip
    assert found["options"]["formats"]["Datum"]["pattern"] == "d/M/yyyy"
    app = serve(spark, tmp_path, "export")
    rows = sql(app, "SELECT Kunde, Datum, Betrag, PLZ FROM dataset ORDER BY Datum")
    assert [r["Kunde"] for r in rows] == list(frame["Kunde"])  # Windows-1252 read as such
    assert [r["Datum"] for r in rows] == days
    assert [r["Betrag"] for r in rows] == list(frame["Betrag"])
    assert [r["PLZ"] for r in rows] == list(frame["PLZ"])  # leading zeros kept


def test_an_undecidable_day_month_order_stays_text_and_a_date_comparison_is_refused(
    spark: Any, tmp_path: Path
) -> None:
    src = tmp_path / "monthly.csv"
    days = [dt.date(2020 + i // 12, i % 12 + 1, 1) for i in range(36)]  # the 1st: day <= 12
    _european(src, days)
    result = ingest(src, tmp_path, "--name", "monthly", "--version", "v1")
    assert result.exit_code == 0, result.output
    assert "its dates read either way round" in result.output
    assert "--date-format 'd/M/yyyy' or --date-format 'M/d/yyyy' types it" in result.output
    found = described(tmp_path, "monthly")
    assert types_of(found)["Datum"] == "string"
    why = found["inference"]["columns"]["Datum"]["text_because"]
    assert "--date-format 'd/M/yyyy'" in why
    app = serve(spark, tmp_path, "monthly")
    for query in (
        {"sql": "SELECT count(*) AS n FROM dataset WHERE Datum >= '2021-01-01'"},
        {"sql": "SELECT count(*) AS n FROM dataset WHERE Datum BETWEEN '01/01/2021' AND '2022'"},
        {"where": [{"column": "Datum", "op": "<", "value": "2021-06-01"}]},
    ):
        with pytest.raises(Exception) as refused:
            call(app, query)
        details = getattr(refused.value, "details", {})
        assert details.get("reason") == "refused" and details.get("column") == "Datum", details
        assert "--date-format 'd/M/yyyy'" in str(refused.value)
    # A parsed value compares as a date; the text itself, when asked for, as text.
    (row,) = sql(
        app, "SELECT count(*) AS n FROM dataset WHERE to_date(Datum, 'd/M/yyyy') >= '2021-01-01'"
    )
    assert row["n"] == 24
    (row,) = sql(app, "SELECT count(*) AS n FROM dataset WHERE Kunde = 'Müller'")
    assert row["n"] == 9
    # Told the order, the ingest types it.
    again = ingest(
        src, tmp_path, "--name", "monthly", "--version", "v2", "--date-format", "dd/MM/yyyy"
    )
    assert again.exit_code == 0, again.output
    typed = manifest.read(str(tmp_path / "monthly@v2"))
    assert typed is not None and types_of(typed)["Datum"] == "date"


def test_a_byte_order_mark_tabs_pipes_and_r_booleans(spark: Any, tmp_path: Path) -> None:
    danish = corpus._package_dir("statsmodels") / "datasets" / "danish_data" / "data.csv"
    assert danish.read_bytes().startswith(b"\xef\xbb\xbf")  # as shipped
    result = ingest(danish, tmp_path, "--name", "danish", "--version", "v1")
    assert result.exit_code == 0, result.output
    assert list(types_of(described(tmp_path, "danish")))[0] == "period"  # no BOM in the name

    anes = corpus._package_dir("statsmodels") / "datasets" / "anes96" / "anes96.csv"
    result = ingest(anes, tmp_path, "--name", "anes", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "anes")
    assert found["inference"]["dialect"]["delimiter"] == "\t"
    assert set(types_of(found).values()) <= {"int", "double"}

    # R's write.csv: strings quoted, logicals TRUE/FALSE, NA unquoted; then `|` and T/F.
    r_file = tmp_path / "r.csv"
    rows = [(f'"{c}"', ["TRUE", "FALSE", "NA"][i % 3], ["T", "F"][i % 2]) for i, c in
            enumerate(["a", "b", "c", "d", "e", "f"])]  # fmt: skip
    r_file.write_text(
        '"","name","flag","tf"\n'
        + "".join(f'"{i + 1}",{n},{f},{t}\n' for i, (n, f, t) in enumerate(rows))
    )
    result = ingest(r_file, tmp_path, "--name", "r", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "r")
    assert types_of(found) == {
        "column0": "int",
        "name": "string",
        "flag": "boolean",
        "tf": "boolean",
    }
    assert found["columns"]["flag"]["nulls"] == 2
    piped = tmp_path / "piped.csv"
    pd.DataFrame({"code": ["007", "010", "123"], "amount": ["1,234.5", "12", "1,000,000"]}).to_csv(
        piped, sep="|", index=False
    )
    result = ingest(piped, tmp_path, "--name", "piped", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "piped")
    assert types_of(found) == {"code": "string", "amount": "double"}
    assert (found["columns"]["amount"]["min"], found["columns"]["amount"]["max"]) == (12, 1e6)
    airports = vega("airports.csv")
    result = ingest(airports, tmp_path, "--name", "airports", "--version", "v1", "--dry-run")
    assert result.exit_code == 0 and "dry run: nothing written" in result.output, result.output
    assert "iata" in result.output and not (tmp_path / "airports@v1").exists()


def test_timestamps_with_zones_as_pandas_writes_them(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "zoned.csv"
    moments = pd.date_range("2024-03-30 22:00", periods=8, freq="45min", tz="Europe/Paris")
    pd.DataFrame({"at": moments, "n": range(8)}).to_csv(src, index=False)
    assert "+01:00" in src.read_text() and "+02:00" in src.read_text()
    result = ingest(src, tmp_path, "--name", "zoned", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "zoned")
    assert types_of(found)["at"] == "timestamp"
    app = serve(spark, tmp_path, "zoned")
    rows = sql(app, "SELECT at FROM dataset ORDER BY n")
    utc = [m.tz_convert("UTC").to_pydatetime() for m in moments]
    assert [corpus.normal(r["at"]) for r in rows] == [corpus.normal(m) for m in utc]


def test_csv_module_quoting_of_a_spreadsheet_with_thousands(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "sheet.csv"
    with src.open("w", newline="") as out:
        writer = csv.writer(out)  # Excel's dialect: `"1,234"` quoted
        writer.writerow(["region", "population"])
        for i in range(30):
            writer.writerow([f"r{i}", f"{1000 * i + 234:,}"])
    result = ingest(src, tmp_path, "--name", "sheet", "--version", "v1")
    assert result.exit_code == 0, result.output
    found = described(tmp_path, "sheet")
    assert types_of(found)["population"] == "int"
    assert found["columns"]["population"]["max"] == 29234
