"""The checks count the same rows whichever way they run.

The `unique` check: from the exact distinct
count Arrow makes on the driver (`written.statistics`, a column of at most
`written.ARROW_COLUMN_BYTES`) or by a Spark grouping query (a larger column, a partition
column, floating point). Both are compared with pandas on the same rows,
written by Spark as the ingest writes them (several files), with nulls, case, accents in two
Unicode forms, empty strings, dates, booleans and, for Spark only, -0.0 and NaN.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import pytest

from spark_workers import checks, written

DDL = "id INT, code STRING, day DATE, flag BOOLEAN, big BIGINT, x DOUBLE, part STRING"
NAMES = [column.split()[0] for column in DDL.split(", ")]


def _rows() -> list[tuple[Any, ...]]:
    rows = []
    codes = ["a", "A", "é", "e\u0301", "", None, "a", "é", ""]  # é twice as NFC, once NFD
    for i in range(3_000):
        rows.append(
            (
                i if i % 500 else None,  # nulls are not repeats
                codes[i % len(codes)] if i < 18 else f"c{i}",
                dt.date(2020, 1, 1) + dt.timedelta(days=i % 1_000),
                None if i % 7 == 0 else i % 2 == 0,
                i // 2 if i < 100 else i * 1_000_000_007,
                [0.0, -0.0, math.nan, math.nan, 1.5][i % 5] if i < 10 else float(i),
                f"p{i % 3}",
            )
        )
    return rows


@pytest.fixture(scope="module")
def written_files(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    path = str(tmp_path_factory.mktemp("unique") / "v1")
    df = spark.createDataFrame(_rows(), DDL)
    df.repartition(3).write.partitionBy("part").parquet(path)
    return path, df.schema


def _expected(column: str) -> int:
    index = NAMES.index(column)
    values = [row[index] for row in _rows() if row[index] is not None]
    if column == "x":  # Spark's grouping: -0.0 is 0.0, and every NaN is one value
        values = ["nan" if math.isnan(v) else v + 0.0 for v in values]
    return len(values) - len(set(values))


@pytest.mark.parametrize("column", ["id", "code", "day", "flag", "big", "x", "part"])
def test_unique_counts_agree_with_pandas_either_way(
    spark: Any, written_files: tuple[str, Any], column: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, schema = written_files
    declared = checks.Checks.model_validate({"columns": {column: {"unique": True}}})
    declared.bind(schema)
    expected = _expected(column)
    assert expected > 0 or column == "id"  # each column but one has repeats to find

    def counted() -> dict[str, int]:
        stats = written.statistics(spark, written.Files.read(path), schema, ("part",))
        return checks.unique_counts(declared, spark, path, schema, stats)

    on_driver = counted()
    monkeypatch.setattr(written, "ARROW_COLUMN_BYTES", 0)
    by_spark = counted()

    assert on_driver == by_spark == {"check:0:unique": expected}


def test_a_column_over_the_bound_is_left_to_spark(
    spark: Any, written_files: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, schema = written_files
    files = written.Files.read(path)
    size = files.column_bytes("big")
    assert size is not None and size > 0
    assert files.column_bytes("part") is None  # a partition column: in no file
    assert files.column_bytes("no such column") is None
    assert "big" in written.statistics(spark, files, schema, ("part",)).exact
    monkeypatch.setattr(written, "ARROW_COLUMN_BYTES", size - 1)
    exact = written.statistics(spark, files, schema, ("part",)).exact
    small = {n for n in NAMES if (files.column_bytes(n) or size) < size}
    assert "big" not in exact and exact == small and small


#: Checks counted from the written files (`checks.counters`), with edges: a type's bounds,
#: nulls, text in two Unicode forms, empty text, a partition column (Spark's query counts
#: those, Arrow does not read them).
FILE_DDL = "b TINYINT, s SMALLINT, i INT, l BIGINT, ok BOOLEAN, code STRING, part STRING"
FILE_CHECKS: dict[str, dict[str, Any]] = {
    "b": {"not_null": True, "min": -128, "max": 5, "allowed": [1, 2, -128, 127]},
    "s": {"min": -3, "max": 30_000, "allowed": [0, 1, -(2**15)]},
    "i": {"not_null": True, "min": 0, "max": 100},
    "l": {"min": -(2**63), "max": 2**62, "allowed": [2**62, 0, 2**63 - 1]},
    "ok": {"not_null": True, "allowed": [True]},
    "code": {"not_null": True, "allowed": ["a", "\u00e9", "", "NA"]},
    "part": {"not_null": True, "allowed": ["p0", "p1"]},
}


def _file_rows() -> list[tuple[Any, ...]]:
    codes = ["a", "A", "\u00e9", "e\u0301", "", None, "NA", "na", "b"]
    rows = []
    for i in range(2_000):
        rows.append(
            (
                [-128, 127, 1, 2, 5, 6, None][i % 7],
                [-(2**15), 2**15 - 1, 0, 1, -3, -4, None][i % 7] if i % 11 else i,
                None if i % 13 == 0 else i % 150 - 20,
                [-(2**63), 2**63 - 1, 2**62, 2**62 + 1, 0, None][i % 6],
                [True, False, None][i % 3],
                codes[i % len(codes)],
                [f"p{i % 3}", None][i % 2] if i % 5 == 0 else f"p{i % 3}",
            )
        )
    return rows


def _expected_failures(declared: checks.Checks) -> dict[str, int]:
    """Each check's failing rows, counted in Python from the rows themselves."""
    rows = _file_rows()
    names = [column.split()[0] for column in FILE_DDL.split(", ")]
    out = {}
    for i, (name, column) in enumerate(declared.columns.items()):
        values = [row[names.index(name)] for row in rows]
        present = [v for v in values if v is not None]
        if column.not_null:
            out[f"check:{i}:not_null"] = len(values) - len(present)
        if column.min is not None:
            out[f"check:{i}:min {column.min!r}"] = sum(v < column.min for v in present)
        if column.max is not None:
            out[f"check:{i}:max {column.max!r}"] = sum(v > column.max for v in present)
        if column.allowed is not None:
            allowed = set(column.allowed)
            out[f"check:{i}:allowed"] = sum(v not in allowed for v in present)
    return out


def test_checks_counted_from_the_files_equal_sparks_count(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow's counts (`checks.counters` in `written.statistics`), Spark's query on the
    files (a column Arrow does not read: the partition column, and every column with
    `ARROW_COLUMN_BYTES` at 0) and Spark's own count of each check's condition over the
    rows (as the write's observation counts the other checks) agree, and with Python's."""
    from pyspark.sql import functions as F  # noqa: N812

    df = spark.createDataFrame(_file_rows(), FILE_DDL)
    path = str(tmp_path / "v1")
    df.repartition(3).write.partitionBy("part").parquet(path)
    declared = checks.Checks.model_validate({"columns": FILE_CHECKS})
    declared.bind(df.schema)
    counters = checks.counters(declared, df.schema)
    assert set(counters) == set(FILE_CHECKS)  # every check here is counted from the files
    assert checks.aggregates(declared, df.schema) == []

    def counted() -> dict[str, int]:
        found = written.statistics(spark, written.Files.read(path), df.schema, ("part",), counters)
        return {k: v for k, v in found.counts.items() if k.startswith("check:")}

    by_arrow = counted()
    monkeypatch.setattr(written, "ARROW_COLUMN_BYTES", 0)
    by_spark = counted()
    rows = spark.read.schema(df.schema).parquet(path)
    own = rows.agg(*checks.aggregates(declared, df.schema, from_files=True)).collect()[0]
    expected = _expected_failures(declared)
    assert by_arrow == by_spark == own.asDict() == expected
    # Every check has failures to count, but a min at its type's least value.
    at_bound = {"check:0:min -128", f"check:3:min {-(2**63)!r}"}
    assert {label for label, rows in expected.items() if not rows} == at_bound
    assert rows.where(F.col("code") == "\u00e9").count() > 0  # NFC é allowed, NFD é not


def test_a_check_on_a_float_or_a_date_is_counted_as_the_rows_are_written(spark: Any) -> None:
    """Ranges on floating point, dates and timestamps (Spark's casts of their values, NaN's
    order) are Spark's comparisons, in the write's observation: no counter for them."""
    schema = spark.createDataFrame([], "x DOUBLE, d DATE, n INT").schema
    declared = checks.Checks.model_validate(
        {"columns": {"x": {"min": 0.5}, "d": {"max": "2024-01-01"}, "n": {"not_null": True}}}
    )
    declared.bind(schema)
    assert set(checks.counters(declared, schema)) == {"n"}
    assert len(checks.aggregates(declared, schema)) == 2
