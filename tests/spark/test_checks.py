"""The `unique` check counts the same rows whichever way it runs: from the exact distinct
count Arrow makes on the driver (`written.statistics`, a column of at most
`written.ARROW_COLUMN_BYTES`) or by a Spark grouping query (a larger column, a partition
column, floating point). Both are compared with pandas on the same rows,
written by Spark as the ingest writes them (several files), with nulls, case, accents in two
Unicode forms, empty strings, dates, booleans and, for Spark only, -0.0 and NaN.
"""

from __future__ import annotations

import datetime as dt
import math
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
