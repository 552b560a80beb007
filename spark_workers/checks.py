"""Declared checks, run at ingest: a dataset that fails one is not published.

    {"columns": {
        "year":     {"not_null": true, "min": 2013, "max": 2013},
        "carrier":  {"allowed": ["AA", "B6", "DL", "UA"]},
        "flight_id": {"unique": true},
        "time_hour": {"min": "2013-01-01", "max": "2014-01-01"}}}

(`pipeline ingest --checks FILE`). The file is validated first (unknown keys, unknown
columns, a range on a text column, a value outside the column's type, more than
`MAX_ALLOWED` allowed values are refused), then every check of every column is counted:
from the written files, with their statistics (`counters`: `not_null` on every type, ranges
on integers, allowed values of integers, booleans and text; by Arrow on the driver, or in
Spark's query on the files where Arrow does not read a column), the others while the rows
are written (a Spark observation: in the one that counts the bad rows, when nothing is
appended or deduplicated), `unique` from the written files' exact distinct counts
(`written`) or a grouping query (`unique_counts`); the report names each failed check with
its count and a few failing values. Counted as the rows went by, the bench's three
file-counted checks cost about 0.1 s of CPU per 1M rows in the write; from the files,
a few milliseconds.

pandera (0.35) was tried first: it installs and validates PySpark 4.3 DataFrames, but its
PySpark backend reports a failed check without how many rows failed nor which values, and
runs a Spark job per check (1M rows, 4 checks: 3.4 s against 1.3 s for one aggregation
counting every failure; ours are observed during the write). Four kinds of checks did not
justify that.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pydantic

from spark_workers import value_sql, written
from spark_workers.pipeline_errors import ChecksError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

MAX_ALLOWED = 1_000
#: Spark types whose exact distinct count by Arrow (`written.statistics`) is Spark's
#: grouping's: the same values are the same bytes, integers, days or microseconds. Floating
#: point is left to Spark's grouping (it takes -0.0 for 0.0 and every NaN for one value).
_ARROW_UNIQUE_TYPES = (
    "byte",
    "short",
    "integer",
    "long",
    "decimal",
    "string",
    "date",
    "boolean",
    "timestamp",
    "timestamp_ntz",
)
MAX_CHECK_FILE_BYTES = 1_000_000
#: Integer types: a `min`, `max` or `allowed` check on them is counted by Arrow from the
#: written files (exact integer comparisons, as Spark's).
_INTEGERS = ("byte", "short", "integer", "long")
_INTEGER_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
#: Types whose `allowed` check Arrow counts from the written files: integers, booleans and
#: text (Spark's `IN` compares text byte by byte, as Arrow does).
_ALLOWED_FROM_FILES = (*_INTEGERS, "boolean", "string")
_EXAMPLES = 5
Scalar = bool | int | float | str


class ColumnChecks(pydantic.BaseModel):
    """What one column must satisfy."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    not_null: bool = False
    unique: bool = False
    min: Scalar | None = None
    max: Scalar | None = None
    allowed: tuple[Scalar, ...] | None = pydantic.Field(default=None, max_length=MAX_ALLOWED)

    @pydantic.field_validator("min", "max", "allowed")
    @classmethod
    def _short(cls, value: Any) -> Any:
        for item in value if isinstance(value, tuple) else [value]:
            if isinstance(item, str) and len(item) > 200:
                raise ValueError("a value in a check is at most 200 characters")
        return value


class Checks(pydantic.BaseModel):
    """The checks of a dataset, by column."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    columns: dict[str, ColumnChecks] = pydantic.Field(default_factory=dict, max_length=1000)

    @classmethod
    def load(cls, path: str) -> Checks:
        try:
            with open(path, "rb") as source:
                text = source.read(MAX_CHECK_FILE_BYTES + 1)
        except OSError as exc:
            raise ChecksError(f"cannot read the checks file: {exc.strerror}") from exc
        if len(text) > MAX_CHECK_FILE_BYTES:
            raise ChecksError(f"a checks file is at most {MAX_CHECK_FILE_BYTES} bytes")
        try:
            return cls.model_validate_json(text)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ChecksError(f"invalid checks file: {problems}") from exc

    def bind(self, schema: StructType) -> None:
        """Refuse checks on columns the data does not have, or that cannot apply, and values
        that are not of the column's type (Spark would fail on them mid-ingest)."""
        types = {f.name: f.dataType.typeName() for f in schema.fields}
        for name, column in self.columns.items():
            if name not in types:
                raise ChecksError(f"checks name column {name!r}, not in {sorted(types)}")
            ordered = types[name] in written.ORDERED
            if (column.min is not None or column.max is not None) and not ordered:
                raise ChecksError(f"column {name!r} is {types[name]}: no min/max check on it")
            values = [v for v in (column.min, column.max, *(column.allowed or ())) if v is not None]
            for value in values:
                if not _fits(value, types[name]):
                    raise ChecksError(
                        f"column {name!r} is {types[name]}: {value!r} is not a value of it"
                    )


def _fits(value: Scalar, type_name: str) -> bool:
    """Whether a declared value can be compared with a column of `type_name`."""
    if type_name in ("date", "timestamp", "timestamp_ntz"):
        if not isinstance(value, str):
            return False
        try:
            parse = dt.date.fromisoformat if type_name == "date" else dt.datetime.fromisoformat
            parse(value)
        except ValueError:
            return False
        return True
    if type_name == "string":
        return isinstance(value, str)
    if type_name in ("float", "double", "decimal"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if type_name in _INTEGERS:
        # Within the column's type: Spark's cast of a wider literal fails mid-ingest.
        low, high = _INTEGER_RANGES[type_name]
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return type_name == "boolean" and isinstance(value, bool)


@dataclasses.dataclass
class Failure:
    column: str
    check: str
    rows: int
    examples: list[Any]

    def line(self) -> str:
        shown = f" (e.g. {', '.join(map(repr, self.examples))})" if self.examples else ""
        return f"  {self.column}: {self.check}: {self.rows} row(s) fail{shown}"


def _from_files(kind: str, type_name: str) -> bool:
    """Whether a check of `kind` on a column of `type_name` is counted from the written
    files (`counters`) instead of while the rows are written (`aggregates`): `not_null` on
    every type (the statistics' null count), `min` and `max` on integers, `allowed` on
    `_ALLOWED_FROM_FILES`. The others (dates, timestamps, floating point, decimals: a
    literal cast to the column's type, NaN's order) are left to Spark's own comparison."""
    if kind == "not_null":
        return True
    if kind in ("min", "max"):
        return type_name in _INTEGERS
    return kind == "allowed" and type_name in _ALLOWED_FROM_FILES


def _conditions(checks: Checks, schema: StructType) -> list[tuple[str, str, str, str]]:
    """(column, kind, label, SQL condition) of every counted check but `unique`: a row
    fails the check where the condition holds. Labels are `check:<i>:<kind>`, the value
    named in a range's (`check:1:min 1`)."""
    types = {f.name: f.dataType for f in schema.fields}
    out = []
    for i, (name, column) in enumerate(checks.columns.items()):
        col = value_sql.sql_name(name)
        type_sql = types[name].simpleString()
        prefix = f"check:{i}:"
        if column.not_null:
            out.append((name, "not_null", prefix + "not_null", f"{col} IS NULL"))
        if column.min is not None:
            literal = _literal(column.min, type_sql)
            out.append((name, "min", prefix + f"min {column.min!r}", f"{col} < {literal}"))
        if column.max is not None:
            literal = _literal(column.max, type_sql)
            out.append((name, "max", prefix + f"max {column.max!r}", f"{col} > {literal}"))
        if column.allowed is not None:
            allowed = ", ".join(_literal(v, type_sql) for v in column.allowed)
            out.append((name, "allowed", prefix + "allowed", f"NOT {col} IN ({allowed})"))
    return out


def aggregates(
    checks: Checks,
    schema: StructType,
    *,
    among: str | None = None,
    columns: frozenset[str] | None = None,
    from_files: bool = False,
) -> list[Column]:
    """Columns counting the rows that fail each check (names `check:<i>:<kind>`), among the
    rows where `among` (SQL) holds (every row without it): the checks counted while the
    rows are written, or with `from_files` those `counters` counts (for Spark's query on
    the written files, where Arrow does not read a column); only on `columns` when given.

    SQL text, one expression per count: built with Column objects, the bench's four checks
    took about 300 calls into the JVM. A check's value is a typed literal cast to the
    column's type, as `F.lit(value).cast(type)` makes it (`bind` has checked it fits)."""
    from pyspark.sql import functions as F  # noqa: N812

    types = {f.name: f.dataType.typeName() for f in schema.fields}
    out: list[Column] = []
    for name, kind, label, condition in _conditions(checks, schema):
        if _from_files(kind, types[name]) != from_files:
            continue
        if columns is not None and name not in columns:
            continue
        where = condition if among is None else f"({among}) AND ({condition})"
        out.append(F.expr(f"count_if({where}) AS {value_sql.sql_name(label)}"))
    return out


def counters(checks: Checks, schema: StructType) -> dict[str, written.Counter]:
    """Per column, the counter of its checks counted from the written files (`_from_files`),
    with its statistics (`written.statistics`): by Arrow from the column's values, or by
    Spark's aggregates where Arrow does not read it. tests/spark/test_checks.py compares
    both with Spark's count over the same rows."""
    types = {f.name: f.dataType.typeName() for f in schema.fields}
    found: dict[str, list[tuple[str, str]]] = {}
    for name, kind, label, _ in _conditions(checks, schema):
        if _from_files(kind, types[name]):
            found.setdefault(name, []).append((kind, label))
    return {
        name: written.Counter(
            arrow=functools.partial(_arrow_counts, checks.columns[name], kinds),
            spark=functools.partial(
                aggregates, checks, schema, columns=frozenset([name]), from_files=True
            ),
        )
        for name, kinds in found.items()
    }


def _arrow_counts(
    column: ColumnChecks, kinds: list[tuple[str, str]], values: pa.ChunkedArray
) -> dict[str, int]:
    """The rows of `values` failing each of `kinds` (kind, label): as Spark counts them, a
    null fails `not_null` only (a comparison with null is null, not counted)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    present = len(values) - values.null_count
    out = {}
    for kind, label in kinds:
        if kind == "not_null":
            out[label] = values.null_count
            continue
        if kind == "allowed":
            # Integers compared as int64 (`bind` keeps each value within the column's type).
            data = pc.cast(values, pa.int64()) if pa.types.is_integer(values.type) else values
            value_type = data.type
            if pa.types.is_dictionary(value_type):
                value_type = value_type.value_type
            allowed = pa.array(list(column.allowed or ()), type=value_type)
            kept = pc.sum(pc.is_in(data, value_set=allowed)).as_py() or 0
            out[label] = present - kept
            continue
        bound = column.min if kind == "min" else column.max
        wide = pc.cast(values, pa.int64())
        failing = pc.less(wide, bound) if kind == "min" else pc.greater(wide, bound)
        out[label] = pc.sum(failing).as_py() or 0
    return out


def _literal(value: Scalar, type_sql: str) -> str:
    """`value` as SQL, typed as `F.lit` types it (a Python float a double, a text hex
    encoded), cast to `type_sql`."""
    if isinstance(value, bool):
        typed = "true" if value else "false"
    elif isinstance(value, int):
        typed = f"CAST({value} AS {'INT' if -(2**31) <= value < 2**31 else 'BIGINT'})"
    elif isinstance(value, float):
        typed = f"CAST({value_sql.sql_text(repr(value))} AS DOUBLE)"
    else:
        typed = value_sql.sql_text(value)
    return f"CAST({typed} AS {type_sql})"


def unique_counts(
    checks: Checks,
    spark: SparkSession,
    directory: str,
    schema: StructType,
    stats: written.Statistics,
) -> dict[str, int]:
    """Rows beyond the first of each repeated value, per `unique` column (nulls aside), in
    the Parquet files written to `directory`: the rows present less the distinct values
    where Arrow counted them exactly (`written.statistics`), a grouping query otherwise (a
    distinct count among the write's other aggregates would make Spark expand every row:
    10x the time of the whole ingest at 1M rows)."""
    from pyspark.sql import functions as F  # noqa: N812

    types = {f.name: f.dataType.typeName() for f in schema.fields}
    index = {f.name: i for i, f in enumerate(schema.fields)}
    out = {}
    for i, (name, column) in enumerate(checks.columns.items()):
        if not column.unique:
            continue
        if name in stats.exact and types[name] in _ARROW_UNIQUE_TYPES:
            j = index[name]
            present = stats.counts["stat:rows"] - stats.counts[f"stat:{j}:nulls"]
            out[f"check:{i}:unique"] = int(present - stats.counts[f"stat:{j}:distinct"])
            continue
        col = F.col(f"`{name}`")
        rows = spark.read.schema(schema).parquet(directory)
        repeated = rows.where(col.isNotNull()).groupBy(col).count().where("count > 1")
        row = repeated.agg(F.sum(F.col("count") - 1).alias("extra")).collect()[0]
        out[f"check:{i}:unique"] = int(row["extra"] or 0)
    return out


def failures(
    checks: Checks, counts: dict[str, Any], written: Callable[[], DataFrame]
) -> list[Failure]:
    """The failed checks, from the aggregation's counts (examples read for each from the
    written rows, which `written` reads only when a check failed)."""
    from pyspark.sql import functions as F  # noqa: N812

    names = list(checks.columns)
    found = []
    df: DataFrame | None = None
    for label, value in counts.items():
        if not label.startswith("check:") or not value:
            continue
        df = df if df is not None else written()
        _, index, kind = label.split(":", 2)
        name = names[int(index)]
        col = F.col(f"`{name}`")
        column = checks.columns[name]
        condition = {
            "not_null": None,
            "allowed": ~col.isin(list(column.allowed or ())),
        }.get(kind)
        if kind.startswith("min"):
            condition = col < F.lit(column.min)
        elif kind.startswith("max"):
            condition = col > F.lit(column.max)
        examples: list[Any] = []
        if kind == "unique":
            dup = df.groupBy(col).count().where("count > 1").limit(_EXAMPLES).collect()
            examples = [row[0] for row in dup]
        elif condition is not None:
            picked = df.where(condition).select(col).distinct().limit(_EXAMPLES).collect()
            examples = [row[0] for row in picked]
        found.append(Failure(name, kind, int(value), [_plain(v) for v in examples]))
    return found


def report(found: list[Failure]) -> str:
    return "\n".join(["checks failed, nothing published:", *(f.line() for f in found)])


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
