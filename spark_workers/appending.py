"""Appending to a dataset (incremental ingest), and deduplication on a declared key.

`pipeline ingest SRC ROOT --name NAME --append` makes a new version holding the current
version's rows and the new file's, published like any version (written aside, renamed, the
link moved): workers of `NAME@OLD` are untouched, `NAME` names the new version. The new rows
are typed with the dataset's own schema (its manifest's), so an increment cannot change a
column's type; a schema declared with `--schema` must be that one. The version is written
whole (the old rows copied), so its statistics and checks cover every row: an append costs
the dataset's size, not only the increment's.

`--dedup-on COL` (repeatable) declares the key that identifies a row:

- within the new rows, the first row of each key (in file order) is kept;
- on append, a new row whose key is already in the dataset is dropped: the dataset's row is
  kept, so appending the same file twice changes nothing;
- null key values compare equal (a row with a null key is one key);
- the manifest says how many rows were dropped as duplicates (`append.duplicates`).

Two appends to one name at once: the second to publish finds the link moved (by the first)
and fails without publishing; run it again (`versions.publish`'s `expected` check).
"""

from __future__ import annotations

import dataclasses
import os
from functools import reduce
from typing import TYPE_CHECKING

from spark_workers import manifest, read_options, versions
from spark_workers.pipeline_errors import AppendError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: The column holding each row's position in its source while deduplicating.
_ORDER = "_source_order"


@dataclasses.dataclass(frozen=True)
class Base:
    """The version an append adds to."""

    dataset: str  # NAME@VERSION
    path: str
    schema: StructType
    partition_by: tuple[str, ...]
    rows: int


def base_of(spark: SparkSession, root: str, name: str) -> Base | None:
    """The current version of `name` to append to; None when `name` has none yet (the
    append is then the first version)."""
    dataset = versions.current(root, name)
    if dataset is None:
        return None
    path = os.path.join(root, dataset)
    described = manifest.read(path)
    if described is None or not isinstance(described.get("schema_ddl"), str):
        raise AppendError(
            f"{dataset!r} has no manifest with its schema (not made by `pipeline ingest`): "
            "cannot append to it"
        )
    return Base(
        dataset=dataset,
        path=path,
        schema=read_options.parse_schema(spark, described["schema_ddl"]),
        partition_by=tuple(described.get("partition_by") or ()),
        rows=int(described.get("rows") or 0),
    )


def check_compatible(
    base: Base, declared: StructType | None, partition_by: tuple[str, ...]
) -> None:
    """Refuse an append whose declared schema or partitioning is not the dataset's."""
    if declared is not None and manifest.schema_ddl(declared) != manifest.schema_ddl(base.schema):
        raise AppendError(
            f"the declared schema is not {base.dataset!r}'s: "
            f"{manifest.schema_ddl(base.schema)} (leave --schema out to use it)"
        )
    if partition_by and partition_by != base.partition_by:
        raise AppendError(
            f"{base.dataset!r} is partitioned by {list(base.partition_by)}, not "
            f"{list(partition_by)}"
        )


def check_key(keys: tuple[str, ...], schema: StructType) -> None:
    missing = [k for k in keys if k not in schema.fieldNames()]
    if missing:
        raise AppendError(f"no column {missing} to deduplicate on in {schema.fieldNames()}")


def first_of_each_key(rows: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    """`rows` with one row per key: the first in file order (the read's own order, fixed
    before any shuffle)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812

    columns = rows.columns
    ordered = rows.withColumn(_ORDER, F.monotonically_increasing_id())
    window = Window.partitionBy(*[F.col(f"`{k}`") for k in keys]).orderBy(_ORDER)
    ranked = ordered.withColumn("_rank", F.row_number().over(window))
    return ranked.where(F.col("_rank") == 1).select(*[F.col(f"`{c}`") for c in columns])


def read_base(spark: SparkSession, base: Base) -> DataFrame:
    """The base version's rows, in its schema's column order."""
    from pyspark.sql import functions as F  # noqa: N812

    rows = spark.read.schema(base.schema).parquet(base.path)
    return rows.select(*[F.col(f"`{n}`") for n in base.schema.fieldNames()])


def not_in(rows: DataFrame, existing: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    """The rows of `rows` whose key is not in `existing` (null keys compare equal)."""
    from pyspark.sql import functions as F  # noqa: N812

    theirs = existing.select(*[F.col(f"`{k}`").alias(f"_key_{i}") for i, k in enumerate(keys)])
    same = reduce(
        lambda a, b: a & b,
        [rows[f"`{k}`"].eqNullSafe(theirs[f"_key_{i}"]) for i, k in enumerate(keys)],
    )
    return rows.join(theirs.distinct(), same, "left_anti")
