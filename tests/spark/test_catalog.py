"""Dataset keys: the grammar, traversal refused, formats found, partition filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_workers import Catalog, DatasetError, DatasetKey


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("trips", DatasetKey("trips")),
        ("trips@2024-01", DatasetKey("trips", "2024-01")),
        ("trips/city=Lyon", DatasetKey("trips", None, (("city", "Lyon"),))),
        ("t.v2@1/a=x y/b=é", DatasetKey("t.v2", "1", (("a", "x y"), ("b", "é")))),
    ],
)
def test_valid_keys(key: str, expected: DatasetKey) -> None:
    assert DatasetKey.parse(key) == expected


@pytest.mark.parametrize(
    "key",
    [
        "",
        "..",
        "../etc",
        "../../etc/passwd",
        "a/../b",
        "/etc",
        "trips/..",
        "trips@..",
        "a..b",
        ".hidden",
        "trips@../x",
        "trips/city",
        "x" * 300,
        "naïve",
        "a\\b",
        "a b",
        "trips/city=Lyon/../../x",
    ],
)
def test_invalid_and_traversing_keys_are_refused(key: str) -> None:
    with pytest.raises(DatasetError):
        DatasetKey.parse(key)


def test_resolve_finds_directories_files_and_formats(tmp_path: Path) -> None:
    (tmp_path / "pq").mkdir()
    (tmp_path / "pq" / "_SUCCESS").write_text("")
    (tmp_path / "pq" / "part-0.snappy.parquet").write_bytes(b"")
    (tmp_path / "raw@1").mkdir()
    (tmp_path / "raw@1" / "part-0.csv").write_text("a\n1\n")
    (tmp_path / "lines.jsonl").write_text("{}\n")
    cat = Catalog(str(tmp_path))
    assert cat.resolve("pq").format == "parquet"
    assert cat.resolve("raw@1").format == "csv"
    assert cat.resolve("lines").format == "json"
    assert cat.resolve("lines").uri == str(tmp_path / "lines.jsonl")
    with pytest.raises(DatasetError, match="unknown dataset 'raw'"):
        cat.resolve("raw")


def test_remote_roots_use_the_template_without_touching_the_filesystem() -> None:
    cat = Catalog("s3a://bucket/data", fmt="auto")
    assert cat.resolve("trips@3/city=Nice").uri == "s3a://bucket/data/trips@3"
    templated = Catalog("/srv", uri_template="{root}/{name}/v={version}")
    location = templated.resolve("trips@3")
    assert (location.uri, location.format) == ("/srv/trips/v=3", "parquet")
