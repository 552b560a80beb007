"""The strict read (`typed_frames.Frames.strict`): where Spark's parser types columns and the
source does not start with missing-value markers, the ingest first reads in FAILFAST mode
with no corrupt-record column, stopping at the first row it does not type; then it reads
again with the full frame. Either way the version is the one the full frame alone writes:
rows, statistics, bad rows and their lines. The problems are put past the first megabyte,
where the marker sample (`typed_frames.markers_at_start`) does not look, so the strict read
meets them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_workers import (
    bad_rows,
    ingest,
    manifest,
    pipeline_errors,
    read_options,
    staged_write,
    typed_frames,
)

pytestmark = pytest.mark.timeout(300)

DDL = "id BIGINT, at TIMESTAMP, day DATE, x DOUBLE, ok BOOLEAN, n INT, name STRING"
#: Rows enough to pass the sample's megabyte (about 70 bytes a row).
ROWS = 20_000


def _row(i: int) -> str:
    return (
        f"{i},2024-01-{1 + i % 28:02d} {i % 24:02d}:00:00,2024-02-{1 + i % 28:02d},"
        f"{i / 7:.4f},{'true' if i % 2 else 'false'},{i % 100},caf\u00e9 {i % 13}"
    )


def _source(path: Path, last: str | bytes | None = None, first: str | None = None) -> Path:
    """A CSV of `ROWS` good rows, `first` after the header and `last` at the end."""
    lines = [_row(i) for i in range(ROWS)]
    if first is not None:
        lines.insert(0, first)
    data = ("id,at,day,x,ok,n,name\n" + "\n".join(lines) + "\n").encode()
    if last is not None:
        data += (last if isinstance(last, bytes) else last.encode()) + b"\n"
    path.write_bytes(data)
    return path


def _ingest(
    spark: Any,
    src: Path,
    root: Path,
    version: str,
    *,
    mode: str = "permissive",
    partition_by: tuple[str, ...] = (),
) -> ingest.Result:
    options = read_options.ReadOptions(schema_ddl=DDL, mode=mode)
    request = ingest.Request(
        src=str(src),
        root=str(root),
        name="t",
        version=version,
        options=options,
        partition_by=partition_by,
    )
    return ingest.run(spark, request, say=lambda line: None)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The `strict` argument of every frame write, in order."""
    seen: list[bool] = []
    real = staged_write.write_frame

    def spy(*args: Any, strict: bool, **kwargs: Any) -> Any:
        seen.append(strict)
        return real(*args, strict=strict, **kwargs)

    monkeypatch.setattr(staged_write, "write_frame", spy)
    return seen


def _full_only(
    spark: Any,
    src: Path,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    partition_by: tuple[str, ...] = (),
) -> Any:
    """The version the full frame alone writes (no strict read tried)."""
    with monkeypatch.context() as patch:
        patch.setattr(typed_frames, "markers_at_start", lambda src, options: True)
        return _ingest(spark, src, root, "full", partition_by=partition_by)


def _same_version(spark: Any, a: ingest.Result, b: ingest.Result) -> None:
    def rows(target: str) -> list[Any]:
        return sorted(spark.read.parquet(target).collect(), key=repr)

    assert rows(a.target) == rows(b.target)
    for key in ("rows", "schema", "columns", "bad_rows"):
        left, right = a.manifest[key], b.manifest[key]
        if key == "bad_rows" and left["quarantine"]:
            assert bad_rows.read_quarantine(a.target) == bad_rows.read_quarantine(b.target)
        assert left == right, key


def _no_leftovers(root: Path) -> None:
    """No staged write left under `root` (the publish lock file stays)."""
    staged = [p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(".")]
    assert not staged and not [p.name for p in root.iterdir() if "strict" in p.name]


@pytest.mark.parametrize("partition_by", [(), ("ok",)])
def test_a_clean_source_is_written_by_the_strict_read_alone(
    spark: Any,
    tmp_path: Path,
    writes: list[bool],
    monkeypatch: pytest.MonkeyPatch,
    partition_by: tuple[str, ...],
) -> None:
    src = _source(tmp_path / "clean.csv")
    root = tmp_path / "root"
    strict = _ingest(spark, src, root, "v1", partition_by=partition_by)
    assert writes == [True]
    assert strict.manifest["rows"] == ROWS and strict.manifest["bad_rows"]["count"] == 0
    full = _full_only(spark, src, root, monkeypatch, partition_by)
    _same_version(spark, strict, full)
    assert writes == [True, False]
    _no_leftovers(root)


@pytest.mark.parametrize(
    ("last", "bad", "null_x"),
    [
        pytest.param(f"{ROWS},2024-01-01 00:00:00,2024-02-01,abc,true,1,x", 1, 0, id="a-word"),
        pytest.param(f"{ROWS},2024-01-01 00:00:00,2024-02-01,NA,true,1,x", 0, 1, id="a-marker"),
        pytest.param(f"{ROWS},2024-01-01 00:00:00,2024-02-01,1.5,true,1,x,extra", 1, 0, id="extra"),
        pytest.param(f"{ROWS},2024-13-01 00:00:00,2024-02-01,1.5,true,1,x", 1, 0, id="a-month"),
        pytest.param(
            f"{ROWS},2024-01-01 00:00:00,2024-02-01,1.5,true,1,".encode() + b"\xff\xfe",
            1,
            0,
            id="bad-utf8",
        ),
    ],
)
def test_a_row_past_the_sample_makes_the_full_read_write_the_same_version(
    spark: Any,
    tmp_path: Path,
    writes: list[bool],
    monkeypatch: pytest.MonkeyPatch,
    last: str | bytes,
    bad: int,
    null_x: int,
) -> None:
    """The strict read stops at the last row (a word in a number column, a marker, a field
    too many, a month 13, invalid UTF-8 in text); the full read writes the version, and
    nothing of the stopped write is left."""
    src = _source(tmp_path / "late.csv", last=last)
    root = tmp_path / "root"
    assert not typed_frames.markers_at_start(str(src), read_options.ReadOptions(schema_ddl=DDL))

    result = _ingest(spark, src, root, "v1")

    assert writes == [True, False]
    assert result.manifest["rows"] == ROWS + 1 - bad
    assert result.manifest["bad_rows"]["count"] == bad
    assert result.manifest["columns"]["x"]["nulls"] == null_x
    if bad:
        (quarantined,) = bad_rows.read_quarantine(result.target)
        assert quarantined["line"] == ROWS + 2  # the header, the rows, then this one
    _same_version(spark, result, _full_only(spark, src, root, monkeypatch))
    _no_leftovers(root)


def test_failfast_names_a_bad_row_the_strict_read_met(spark: Any, tmp_path: Path) -> None:
    src = _source(tmp_path / "late.csv", last=f"{ROWS},2024-01-01,2024-02-01,abc,true,1,x")
    root = tmp_path / "root"
    with pytest.raises(pipeline_errors.BadRowsError, match=rf"late.csv, line {ROWS + 2}: column x"):
        _ingest(spark, src, root, "v1", mode="failfast")
    assert not (root / "t@v1").exists()
    _no_leftovers(root)


def test_markers_at_the_start_skip_the_strict_read(
    spark: Any, tmp_path: Path, writes: list[bool]
) -> None:
    """R's `NA` in the first rows: the parser would stop at once, so the full read goes
    first (and alone)."""
    src = _source(tmp_path / "r.csv", first="-1,NA,NA,NA,NA,NA,NA")
    result = _ingest(spark, src, tmp_path / "root", "v1")
    assert writes == [False]
    assert result.manifest["rows"] == ROWS + 1
    assert result.manifest["columns"]["x"]["nulls"] == 1
    assert result.manifest["columns"]["name"]["nulls"] == 0  # text keeps its `NA`


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("a,b\n1,NA\n", True),
        ("a,b\nNA,1\n", True),
        ("a,b\r\n1,NA\r\n", True),
        ('a,b\n1,"NA"\n', True),
        ("a,b\n1, NA \n", True),
        ("a,b\n1,\\N\n", True),
        ("a,b\n1,null\n", True),
        ("a,b\n1,NAMIBIA\n", False),
        ("a,b\n1,BANANA\n", False),
        ("a,b\n1,nullable\n", False),
        ("a,b\n1,\n", False),  # empty fields are read as null by both reads
        ("a,b\n1,2\n", False),
    ],
)
def test_the_marker_sample_finds_markers_as_fields_only(
    tmp_path: Path, text: str, found: bool
) -> None:
    src = tmp_path / "s.csv"
    src.write_text(text)
    assert typed_frames.markers_at_start(str(src), read_options.ReadOptions()) is found


def test_the_marker_sample_follows_the_delimiter_and_charset(tmp_path: Path) -> None:
    semicolons = read_options.ReadOptions(delimiter=";")
    src = tmp_path / "s.csv"
    src.write_text("a;b\n1;NA\n")
    assert typed_frames.markers_at_start(str(src), semicolons)
    src.write_text("a;b\n1,NA;2\n")  # `1,NA` is one field
    assert not typed_frames.markers_at_start(str(src), semicolons)
    wide = tmp_path / "w.csv"
    wide.write_text("a,b\n1,NA\n", encoding="utf-16")
    assert typed_frames.markers_at_start(str(wide), read_options.ReadOptions(encoding="utf-16"))
    custom = read_options.ReadOptions(null_values=("missing",))
    src.write_text("a,b\n1,NA\n2,missing\n")
    assert typed_frames.markers_at_start(str(src), custom)
    src.write_text("a,b\n1,NA\n")
    assert not typed_frames.markers_at_start(str(src), custom)


def test_a_version_written_strictly_is_described_as_any_other(spark: Any, tmp_path: Path) -> None:
    """The manifest of a strict write: rows counted from the files, the source's checksum,
    and the data files that are in the published directory (renamed from the strict write's
    own), no other."""
    src = _source(tmp_path / "clean.csv")
    result = _ingest(spark, src, tmp_path / "root", "v1")
    on_disk = manifest.read(result.target)
    assert on_disk is not None and on_disk["rows"] == ROWS
    assert on_disk["source"]["sha256"] == manifest.source_files(str(src))["sha256"]
    published = {
        str(p.relative_to(result.target))
        for p in Path(result.target).rglob("*.parquet")
        if not p.name.startswith(".")
    }
    assert published and {f["path"] for f in on_disk["files"]} == published


def test_the_strict_reads_stop_is_not_logged_and_the_log_levels_come_back(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's ERROR reports of the stopped task, job and write (three stack traces for one
    expected stop) are off during the strict write only, and back at their levels after.
    (The JVM writes to the stderr it was started with, which pytest cannot capture: the
    levels are read instead.)"""
    log4j = spark._jvm.org.apache.logging.log4j

    def levels() -> dict[str, str]:
        return {
            name: str(log4j.LogManager.getLogger(name).getLevel())
            for name in staged_write._TASK_FAILURE_LOGGERS
        }

    during: dict[bool, dict[str, str]] = {}
    real = staged_write.write_frame

    def spy(*args: Any, strict: bool, **kwargs: Any) -> Any:
        during[strict] = levels()
        return real(*args, strict=strict, **kwargs)

    monkeypatch.setattr(staged_write, "write_frame", spy)
    before = levels()
    src = _source(tmp_path / "late.csv", last=f"{ROWS},2024-01-01,2024-02-01,abc,true,1,x")
    result = _ingest(spark, src, tmp_path / "root", "v1")
    assert result.manifest["bad_rows"]["count"] == 1
    assert set(during[True].values()) == {"OFF"}
    assert during[False] == before == levels() and "OFF" not in before.values()
