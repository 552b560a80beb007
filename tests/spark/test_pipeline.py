"""The pipeline CLI: deterministic raw data in, partitioned Parquet datasets out, that the
catalog then serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spark_workers import Catalog, pipeline

pytestmark = pytest.mark.timeout(150)


def test_generate_then_ingest_partitioned(spark: Any, tmp_path: Path) -> None:
    runner = CliRunner()
    raw, root = tmp_path / "raw", tmp_path / "root"
    result = runner.invoke(
        pipeline.app, ["generate", str(raw), "--rows", "500", "--seed", "3", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert "[2/2] generating 500 trips rows" in result.output
    result = runner.invoke(
        pipeline.app,
        [
            "ingest",
            str(raw),
            str(root),
            "--name",
            "trips",
            "--version",
            "v1",
            "--partition-by",
            "city",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "[2/2] ingesting json" in result.output and "rows 500, bad rows 0" in result.output
    target = root / "trips@v1"
    assert sorted(p.name for p in target.iterdir() if p.is_dir())[0].startswith("city=")
    df = Catalog(str(root)).load(spark, "trips@v1/city=Paris")
    assert 0 < df.count() < 500
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped


def test_generated_data_is_deterministic(spark: Any) -> None:
    first = pipeline.trips(spark, 100, 5).orderBy("trip_id").collect()
    again = pipeline.trips(spark, 100, 5).repartition(3).orderBy("trip_id").collect()
    other = pipeline.trips(spark, 100, 6).orderBy("trip_id").collect()
    assert first == again and first != other


def test_ingest_refuses_bad_names_and_columns(spark: Any, tmp_path: Path) -> None:
    runner = CliRunner()
    raw = tmp_path / "raw.csv"
    raw.write_text("a,b\n1,2\n")
    result = runner.invoke(pipeline.app, ["ingest", str(raw), str(tmp_path), "--name", "../x"])
    assert result.exit_code != 0
    result = runner.invoke(
        pipeline.app,
        ["ingest", str(raw), str(tmp_path), "--name", "ok", "--partition-by", "zz"],
    )
    assert result.exit_code != 0 and "no column 'zz'" in result.output
