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

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, NoReturn

import pydantic
import typer

from spark_workers import (
    catalog,
    manifest,
    pipeline_errors,
    read_options,
    session,
    versions,
)
from spark_workers import checks as checks_mod
from spark_workers import ingest as ingest_mod
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
def ingest(  # noqa: C901 - one option per reader setting, checked in ReadOptions
    src: Annotated[str, typer.Argument(help="Raw CSV, JSON lines or Parquet file or directory.")],
    dest_root: Annotated[str, typer.Argument(help="Dataset root the workers serve.")],
    name: Annotated[str, typer.Option(help="Dataset name (the worker key).")],
    version: Annotated[
        str | None, typer.Option(help="Version name (default: the time, UTC).")
    ] = None,
    partition_by: Annotated[
        list[str] | None, typer.Option(help="Partition column (repeatable).")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="Raw format: auto, csv, json or parquet.")
    ] = "auto",
    schema: Annotated[
        str | None, typer.Option(help="Column names and types as DDL: 'a INT, b DATE'.")
    ] = None,
    schema_file: Annotated[str | None, typer.Option(help="A file holding the DDL schema.")] = None,
    null_value: Annotated[
        list[str] | None,
        typer.Option(
            help="Missing-value marker of typed columns (repeatable; replaces "
            "the default NA, N/A, NULL, null, \\N and empty)."
        ),
    ] = None,
    text_null_value: Annotated[
        list[str] | None,
        typer.Option(help="Marker that is missing in text columns too (repeatable)."),
    ] = None,
    date_format: Annotated[str | None, typer.Option(help="Date pattern: dd/MM/yyyy.")] = None,
    timestamp_format: Annotated[
        str | None, typer.Option(help="Timestamp pattern: yyyy-MM-dd HH:mm:ss.")
    ] = None,
    delimiter: Annotated[str | None, typer.Option(help="CSV field delimiter (\\t: tab).")] = None,
    quote: Annotated[str | None, typer.Option(help='CSV quote character (").')] = None,
    escape: Annotated[
        str | None, typer.Option(help='CSV escape character (" : doubled quotes).')
    ] = None,
    encoding: Annotated[str | None, typer.Option(help="Charset (UTF-8).")] = None,
    multiline: Annotated[bool, typer.Option(help="Records may span lines.")] = False,
    header: Annotated[bool | None, typer.Option(help="CSV: a header line (default).")] = None,
    mode: Annotated[
        str, typer.Option(help="Bad rows: permissive, dropmalformed or failfast.")
    ] = "permissive",
    max_bad_rows: Annotated[int, typer.Option(help="Most bad rows accepted.")] = 1000,
    checks_file: Annotated[
        str | None, typer.Option("--checks", help="JSON file of declared checks.")
    ] = None,
    promote: Annotated[
        bool, typer.Option(help="Point NAME at the new version once published.")
    ] = True,
    files: Annotated[int, typer.Option(min=1, help="Parquet files per partition.")] = 2,
    append: Annotated[
        bool,
        typer.Option(
            help="The new version holds the current version's rows and these (typed with its "
            "schema)."
        ),
    ] = False,
    dedup_on: Annotated[
        list[str] | None,
        typer.Option(
            help="Column identifying a row (repeatable): the first row of each key is kept; "
            "with --append, rows whose key the dataset holds are dropped."
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(help="Print the schema the ingest would use (types, formats), write nothing."),
    ] = False,
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[*]",
) -> None:
    """Read raw files, type and check them, publish a new dataset version (Parquet)."""
    key = _dataset_key(name, version)
    if catalog._local_path(dest_root) is None:
        _fail(
            "the dataset root must be a local or mounted directory (a version is published "
            "by renaming it there)"
        )
    try:
        if schema is not None and schema_file is not None:
            raise pipeline_errors.ReadOptionsError("--schema or --schema-file, not both")
        ddl = _read_schema_file(schema_file) if schema_file is not None else schema
        values: dict[str, object] = {
            "format": _source_format(src) if fmt == "auto" else fmt,
            "schema_ddl": ddl,
            "date_format": date_format,
            "timestamp_format": timestamp_format,
            "delimiter": delimiter,
            "quote": quote,
            "escape": escape,
            "encoding": encoding,
            "multiline": multiline,
            "header": header,
            "mode": mode,
            "max_bad_rows": max_bad_rows,
        }
        if null_value is not None:
            values["null_values"] = tuple(null_value)
        if text_null_value is not None:
            values["text_null_values"] = tuple(text_null_value)
        options = read_options.ReadOptions.model_validate(values)
        declared = checks_mod.Checks.load(checks_file) if checks_file is not None else None
    except pydantic.ValidationError as exc:
        _fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    except pipeline_errors.PipelineError as exc:
        _fail(str(exc))
    request = ingest_mod.Request(
        src=src,
        root=dest_root,
        name=key.name,
        version=key.version or versions.new_version(),
        options=options,
        checks=declared,
        partition_by=tuple(partition_by or ()),
        files=files,
        promote=promote,
        append=append,
        dedup_on=tuple(dedup_on or ()),
        dry_run=dry_run,
    )
    progress = Progress(2)
    with progress.stage("starting Spark") as info:
        spark, owned = _spark(master)
        info["version"] = spark.version
    try:
        with progress.stage(f"ingesting {options.format} from {src} as {request.dataset}") as info:
            result = ingest_mod.run(spark, request, say=typer.echo)
            if not dry_run:
                info["rows"] = result.manifest["rows"]
                info["bad rows"] = len(result.bad)
    except pipeline_errors.PipelineError as exc:
        _fail(str(exc))
    except Exception as exc:  # Spark's own failures (a file gone, a disk full...): one line
        if not type(exc).__module__.startswith(("pyspark", "py4j")):
            raise
        lines = str(exc).strip().splitlines()
        _fail(f"Spark failed, nothing published: {lines[0] if lines else type(exc).__name__}")
    finally:
        if owned:
            spark.stop()
    if dry_run:
        typer.echo("dry run: nothing written")
        return
    pointer = f", {request.name!r} points at it" if promote else ""
    typer.echo(f"dataset {request.dataset!r} published under {dest_root}{pointer}")


@app.command()
def describe(
    dest_root: Annotated[str, typer.Argument(help="Dataset root the workers serve.")],
    key: Annotated[str, typer.Argument(help="NAME (its current version) or NAME@VERSION.")],
    ddl: Annotated[bool, typer.Option(help="Print only the schema, as DDL.")] = False,
) -> None:
    """Print a dataset version's manifest (JSON): schema, rows, column statistics, source."""
    try:
        location = catalog.Catalog(dest_root, fmt="parquet").resolve(key)
    except catalog.DatasetError as exc:
        _fail(str(exc))
    described = manifest.read(location.uri) if os.path.isdir(location.uri) else None
    if described is None:
        _fail(f"{location.key.dataset!r} has no manifest (not written by pipeline ingest)")
    typer.echo(described["schema_ddl"] if ddl else json.dumps(described, indent=1))


def _dataset_key(name: str, version: str | None) -> catalog.DatasetKey:
    try:
        key = catalog.DatasetKey.parse(name if version is None else f"{name}@{version}")
    except catalog.DatasetError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if key.filters or (version is None and key.version is not None):
        raise typer.BadParameter("--name is a name, without '/' or '@' (see --version)")
    return key


def _read_schema_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as source:
            text = source.read(read_options.MAX_SCHEMA_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise pipeline_errors.ReadOptionsError(f"cannot read the schema file: {exc}") from exc
    return text.strip()


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _source_format(src: str) -> str:
    """csv, json or parquet from the files' extensions (csv when none tells)."""
    detected = catalog._detect_format(src)
    if detected != "parquet":
        return detected
    if os.path.isfile(src):
        return "parquet" if src.endswith(".parquet") else "csv"
    for _dirpath, _dirnames, filenames in os.walk(src):
        if any(f.endswith(".parquet") for f in filenames):
            return "parquet"
    return "csv"


if __name__ == "__main__":
    app()
