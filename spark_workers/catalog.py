"""The dataset catalog: which dataset a worker key names, and where and how to read it.

Keys come from clients as arbitrary UTF-8, so they are parsed against a strict grammar and
never used as a path fragment without it:

    key       := name [ "@" version ] { "/" column "=" value }
    name      := [A-Za-z0-9][A-Za-z0-9_.-]*     (no "..", at most 100 characters)
    version   := [A-Za-z0-9][A-Za-z0-9_.-]*     (no "..", at most 64 characters)
    column    := [A-Za-z_][A-Za-z0-9_]*
    value     := any characters but "/"          (a filter value, never a path)

`trips` reads `{root}/trips`, `trips@2024` reads `{root}/trips@2024` (what
`pipeline ingest --version 2024` writes), and `trips/city=Lyon` reads `trips` filtered on
`city = 'Lyon'` (partition pruning does the rest when the dataset is partitioned by `city`).
A key that does not parse, or names no dataset, raises `DatasetError`: permanent, the
worker answers it to every request instead of crashing.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from spark_workers import settings as settings_mod

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MAX_KEY_BYTES = 255
_KEY_RE = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]{0,99})"
    r"(?:@(?P<version>[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}))?"
    r"(?P<filters>(?:/[A-Za-z_][A-Za-z0-9_]{0,63}=[^/]{1,200})*)"
)
_EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


class DatasetError(Exception):
    """The key is not a valid dataset key, or names no readable dataset (permanent)."""


@dataclasses.dataclass(frozen=True)
class DatasetKey:
    """A parsed worker key."""

    name: str
    version: str | None = None
    filters: tuple[tuple[str, str], ...] = ()

    @property
    def dataset(self) -> str:
        """The dataset's directory name: `name` or `name@version`."""
        return self.name if self.version is None else f"{self.name}@{self.version}"

    @classmethod
    def parse(cls, key: str) -> DatasetKey:
        if len(key.encode()) > MAX_KEY_BYTES:
            raise DatasetError(f"dataset key longer than {MAX_KEY_BYTES} bytes")
        match = _KEY_RE.fullmatch(key)
        if match is None:
            raise DatasetError(
                f"invalid dataset key {key!r}: expected name[@version][/column=value]..."
            )
        name, version = match["name"], match["version"]
        if ".." in name or (version is not None and ".." in version):
            raise DatasetError(f"invalid dataset key {key!r}: '..' is not allowed")
        pairs = (part.split("=", 1) for part in match["filters"].split("/") if part)
        filters = tuple((column, value) for column, value in pairs)
        return cls(name=name, version=version, filters=filters)


@dataclasses.dataclass(frozen=True)
class DatasetLocation:
    """Where a key's data is and how to read it."""

    key: DatasetKey
    uri: str
    format: str
    #: The version read: the key's, or the one the link `name` points at (None: unversioned).
    version: str | None = None


class Catalog:
    """Resolves keys to dataset locations under a root, and loads them."""

    def __init__(
        self,
        root: str,
        *,
        uri_template: str | None = None,
        fmt: settings_mod.DatasetFormat = "auto",
    ) -> None:
        self.root = root.rstrip("/") or "/"
        self.uri_template = uri_template
        self.format = fmt
        #: The location each loaded key was read from (its version, its manifest).
        self.loaded: dict[str, DatasetLocation] = {}

    @classmethod
    def from_settings(cls, settings: settings_mod.SparkWorkerSettings) -> Catalog:
        return cls(
            settings.dataset_root,
            uri_template=settings.dataset_uri_template,
            fmt=settings.dataset_format,
        )

    def resolve(self, key: str) -> DatasetLocation:
        """The location of `key`'s dataset; checks existence when the root is local."""
        parsed = DatasetKey.parse(key)
        local_root = _local_path(self.root)
        if self.uri_template is not None or local_root is None:
            template = self.uri_template or "{root}/{dataset}"
            uri = template.format(
                root=self.root,
                dataset=parsed.dataset,
                name=parsed.name,
                version=parsed.version or "",
            )
            fmt = "parquet" if self.format == "auto" else self.format
            return DatasetLocation(parsed, uri, fmt)
        return self._resolve_local(parsed, local_root)

    def _resolve_local(self, key: DatasetKey, root: str) -> DatasetLocation:
        root = os.path.abspath(root)
        real_root = os.path.realpath(root)
        for path in _candidates(root, key):
            path = os.path.normpath(path)
            if os.path.commonpath([root, path]) != root or path == root:
                raise DatasetError(f"dataset key {key.dataset!r} escapes the dataset root")
            if os.path.exists(path):
                # The link `name` (pipeline ingest) is followed once, here: the worker keeps
                # reading the version it found even when the link moves on.
                real = os.path.realpath(path)
                if os.path.commonpath([real_root, real]) != real_root or real == real_root:
                    raise DatasetError(f"dataset {key.dataset!r} links outside the dataset root")
                fmt = self.format if self.format != "auto" else _detect_format(real)
                version = key.version
                if version is None and os.path.islink(path):
                    version = os.path.basename(real).partition("@")[2] or None
                return DatasetLocation(key, real, fmt, version)
        raise DatasetError(f"unknown dataset {key.dataset!r} (no such dataset under the root)")

    def pinned_version(self, key: str) -> str | None:
        """The version `key` names when its data can never change, else None: a key with
        `@version` whose location is chosen by that version (`{dataset}` or `{version}` in a
        URI template) and, under a local root, found as the version itself, not through a
        link (a link can be moved). Versions are written once (`versions`). A key without a
        version follows the link an ingest or an append moves: never pinned."""
        parsed = DatasetKey.parse(key)
        if parsed.version is None:
            return None
        local_root = _local_path(self.root)
        if self.uri_template is not None or local_root is None:
            template = self.uri_template or "{root}/{dataset}"
            chosen = "{dataset}" in template or "{version}" in template
            return parsed.version if chosen else None
        root = os.path.abspath(local_root)
        for path in _candidates(root, parsed):
            if os.path.lexists(path):
                return None if os.path.islink(path) else parsed.version
        return None

    def load(self, spark: SparkSession, key: str) -> DataFrame:
        """The key's DataFrame (lazy: Spark reads the data on the first action)."""
        from pyspark.errors import AnalysisException
        from pyspark.sql import functions as F  # noqa: N812

        location = self.resolve(key)
        self.loaded[key] = location
        reader = spark.read
        if location.format == "csv":
            reader = reader.option("header", "true").option("inferSchema", "true")
        try:
            df = reader.format(location.format).load(location.uri)
        except AnalysisException as exc:
            raise DatasetError(
                f"cannot read dataset {location.key.dataset!r}: {exc.getMessage()}"
            ) from exc
        for column, value in location.key.filters:
            if column not in df.columns:
                raise DatasetError(
                    f"dataset {location.key.dataset!r} has no column {column!r} to filter on"
                )
            df = df.where(F.col(column) == F.lit(value))
        return df


def _candidates(root: str, key: DatasetKey) -> list[str]:
    """Where `key`'s dataset may be under a local `root`, in the order they are tried."""
    candidates = [os.path.join(root, key.dataset)]
    candidates += [os.path.join(root, key.dataset + ext) for ext in _EXTENSIONS]
    return candidates


def _local_path(root: str) -> str | None:
    """The local directory of `root`, or None for a remote URI (s3a://, hdfs://...)."""
    parsed = urlparse(root)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else root
    if len(parsed.scheme) == 1:  # a Windows drive letter
        return root
    return None


def _detect_format(path: str) -> str:
    """The format of a dataset file or directory, from the first data file's extension."""
    if os.path.isfile(path):
        return _EXTENSIONS.get(os.path.splitext(path)[1], "parquet")
    for _dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for filename in sorted(filenames):
            if filename.startswith((".", "_")):
                continue
            fmt = _EXTENSIONS.get(os.path.splitext(filename)[1])
            if fmt is not None:
                return fmt
    return "parquet"
