"""How `pipeline ingest` reads raw files: every option a user can give, checked before Spark
sees it.

Option values come from the command line of whoever runs the pipeline, and a schema file
from anywhere: each is validated against an allow-list and bounded here (one character for a
delimiter, a known charset, datetime patterns made of pattern letters, atomic column types
only), so a bad value is refused with a sentence instead of a JVM stack trace, and nothing
unexpected reaches Spark's readers.

Defaults are what R, pandas and most tools write: a header line, `,`, RFC 4180 quoting (`"`,
a quote inside a quoted field doubled), UTF-8, one record per line.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

import pydantic

from spark_workers.pipeline_errors import ReadOptionsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

#: Missing-value markers recognised in typed (number, date, boolean) columns by default.
DEFAULT_NULL_VALUES = ("", "NA", "N/A", "NULL", "null", "\\N")
#: Charsets a user may name (Java's names; the Python codec of the same name locates lines).
ENCODINGS = {
    "utf-8": "UTF-8",
    "utf8": "UTF-8",
    "utf-16": "UTF-16",
    "utf-16le": "UTF-16LE",
    "utf-16be": "UTF-16BE",
    "iso-8859-1": "ISO-8859-1",
    "latin1": "ISO-8859-1",
    "latin-1": "ISO-8859-1",
    "iso-8859-15": "ISO-8859-15",
    "windows-1252": "windows-1252",
    "cp1252": "windows-1252",
    "us-ascii": "US-ASCII",
    "ascii": "US-ASCII",
}
#: Column types an explicit schema may declare (Spark's names for them, after parsing).
ALLOWED_TYPES = (
    "string",
    "boolean",
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "float",
    "double",
    "decimal",
    "date",
    "timestamp",
    "timestamp_ntz",
)
MAX_SCHEMA_CHARS = 20_000
MAX_COLUMNS = 1_000
MAX_COLUMN_NAME = 128
MAX_MARKERS = 16
MAX_MARKER_CHARS = 32
# Spark datetime pattern letters, separators, and quoted literals ('T').
_DATETIME_PATTERN = re.compile(r"(?:[GyuMLdDQqEFaHhKkmsSVzOXxZ]+|'[A-Za-z ]{0,8}'|[ \-/:.,_])+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Format = Literal["csv", "json", "parquet"]
Mode = Literal["permissive", "dropmalformed", "failfast"]


def _one_char(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    if value == "\\t":
        value = "\t"
    if len(value) != 1 or value in "\r\n":
        raise ValueError(f"{what} must be one character (\\t for a tab), not {value!r}")
    return value


def python_codec(charset: str) -> str:
    """The Python codec of a Java charset name this module allows."""
    return {"windows-1252": "cp1252", "US-ASCII": "ascii"}.get(charset, charset.lower())


class ColumnFormat(pydantic.BaseModel):
    """How one column's values are written, when not in the default form (found by
    `sniffing`, checked over every row by `inference`, kept in the manifest)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    #: A date's or timestamp's Spark pattern (`yyyy/M/d`, `d-MMM-yyyy`, `M/d/yyyy H:mm`).
    pattern: str | None = None
    #: A number's decimal separator.
    decimal: Literal[".", ","] = "."
    #: A number's thousands separator (`1,234.5`, `1.234,5`).
    thousands: Literal[",", ".", " ", "'"] | None = None
    #: Booleans written `T`/`F`, `yes`/`no` as well as `true`/`false` (any case).
    words: bool = False

    @pydantic.field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 64 or not _DATETIME_PATTERN.fullmatch(value)):
            raise ValueError(f"{value!r} is not a datetime pattern")
        return value

    @pydantic.model_validator(mode="after")
    def _separators(self) -> ColumnFormat:
        if self.thousands == self.decimal:
            raise ValueError("the thousands separator cannot be the decimal separator")
        return self

    def describe(self) -> str:
        """The format in a few words (`yyyy/M/d`, `1.234,5`, `T/F`)."""
        if self.pattern:
            return self.pattern
        if self.words:
            return "true/false, T/F, yes/no"
        return f"1{self.thousands or ''}234{self.decimal}5"


class ReadOptions(pydantic.BaseModel):
    """The reader's options, as `ingest` takes them (`None`: the default of the format)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    format: Format = "csv"
    #: Column names and types, as a DDL string: `a INT, b STRING, c DATE`.
    schema_ddl: str | None = None
    #: Markers that become null in number, date, timestamp and boolean columns.
    null_values: tuple[str, ...] = DEFAULT_NULL_VALUES
    #: Markers that become null in text columns too (none by default: `NA` may be Namibia).
    text_null_values: tuple[str, ...] = ()
    date_format: str | None = None
    timestamp_format: str | None = None
    delimiter: str | None = None
    quote: str | None = None
    escape: str | None = None
    encoding: str | None = None
    multiline: bool = False
    header: bool | None = None
    #: The header's names were made non-empty and unique (`sniffing.column_names`): the
    #: ingest checks each file's header itself, Spark's reader does not.
    renamed_header: bool = False
    mode: Mode = "permissive"
    #: Per column, how its values are written where not in the default form (`sniffing`).
    formats: dict[str, ColumnFormat] = pydantic.Field(default_factory=dict)
    #: Most bad rows a permissive or dropmalformed ingest accepts before it refuses to publish.
    max_bad_rows: int = pydantic.Field(default=1000, ge=0, le=1_000_000)

    @pydantic.field_validator("schema_ddl")
    @classmethod
    def _schema_size(cls, value: str | None) -> str | None:
        if value is not None and not 0 < len(value) <= MAX_SCHEMA_CHARS:
            raise ValueError(f"a schema is 1 to {MAX_SCHEMA_CHARS} characters")
        return value

    @pydantic.field_validator("null_values", "text_null_values")
    @classmethod
    def _markers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) > MAX_MARKERS:
            raise ValueError(f"at most {MAX_MARKERS} missing-value markers")
        for marker in value:
            if len(marker) > MAX_MARKER_CHARS or _CONTROL.search(marker):
                raise ValueError(
                    f"a missing-value marker is at most {MAX_MARKER_CHARS} printable "
                    f"characters, not {marker!r}"
                )
        return tuple(dict.fromkeys(value))

    @pydantic.field_validator("formats")
    @classmethod
    def _formats(cls, value: dict[str, ColumnFormat]) -> dict[str, ColumnFormat]:
        if len(value) > MAX_COLUMNS:
            raise ValueError(f"at most {MAX_COLUMNS} column formats")
        return value

    @pydantic.field_validator("date_format", "timestamp_format")
    @classmethod
    def _datetime_pattern(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 64 or not _DATETIME_PATTERN.fullmatch(value)):
            raise ValueError(
                f"{value!r} is not a datetime pattern (Spark's letters such as yyyy-MM-dd "
                "HH:mm:ss, separators, literals in quotes; at most 64 characters)"
            )
        return value

    @pydantic.field_validator("delimiter")
    @classmethod
    def _delimiter(cls, value: str | None) -> str | None:
        return _one_char(value, "the delimiter")

    @pydantic.field_validator("quote", "escape")
    @classmethod
    def _quoting(cls, value: str | None) -> str | None:
        return _one_char(value, "a quote or escape character")

    @pydantic.field_validator("encoding")
    @classmethod
    def _encoding(cls, value: str | None) -> str | None:
        if value is None:
            return None
        name = ENCODINGS.get(value.lower())
        if name is None:
            raise ValueError(f"encoding {value!r} is not one of {sorted(set(ENCODINGS.values()))}")
        return name

    @pydantic.model_validator(mode="after")
    def _fits_format(self) -> ReadOptions:
        csv_only = ("delimiter", "quote", "escape", "header")
        if self.format != "csv":
            given = [name for name in csv_only if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: CSV options, not for {self.format}")
        if self.format == "parquet":
            typed = ("schema_ddl", "date_format", "timestamp_format", "encoding")
            given = [name for name in typed if getattr(self, name) is not None]
            if given or self.multiline or self.text_null_values:
                raise ValueError(
                    "Parquet files carry their types: no schema, formats, encoding, "
                    "multi-line or missing-value markers"
                )
        quote, escape, delimiter = self.quote or '"', self.escape or '"', self.delimiter or ","
        if delimiter in (quote, escape):
            raise ValueError("the delimiter cannot also be the quote or escape character")
        return self

    # -- what the readers are given ------------------------------------------------------

    @property
    def charset(self) -> str:
        return self.encoding or "UTF-8"

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's reader for the raw (all-text) read."""
        if self.format == "parquet":
            return {}
        options = {
            "mode": "PERMISSIVE",  # bad rows are ours to judge: see `bad_rows`
            "columnNameOfCorruptRecord": CORRUPT_COLUMN,
            "encoding": self.charset,
            "multiLine": str(self.multiline).lower(),
        }
        if self.format == "csv":
            options.update(
                header=str(self.has_header).lower(),
                sep=self.delimiter or ",",
                quote=self.quote or '"',
                escape=self.escape or '"',
                # Every file's header checked against the columns as it is read (the
                # declared schema's, or the first file's header), case aside; a file with
                # its columns in another order fails the read instead of being read by
                # position, each value under another column's name.
                enforceSchema=str(not self.has_header or self.renamed_header).lower(),
            )
        else:
            options["primitivesAsString"] = "true"
        return options

    def format_of(self, column: str) -> ColumnFormat | None:
        """Column `column`'s own format, if it has one."""
        return self.formats.get(column)

    @property
    def has_header(self) -> bool:
        return self.header is not False

    def summary(self) -> dict[str, Any]:
        """The options as kept in the manifest."""
        return self.model_dump(mode="json")


#: The column Spark's readers put a malformed record's raw text in.
CORRUPT_COLUMN = "_corrupt_record"


def parse_schema(spark: SparkSession, ddl: str) -> StructType:
    """A declared schema, parsed by Spark and checked: flat, allowed types, sane names."""
    from pyspark.errors import PySparkException
    from pyspark.sql import types as T  # noqa: N812

    try:
        parsed = T._parse_datatype_string(ddl)
    except (PySparkException, ValueError) as exc:
        first = str(exc).strip().splitlines()
        raise ReadOptionsError(f"the schema does not parse: {first[0] if first else exc}") from exc
    if not isinstance(parsed, T.StructType):
        raise ReadOptionsError("the schema must list columns: `name TYPE, name TYPE, ...`")
    check_columns(parsed.fieldNames())
    for field in parsed.fields:
        type_name = field.dataType.typeName()
        if type_name == "integer":
            type_name = "int"
        elif type_name in ("long", "short", "byte"):
            type_name = {"long": "bigint", "short": "smallint", "byte": "tinyint"}[type_name]
        if type_name not in ALLOWED_TYPES:
            raise ReadOptionsError(
                f"column {field.name!r}: type {field.dataType.simpleString()} is not one of "
                f"{', '.join(ALLOWED_TYPES)}"
            )
    return parsed


def check_columns(names: list[str]) -> None:
    """Column names from a schema or a header line: bounded, printable, unique."""
    if not names:
        raise ReadOptionsError("no columns")
    if len(names) > MAX_COLUMNS:
        raise ReadOptionsError(f"{len(names)} columns: at most {MAX_COLUMNS}")
    seen: set[str] = set()
    for name in names:
        if not name or len(name) > MAX_COLUMN_NAME or _CONTROL.search(name):
            raise ReadOptionsError(
                f"column name {name[:40]!r} must be 1 to {MAX_COLUMN_NAME} printable characters"
            )
        if "`" in name:
            raise ReadOptionsError(f"column name {name!r}: a backtick is not allowed")
        if name == CORRUPT_COLUMN or name.lower() in seen:
            raise ReadOptionsError(f"column name {name!r} is reserved or repeated")
        seen.add(name.lower())
