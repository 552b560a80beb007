"""The manifest of a dataset version: what it holds and how it was made, in `_manifest.json`.

    {"manifest": 1, "dataset": "flights@v2", "name": "flights", "version": "v2",
     "created": "2026-11-26T22:10:00Z", "rows": 3368,
     "schema": [{"name": "dep_time", "type": "int", "nullable": true}, ...],
     "schema_ddl": "`year` INT, `dep_time` INT, ...", "schema_inferred": true,
     "columns": {"dep_time": {"nulls": 81, "min": 1, "max": 2400, "distinct": 1003}, ...},
     "files": [{"path": "part-00000-....parquet", "bytes": 51234}, ...],
     "source": {"files": [{"path": "flights.csv", "bytes": 310538, "sha256": "..."}],
                "sha256": "..."},
     "options": {...the ingest's read options...},
     "bad_rows": {"mode": "permissive", "count": 2, "quarantine": "_quarantine/bad_rows.jsonl"},
     "checks": {...as declared...}}

`min`/`max` are given for numbers, dates (ISO text) and timestamps (text, UTC). The
statistics are counted on the files just written (`written.statistics`): with Arrow on the
driver for a column of at most 256 MiB, `distinct` then exact; by one Spark query otherwise
(partition columns, larger columns), `distinct` then Spark's `approx_count_distinct` (about
5% relative error). The manifest is written inside the version before it is made visible
(`versions`): a visible version always has one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

FILE_NAME = "_manifest.json"
FORMAT = 1
#: A text column's metadata key (in the Parquet files): its values look like dates, and
#: why the ingest kept it text, with the option that types it (`text_date_guard` reads it).
TEXT_DATES_METADATA = "osrdyne.dates_as_text"


def columns_from(counts: dict[str, Any], schema: StructType) -> dict[str, dict[str, Any]]:
    """Per-column statistics out of the aggregation's row."""
    columns: dict[str, dict[str, Any]] = {}
    for i, field in enumerate(schema.fields):
        stats: dict[str, Any] = {"nulls": counts[f"stat:{i}:nulls"]}
        if f"stat:{i}:min" in counts:
            stats["min"] = _json_value(counts[f"stat:{i}:min"])
            stats["max"] = _json_value(counts[f"stat:{i}:max"])
        stats["distinct"] = counts[f"stat:{i}:distinct"]
        columns[field.name] = stats
    return columns


def schema_entries(schema: StructType) -> list[dict[str, Any]]:
    return [
        {"name": f.name, "type": f.dataType.simpleString(), "nullable": f.nullable}
        for f in schema.fields
    ]


def schema_ddl(schema: StructType) -> str:
    """The schema as DDL, reusable as `--schema`."""
    return ", ".join(
        f"`{f.name.replace('`', '``')}` {f.dataType.simpleString().upper()}" for f in schema.fields
    )


def data_files(directory: str) -> list[dict[str, Any]]:
    """The data files of a written version (paths relative to it)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for filename in sorted(filenames):
            if filename.startswith((".", "_")):
                continue
            path = os.path.join(dirpath, filename)
            found.append({"path": os.path.relpath(path, directory), "bytes": os.path.getsize(path)})
    return found


def source_paths(src: str) -> tuple[str, list[str]] | None:
    """The files Spark reads for a local source (a file, or a directory's files but hidden
    ones and `_`-prefixed ones), and the directory they are named relative to; None for a
    remote source (`s3a://`...)."""
    if "://" in src and not src.startswith("file://"):
        return None
    src = src.removeprefix("file://")
    if os.path.isfile(src):
        return os.path.dirname(src), [src]
    paths = [
        os.path.join(dirpath, f)
        for dirpath, dirnames, filenames in os.walk(src)
        for f in filenames
        if not f.startswith((".", "_"))
        and not any(
            p.startswith((".", "_"))
            for p in os.path.relpath(dirpath, src).split(os.sep)
            if p != "."
        )
    ]
    return src, paths


class Stopped(Exception):
    """`source_files` was told to stop before it had read every file."""


def source_files(src: str, stop: threading.Event | None = None) -> dict[str, Any]:
    """The source's files with their SHA-256, and one checksum over all of them (by
    relative path and content: the same files anywhere give the same checksum). A remote
    source (`s3a://`...) is named, not read twice: no checksum. `stop`, once set, ends the
    reading at the next 1 MB block (Stopped): an ingest that fails early does not wait,
    nor make its process wait at exit, for a large source to be read to its end."""
    found = source_paths(src)
    if found is None:
        return {"uri": src, "files": [], "sha256": None}
    base, paths = found
    whole = hashlib.sha256()
    files = []
    for path in sorted(paths):
        digest = hashlib.sha256()
        with open(path, "rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                if stop is not None and stop.is_set():
                    raise Stopped(path)
                digest.update(block)
        rel = os.path.relpath(path, base)
        files.append({"path": rel, "bytes": os.path.getsize(path), "sha256": digest.hexdigest()})
        whole.update(f"{rel}\0{digest.hexdigest()}\n".encode())
    return {"files": files, "sha256": whole.hexdigest()}


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write(directory: str, manifest: dict[str, Any]) -> None:
    with open(os.path.join(directory, FILE_NAME), "w", encoding="utf-8") as out:
        json.dump(manifest, out, indent=1, ensure_ascii=False)
        out.write("\n")


def read(directory: str) -> dict[str, Any] | None:
    """The manifest of a version directory, or None (a dataset not made by `ingest`)."""
    path = os.path.join(directory, FILE_NAME)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as source:
        loaded = json.load(source)
    return loaded if isinstance(loaded, dict) else None


def _json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value != value:
        return "NaN"
    if hasattr(value, "is_finite"):  # Decimal
        return float(value)
    return value
