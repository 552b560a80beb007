"""The dataset pipeline: make raw data, and turn raw CSV/JSON into the Parquet datasets
the query worker serves.

    python -m spark_workers.pipeline generate RAW_DIR --rows 100000 [--kind trips|sales]
    python -m spark_workers.pipeline ingest RAW_DIR DEST_ROOT --name trips [--partition-by city]

`generate` is deterministic (every value is a hash of the row number and `--seed`), so a
benchmark or a demo sees the same data on every machine. `ingest` writes
`DEST_ROOT/NAME` (or `DEST_ROOT/NAME@VERSION`), the directory a worker key `NAME`
(`NAME@VERSION`) reads; each stage prints a progress line with its duration.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from spark_workers import catalog, session
from spark_workers import settings as settings_mod

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])

CITIES = ["Paris", "Lyon", "Marseille", "Lille", "Nantes", "Bordeaux", "Toulouse", "Nice"]
PAYMENTS = ["card", "cash", "app"]
PRODUCTS = ["ticket", "pass", "subscription", "parking", "bike"]


class Progress:
    """Numbered stage lines: `[2/3] writing parquet ... done in 1.2 s`."""

    def __init__(self, stages: int, *, echo: bool = True) -> None:
        self.stages = stages
        self.current = 0
        self.echo = echo

    @contextmanager
    def stage(self, title: str) -> Iterator[dict[str, object]]:
        self.current += 1
        info: dict[str, object] = {}
        self._print(f"[{self.current}/{self.stages}] {title} ...")
        started = time.perf_counter()
        yield info
        extra = "".join(f", {k} {v}" for k, v in info.items())
        self._print(
            f"[{self.current}/{self.stages}] {title}: done in "
            f"{time.perf_counter() - started:.1f} s{extra}"
        )

    def _print(self, line: str) -> None:
        if self.echo:
            typer.echo(line)


def _spark(master: str) -> tuple[SparkSession, bool]:
    """A session for the job, and whether this job owns it (and must stop it)."""
    from pyspark import SparkContext

    owned = SparkContext._active_spark_context is None
    settings = settings_mod.SparkWorkerSettings(
        master=master, app_name="osrdyne-pipeline", shuffle_partitions=8
    )
    return session.build_session(settings), owned


def _uniform(seed: int, salt: int) -> Column:
    """A deterministic value in [0, 1) from the row number."""
    from pyspark.sql import functions as F  # noqa: N812

    return (F.abs(F.xxhash64(F.col("id"), F.lit(seed), F.lit(salt))) % 1_000_000) / 1_000_000.0


def _pick(values: list[str], u: Column) -> Column:
    from pyspark.sql import functions as F  # noqa: N812

    arr = F.array(*[F.lit(v) for v in values])
    return F.element_at(arr, (u * len(values)).cast("int") + 1)


def trips(spark: SparkSession, rows: int, seed: int) -> DataFrame:
    """Synthetic taxi trips: city, time, passengers, distance, fare, tip, payment."""
    from pyspark.sql import functions as F  # noqa: N812

    base = spark.range(rows)
    distance = F.round(_uniform(seed, 3) * 50 + 0.5, 2)
    return base.select(
        F.col("id").alias("trip_id"),
        _pick(CITIES, _uniform(seed, 1)).alias("city"),
        (
            F.timestamp_seconds(
                F.lit(1_704_067_200) + (_uniform(seed, 2) * 31_536_000).cast("long")
            )
        ).alias("pickup_time"),
        ((_uniform(seed, 4) * 6).cast("int") + 1).alias("passengers"),
        distance.alias("distance_km"),
        F.round(distance * 1.9 + 4 + _uniform(seed, 5) * 3, 2).alias("fare"),
        F.round(_uniform(seed, 6) * 8, 2).alias("tip"),
        _pick(PAYMENTS, _uniform(seed, 7)).alias("payment"),
    )


def sales(spark: SparkSession, rows: int, seed: int) -> DataFrame:
    """Synthetic sales: store, product, day, quantity, unit price."""
    from pyspark.sql import functions as F  # noqa: N812

    return spark.range(rows).select(
        F.col("id").alias("sale_id"),
        F.concat(F.lit("store-"), (_uniform(seed, 1) * 20).cast("int").cast("string")).alias(
            "store"
        ),
        _pick(PRODUCTS, _uniform(seed, 2)).alias("product"),
        F.date_add(F.lit("2024-01-01").cast("date"), (_uniform(seed, 3) * 365).cast("int")).alias(
            "day"
        ),
        ((_uniform(seed, 4) * 10).cast("int") + 1).alias("quantity"),
        F.round(_uniform(seed, 5) * 100 + 1, 2).alias("unit_price"),
    )


GENERATORS = {"trips": trips, "sales": sales}


@app.command()
def generate(
    dest: Annotated[str, typer.Argument(help="Directory to write the raw files to.")],
    rows: Annotated[int, typer.Option(min=1, help="Number of rows.")] = 100_000,
    kind: Annotated[str, typer.Option(help="Data set: trips or sales.")] = "trips",
    fmt: Annotated[str, typer.Option("--format", help="Raw format: csv or json.")] = "csv",
    seed: Annotated[int, typer.Option(help="Seed: same seed, same data.")] = 42,
    files: Annotated[int, typer.Option(min=1, help="Number of output files.")] = 2,
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[*]",
) -> None:
    """Write deterministic synthetic raw data (CSV or JSON lines)."""
    if kind not in GENERATORS:
        raise typer.BadParameter(f"kind must be one of {sorted(GENERATORS)}")
    if fmt not in ("csv", "json"):
        raise typer.BadParameter("format must be csv or json")
    progress = Progress(2)
    with progress.stage("starting Spark") as info:
        spark, owned = _spark(master)
        info["version"] = spark.version
    with progress.stage(f"generating {rows} {kind} rows as {fmt} into {dest}") as info:
        df = GENERATORS[kind](spark, rows, seed).repartition(files)
        writer = df.write.mode("overwrite")
        if fmt == "csv":
            writer.option("header", "true").csv(dest)
        else:
            writer.json(dest)
        info["files"] = files
    if owned:
        spark.stop()


@app.command()
def ingest(
    src: Annotated[str, typer.Argument(help="Raw CSV/JSON file or directory.")],
    dest_root: Annotated[str, typer.Argument(help="Dataset root the workers serve.")],
    name: Annotated[str, typer.Option(help="Dataset name (the worker key).")],
    version: Annotated[str | None, typer.Option(help="Dataset version (key name@version).")] = None,
    partition_by: Annotated[
        list[str] | None, typer.Option(help="Partition column (repeatable).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="Raw format: auto, csv or json.")] = "auto",
    files: Annotated[int, typer.Option(min=1, help="Parquet files per partition.")] = 2,
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[*]",
) -> None:
    """Read raw CSV/JSON, write it as a (partitioned) Parquet dataset."""
    key = catalog.DatasetKey.parse(name if version is None else f"{name}@{version}")
    if key.filters:
        raise typer.BadParameter("a dataset name cannot contain '/'")
    source_format = _source_format(src) if fmt == "auto" else fmt
    target = os.path.join(dest_root, key.dataset)
    progress = Progress(4)
    with progress.stage("starting Spark") as info:
        spark, owned = _spark(master)
        info["version"] = spark.version
    with progress.stage(f"reading {source_format} from {src}") as info:
        reader = spark.read
        if source_format == "csv":
            reader = reader.option("header", "true").option("inferSchema", "true")
        df = reader.format(source_format).load(src)
        info["columns"] = len(df.columns)
    with progress.stage(f"checking columns {partition_by or []}"):
        for column in partition_by or []:
            if column not in df.columns:
                raise typer.BadParameter(f"no column {column!r} in {sorted(df.columns)}")
    with progress.stage(f"writing parquet to {target}") as info:
        out = df.repartition(files, *partition_by) if partition_by else df.repartition(files)
        writer = out.write.mode("overwrite")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.parquet(target)
        info["rows"] = spark.read.parquet(target).count()
    typer.echo(f"dataset {key.dataset!r} ready under {dest_root}")
    if owned:
        spark.stop()


def _source_format(src: str) -> str:
    detected = catalog._detect_format(src)
    return detected if detected in ("csv", "json") else "csv"


if __name__ == "__main__":
    app()
