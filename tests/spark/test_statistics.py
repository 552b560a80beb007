"""The manifest's statistics counted by Arrow on the driver (`written.statistics`) equal
Spark's own aggregates over the same written files: every flat type an ingest writes, the
extremes of each integer width, dates and timestamps from year 1 (with a fraction) to 9999,
NaN, infinities and -0.0, decimals of both storages, a column with no value at all, several
files, a partitioned layout and an empty dataset. Arrow's distinct counts are exact (equal to
Python's count of the values); Spark's, an estimate, are within 10% of them. Spark's side is
the same code path with the driver's bound at 0 (every column counted by Spark): a real
setting, no stand-in.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from pathlib import Path
from typing import Any

import pytest

from spark_workers import ingest, read_options, written

DDL = (
    "b TINYINT, s SMALLINT, i INT, l BIGINT, d DATE, f FLOAT, x DOUBLE, m DECIMAL(10,2),"
    " w DECIMAL(30,5), t STRING, flag BOOLEAN, raw BINARY, ts STRING, tn STRING, none INT,"
    " part STRING"
)
PARTITION = 15


def _rows() -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = [
        (-128, -32768, -(2**31), -(2**63), dt.date(1, 1, 1), -1.5, -0.0, decimal.Decimal("-5.25"),
         decimal.Decimal("-1e20"), "", False, b"", "0001-01-01 00:00:00.12",
         "0001-01-01 00:00:00", None, "p0"),
        (127, 32767, 2**31 - 1, 2**63 - 1, dt.date(9999, 12, 31), float("nan"), float("inf"),
         decimal.Decimal("99999999.99"), decimal.Decimal("1e24"), "é", True, b"\xff",
         "9999-12-31 23:59:59.999999", "9999-12-31 23:59:59.5", None, "p1"),
        (None,) * 15 + ("p2",),
    ]  # fmt: skip
    for n in range(2_000):
        moment = dt.datetime(2020, 1, 1) + dt.timedelta(minutes=n, microseconds=n * 1_000)
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
                f"v{n % 1_500}",
                n % 2 == 0,
                bytes([n % 256]),
                str(moment),
                str(moment - dt.timedelta(days=30_000)),
                None,
                f"p{n % 3}",
            )
            if n % 11
            else (None,) * 15 + (f"p{n % 3}",)
        )
    return rows


def _frame(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    """Timestamps made by Spark's own cast from text (as an ingest makes them)."""
    df = spark.createDataFrame(rows, DDL)
    return df.selectExpr(
        *[n for n in df.columns if n not in ("ts", "tn", "none", "part")],
        "CAST(ts AS TIMESTAMP) AS ts",
        "CAST(tn AS TIMESTAMP_NTZ) AS tn",
        "none",
        "part",
    )


def _python_distinct(rows: list[tuple[Any, ...]], column: int) -> int:
    values = {row[column] for row in rows if row[column] is not None}
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        values = {v for v in values if not math.isnan(v)} | {"nan"}
    return len(values)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


@pytest.mark.parametrize("timestamps", ["INT96", "TIMESTAMP_MICROS"])
@pytest.mark.parametrize("partition_by", [(), ("part",)])
def test_arrow_statistics_equal_sparks_aggregates(
    spark: Any,
    tmp_path: Path,
    partition_by: tuple[str, ...],
    timestamps: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Timestamps as Spark writes them by default (INT96) and as an ingest writes them."""
    df = _frame(spark, _rows())
    path = str(tmp_path / "v1")
    writer = df.repartition(3).write
    spark.conf.set("spark.sql.parquet.outputTimestampType", timestamps)
    try:
        (writer.partitionBy(*partition_by) if partition_by else writer).parquet(path)
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    files = written.Files.read(path)
    names = df.schema.fieldNames()

    by_arrow = written.statistics(spark, files, df.schema, partition_by)
    monkeypatch.setattr(written, "ARROW_COLUMN_BYTES", 0)
    by_spark = written.statistics(spark, files, df.schema, partition_by)

    assert by_arrow.exact == set(names) - set(partition_by) and not by_spark.exact
    assert by_arrow.counts.keys() == by_spark.counts.keys()
    assert by_arrow.counts["stat:rows"] == len(_rows())
    for key, value in by_arrow.counts.items():
        if key.endswith(":distinct"):
            continue
        assert _same(value, by_spark.counts[key]), (key, value, by_spark.counts[key])
    source_columns = {name: i for i, name in enumerate(n.split()[0] for n in DDL.split(", "))}
    for i, name in enumerate(names):
        expected = _python_distinct(_rows(), source_columns[name])
        if name in by_arrow.exact:
            assert by_arrow.counts[f"stat:{i}:distinct"] == expected, name
        assert abs(by_spark.counts[f"stat:{i}:distinct"] - expected) <= 0.1 * expected + 1, name
    stats = by_arrow.counts
    index = {name: i for i, name in enumerate(names)}
    assert stats[f"stat:{index['ts']}:min"] == "0001-01-01 00:00:00.12"
    assert stats[f"stat:{index['ts']}:max"] == "9999-12-31 23:59:59.999999"
    assert stats[f"stat:{index['tn']}:max"] == "9999-12-31 23:59:59.5"
    assert math.isnan(stats[f"stat:{index['f']}:max"]) and stats[f"stat:{index['x']}:max"] == (
        math.inf
    )
    assert stats[f"stat:{index['none']}:nulls"] == len(_rows())
    assert stats[f"stat:{index['none']}:min"] is None


def test_an_empty_dataset_has_no_min_max_and_no_nulls(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    df = _frame(spark, [])
    path = str(tmp_path / "empty")
    df.repartition(2).write.parquet(path)
    files = written.Files.read(path)

    by_arrow = written.statistics(spark, files, df.schema, ())
    monkeypatch.setattr(written, "ARROW_COLUMN_BYTES", 0)
    by_spark = written.statistics(spark, files, df.schema, ())

    assert by_arrow.counts == by_spark.counts
    assert by_arrow.counts["stat:rows"] == 0 and by_arrow.counts["stat:0:min"] is None


def test_a_timestamp_past_year_9999_is_left_to_spark(spark: Any, tmp_path: Path) -> None:
    """Python's datetime ends at year 9999, Spark's timestamps do not."""
    df = spark.sql(
        "SELECT timestamp_micros(253402300800000000 + id) AS ts, id FROM range(3)"
    )  # 10000-01-01 00:00:00 UTC and on
    path = str(tmp_path / "far")
    df.write.parquet(path)

    found = written.statistics(spark, written.Files.read(path), df.schema, ())

    assert found.exact == {"id"}
    assert found.counts["stat:0:min"].startswith("+10000-01-01 00:00:00")
    assert found.counts["stat:1:max"] == 2


def test_an_ingest_describes_the_same_columns_whoever_counts(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole ingest with the driver's bound at 0 (every column counted by Spark) gives the
    manifest the same columns as with Arrow, distinct estimates aside."""
    src = tmp_path / "src.csv"
    src.write_text(
        "a,d,x,t\n"
        + "".join(
            f"{n},2020-01-{n % 28 + 1:02d},{n / 2},2020-01-01 00:00:{n % 60:02d}.5\n"
            for n in range(50)
        )
        + "NA,,,\n"
    )
    options = read_options.ReadOptions()

    def described(version: str) -> dict[str, Any]:
        request = ingest.Request(str(src), str(tmp_path / "root"), "t", version, options)
        columns = ingest.run(spark, request, say=lambda line: None).manifest["columns"]
        return dict(json.loads(json.dumps(columns)))

    by_arrow = described("v1")
    monkeypatch.setattr(written, "ARROW_COLUMN_BYTES", 0)
    by_spark = described("v2")

    for stats in (by_arrow, by_spark):
        for column in stats.values():
            column.pop("distinct")
    assert by_arrow == by_spark
    assert (by_arrow["a"]["nulls"], by_arrow["a"]["min"], by_arrow["a"]["max"]) == (1, 0, 49)
    assert by_arrow["t"]["max"] == "2020-01-01 00:00:49.5"
