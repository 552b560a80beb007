"""The manifest's statistics read from the Parquet footers (null counts; integers' and dates'
min and max) equal Spark's own aggregates over the same written rows: every flat type, the
extremes of each integer width, dates from year 1 to 9999, negative values, a column with
no value at all, several files, a partitioned layout and an empty dataset. Where a footer
has no statistics (written without, as another writer may), the column is reported
missing and the ingest counts it on the written files instead.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pytest

from spark_workers import ingest, manifest, read_options

DDL = (
    "b TINYINT, s SMALLINT, i INT, l BIGINT, d DATE, f FLOAT, x DOUBLE, m DECIMAL(10,2),"
    " w DECIMAL(30,5), t STRING, flag BOOLEAN, raw BINARY, ts TIMESTAMP, none INT, part STRING"
)


def _rows() -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = [
        (-128, -32768, -(2**31), -(2**63), dt.date(1, 1, 1), -1.5, -0.0, decimal.Decimal("-5.25"),
         decimal.Decimal("-1e20"), "", False, b"", dt.datetime(1900, 1, 1), None, "p0"),
        (127, 32767, 2**31 - 1, 2**63 - 1, dt.date(9999, 12, 31), float("nan"), float("inf"),
         decimal.Decimal("99999999.99"), decimal.Decimal("1e24"), "é", True, b"\xff",
         dt.datetime(2100, 1, 1), None, "p1"),
        (None,) * 14 + ("p2",),
    ]  # fmt: skip
    for n in range(2_000):
        rows.append(
            (
                n % 100 - 50,
                n - 1_000,
                n * 7919 - 5_000_000,
                n * 10**12,
                dt.date(1969, 12, 31) + dt.timedelta(days=n - 1_000),
                n / 3,
                -n / 7,
                decimal.Decimal(n) / 4,
                decimal.Decimal(n) * 10**15,
                f"v{n}",
                n % 2 == 0,
                bytes([n % 256]),
                dt.datetime(2020, 1, 1) + dt.timedelta(minutes=n),
                None,
                f"p{n % 3}",
            )
            if n % 11
            else (None,) * 14 + (f"p{n % 3}",)
        )
    return rows


def _spark_statistics(spark: Any, path: str, schema: Any, names: frozenset[str]) -> dict[str, Any]:
    aggregates = [
        aggregate
        for i, field in enumerate(schema.fields)
        if field.name in names
        for aggregate in manifest.nulls_min_max(i, field)
    ]
    return dict(spark.read.parquet(path).agg(*aggregates).collect()[0].asDict())


@pytest.mark.parametrize("partition_by", [(), ("part",)])
def test_footer_statistics_equal_sparks_aggregates(
    spark: Any, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    df = spark.createDataFrame(_rows(), DDL)
    path = str(tmp_path / "v1")
    writer = df.repartition(3).write
    (writer.partitionBy(*partition_by) if partition_by else writer).parquet(path)
    names = manifest.footer_columns(df.schema, partition_by)
    assert "ts" not in names and ("part" in names) is not bool(partition_by)

    found, missing = manifest.footer_statistics(path, df.schema, names)

    assert missing == []
    expected = _spark_statistics(spark, path, df.schema, names)
    assert found == {k: v for k, v in expected.items() if k in found}
    assert found["stat:2:min"] == -(2**31) and found["stat:4:max"] == dt.date(9999, 12, 31)
    assert found["stat:13:nulls"] == len(_rows()) and found["stat:13:min"] is None
    for i, field in enumerate(df.schema.fields):  # every footer column's nulls came from it
        assert (f"stat:{i}:nulls" in found) is (field.name in names)


def test_an_empty_dataset_has_no_min_max_and_no_nulls(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame([], DDL)
    path = str(tmp_path / "empty")
    df.repartition(2).write.parquet(path)
    names = manifest.footer_columns(df.schema, ())

    found, missing = manifest.footer_statistics(path, df.schema, names)

    assert missing == []
    expected = _spark_statistics(spark, path, df.schema, names)
    assert found == {k: v for k, v in expected.items() if k in found}
    assert found["stat:0:nulls"] == 0 and found["stat:0:min"] is None


def test_footers_without_statistics_are_reported_missing(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame(_rows()[:100], DDL)
    path = str(tmp_path / "bare")
    df.write.option("parquet.column.statistics.enabled", "false").parquet(path)
    names = manifest.footer_columns(df.schema, ())

    found, missing = manifest.footer_statistics(path, df.schema, names)

    assert missing == sorted(names) and found == {}


def test_an_ingest_counts_what_the_footers_lack_on_the_written_files(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback, forced: every footer taken for one without statistics (a stand-in for
    the footers another Parquet writer would produce; Spark's own always have them). The
    manifest's statistics are the same as with the footers read."""
    src = tmp_path / "src.csv"
    src.write_text(
        "a,d,x\n" + "".join(f"{n},2020-01-{n % 28 + 1:02d},{n / 2}\n" for n in range(50)) + "NA,,\n"
    )
    options = read_options.ReadOptions()

    def described(version: str) -> dict[str, Any]:
        request = ingest.Request(str(src), str(tmp_path / "root"), "t", version, options)
        return ingest.run(spark, request, say=lambda line: None).manifest["columns"]

    with_footers = described("v1")
    monkeypatch.setattr(
        manifest, "footer_statistics", lambda directory, schema, names: ({}, sorted(names))
    )
    without = described("v2")

    assert with_footers == without
    a = json.loads(json.dumps(with_footers))["a"]
    assert (a["nulls"], a["min"], a["max"]) == (1, 0, 49)
