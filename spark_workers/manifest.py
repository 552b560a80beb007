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

`min`/`max` are given for numbers, dates (ISO text) and timestamps (text, UTC); `distinct`
is Spark's `approx_count_distinct` (about 5% relative error). The statistics are observed
while the rows are written (`ingest`: no pass of their own), but null counts and the min
and max of integers and dates, which Parquet writes into every column chunk's footer
anyway: those are read from the footers after the write (`footer_statistics`). The
manifest is written inside the version before it is made visible (`versions`): a visible
version always has one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructField, StructType

FILE_NAME = "_manifest.json"
FORMAT = 1
_ORDERED = ("byte", "short", "integer", "long", "float", "double", "decimal", "date")
#: Types whose Parquet column chunks carry their null count (Spark writes statistics for
#: every flat column; timestamps are INT96, which carry none: observed instead).
_FOOTER_NULLS = (
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "decimal",
    "string",
    "binary",
    "boolean",
    "date",
)
#: Types whose footer min and max are Spark's own min and max: signed integers and days.
#: Floating point is observed (the footers' treatment of NaN and -0.0 is not Spark's), and
#: so are decimals (stored three ways, by precision).
_FOOTER_MIN_MAX = ("byte", "short", "integer", "long", "date")


def statistics(schema: StructType, *, in_footers: frozenset[str] = frozenset()) -> list[Column]:
    """Aggregates observed while the rows are written: the row count, and per column its
    nulls, min and max (but what the Parquet footers will hold for the columns named in
    `in_footers`: `footer_columns`, read after the write by `footer_statistics`) and its
    distinct estimate."""
    from pyspark.sql import functions as F  # noqa: N812

    out = [F.count(F.lit(1)).alias("stat:rows")]
    for i, field in enumerate(schema.fields):
        in_footer = field.name in in_footers
        out += nulls_min_max(
            i, field, nulls=not in_footer, min_max=not (in_footer and _footer_min_max(field))
        )
        out.append(F.approx_count_distinct(F.col(f"`{field.name}`")).alias(f"stat:{i}:distinct"))
    return out


def nulls_min_max(
    i: int, field: StructField, *, nulls: bool = True, min_max: bool = True
) -> list[Column]:
    """Aggregates of column `i`'s nulls and (ordered types only) its min and max."""
    from pyspark.sql import functions as F  # noqa: N812

    col = F.col(f"`{field.name}`")
    out = [F.count_if(col.isNull()).alias(f"stat:{i}:nulls")] if nulls else []
    if not min_max:
        return out
    if "timestamp" in field.dataType.typeName():  # as text in the session's zone (UTC)
        out.append(F.min(col).cast("string").alias(f"stat:{i}:min"))
        out.append(F.max(col).cast("string").alias(f"stat:{i}:max"))
    elif field.dataType.typeName() in _ORDERED:
        out.append(F.min(col).alias(f"stat:{i}:min"))
        out.append(F.max(col).alias(f"stat:{i}:max"))
    return out


def footer_columns(schema: StructType, partition_by: tuple[str, ...]) -> frozenset[str]:
    """The columns whose null count (and, for integers and dates, min and max) are read from
    the Parquet footers the write produces anyway, instead of being observed row by row:
    every column of a flat type stored in the files (not a partition column)."""
    return frozenset(
        f.name
        for f in schema.fields
        if f.dataType.typeName() in _FOOTER_NULLS and f.name not in partition_by
    )


def footer_statistics(
    directory: str, schema: StructType, names: frozenset[str]
) -> tuple[dict[str, Any], list[str]]:
    """`stat:<i>:nulls` (and `:min`, `:max` where `footer_columns` says) of the columns
    `names` from the footers of the Parquet files written to `directory`, and the columns
    some footer had no such statistic for (to be counted by a query instead)."""
    import pyarrow.parquet as pq

    wanted = {f.name: (i, f) for i, f in enumerate(schema.fields) if f.name in names}
    nulls = dict.fromkeys(wanted, 0)
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    missing: set[str] = set()
    for entry in data_files(directory):
        metadata = pq.read_metadata(os.path.join(directory, entry["path"]))
        index = {metadata.schema.column(j).path: j for j in range(metadata.num_columns)}
        for name, (_, field) in wanted.items():
            if name not in index:
                missing.add(name)
                continue
            for group in range(metadata.num_row_groups):
                chunk = metadata.row_group(group).column(index[name])
                stats = chunk.statistics
                if stats is None or not stats.has_null_count:
                    missing.add(name)
                    continue
                nulls[name] += stats.null_count
                if not _footer_min_max(field) or chunk.num_values == stats.null_count:
                    continue
                if not stats.has_min_max:
                    missing.add(name)
                    continue
                lows[name] = stats.min if name not in lows else min(lows[name], stats.min)
                highs[name] = stats.max if name not in highs else max(highs[name], stats.max)
    found: dict[str, Any] = {}
    for name, (i, field) in wanted.items():
        if name in missing:
            continue
        found[f"stat:{i}:nulls"] = nulls[name]
        if _footer_min_max(field):
            found[f"stat:{i}:min"] = lows.get(name)
            found[f"stat:{i}:max"] = highs.get(name)
    return found, sorted(missing)


def _footer_min_max(field: StructField) -> bool:
    return field.dataType.typeName() in _FOOTER_MIN_MAX


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


def source_files(src: str) -> dict[str, Any]:
    """The source's files with their SHA-256, and one checksum over all of them (by
    relative path and content: the same files anywhere give the same checksum). A remote
    source (`s3a://`...) is named, not read twice: no checksum."""
    if "://" in src and not src.startswith("file://"):
        return {"uri": src, "files": [], "sha256": None}
    src = src.removeprefix("file://")
    if os.path.isfile(src):
        paths = [src]
        base = os.path.dirname(src)
    else:
        base = src
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
    whole = hashlib.sha256()
    files = []
    for path in sorted(paths):
        digest = hashlib.sha256()
        with open(path, "rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
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
