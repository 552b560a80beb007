"""Bad rows: what the ingest does with rows it cannot type, and where they are in their files.

Modes (`--mode`):

- `permissive` (default): the good rows are published; the bad ones are written to the
  version's quarantine, `_quarantine/bad_rows.jsonl` beside its data (Spark's readers skip
  `_` names), one JSON object per row: `file`, `line`, `reason`, and `record` (the raw
  values by column, or the raw text of a malformed record);
- `dropmalformed`: the same rows are left out and counted in the manifest, not kept;
- `failfast`: the first bad row stops the ingest before anything is published, and the error
  names its file, line and reason.

In every mode more than `--max-bad-rows` bad rows (default 1000) stop the ingest: a file
whose rows mostly fail is the wrong options, not a few bad rows.

Spark does not know line numbers: they are found afterwards, only for the bad rows (at most
`max_bad_rows + 1` of them), by reading their files again in Python with the same delimiter,
quoting and charset (`csv` module; JSON lines line by line) and matching each row's values.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from spark_workers import conversion, read_options
from spark_workers.pipeline_errors import BadRowsError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

QUARANTINE_DIR = "_quarantine"
QUARANTINE_FILE = "bad_rows.jsonl"


@dataclasses.dataclass
class BadRow:
    file: str
    line: int | None
    reason: str
    record: dict[str, str | None] | str

    def describe(self) -> str:
        where = f"{self.file}, line {self.line}" if self.line else self.file
        return f"{where}: {self.reason}"


def collect(df: DataFrame, schema: StructType, options: read_options.ReadOptions) -> list[BadRow]:
    """The bad rows of a converted DataFrame (at most `max_bad_rows + 1`, or 1 in failfast),
    with their lines."""
    from pyspark.sql import functions as F  # noqa: N812

    limit = 1 if options.mode == "failfast" else options.max_bad_rows + 1
    raw_names = conversion.raw_columns(schema)
    columns = [conversion.FILE_COLUMN, conversion.REASON_COLUMN, *raw_names]
    has_corrupt = read_options.CORRUPT_COLUMN in df.columns
    if has_corrupt:
        columns.append(read_options.CORRUPT_COLUMN)
    rows = df.where(F.col(conversion.REASON_COLUMN) != "").select(*columns).limit(limit).collect()
    bad = []
    for row in rows:
        corrupt = row[read_options.CORRUPT_COLUMN] if has_corrupt else None
        record: dict[str, str | None] | str = (
            corrupt
            if corrupt is not None
            else {f.name: row[raw] for f, raw in zip(schema.fields, raw_names, strict=True)}
        )
        bad.append(
            BadRow(_local(row[conversion.FILE_COLUMN]), None, row[conversion.REASON_COLUMN], record)
        )
    locate(bad, options)
    return bad


def judge(bad: list[BadRow], options: read_options.ReadOptions, *, count: int) -> None:
    """Raise when the mode or the bound says the ingest must stop (`count`: all bad rows,
    `bad`: those collected)."""
    if not count:
        return
    first = bad[0].describe() if bad else "?"
    if options.mode == "failfast":
        raise BadRowsError(f"bad row (failfast): {first}")
    if count > options.max_bad_rows:
        raise BadRowsError(
            f"{count} bad rows, more than {options.max_bad_rows} (--max-bad-rows); the first: "
            f"{first}"
        )


def write_quarantine(directory: str, bad: list[BadRow]) -> str | None:
    """`directory/_quarantine/bad_rows.jsonl` with `bad`, sorted by file and line."""
    if not bad:
        return None
    target = os.path.join(directory, QUARANTINE_DIR)
    os.makedirs(target, exist_ok=True)
    path = os.path.join(target, QUARANTINE_FILE)
    with open(path, "w", encoding="utf-8") as out:
        for row in sorted(bad, key=lambda r: (r.file, r.line or 0)):
            out.write(json.dumps(dataclasses.asdict(row), ensure_ascii=False) + "\n")
    return os.path.join(QUARANTINE_DIR, QUARANTINE_FILE)


def read_quarantine(directory: str) -> list[dict[str, Any]]:
    """The quarantined rows of a dataset version (empty when it has none)."""
    path = os.path.join(directory, QUARANTINE_DIR, QUARANTINE_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


# -- lines --------------------------------------------------------------------------------


def locate(bad: list[BadRow], options: read_options.ReadOptions) -> None:
    """Fill in each bad row's line (1-based, the header included) where it can be found."""
    by_file: dict[str, list[BadRow]] = defaultdict(list)
    for row in bad:
        if os.path.isfile(row.file):
            by_file[row.file].append(row)
    for path, rows in by_file.items():
        wanted: dict[Any, list[BadRow]] = defaultdict(list)
        for row in rows:
            wanted[_key(row.record, options)].append(row)
        records = _csv_records if options.format == "csv" else _json_records
        for line, key in records(path, options):
            waiting = wanted.get(key)
            if waiting:
                waiting.pop(0).line = line
                if not any(wanted.values()):
                    break


def _key(record: dict[str, str | None] | str, options: read_options.ReadOptions) -> Any:
    if isinstance(record, str):  # the raw text of a malformed record
        if options.format == "csv":
            fields = next(csv.reader([record], **_dialect(options)), [])
            return ("fields", tuple(fields))
        return ("text", record.strip())
    if options.format == "json":  # JSON objects name their fields, in any order
        return ("json", tuple(sorted((k, v) for k, v in record.items() if v not in (None, ""))))
    return ("values", tuple("" if v is None else v for v in record.values()))


def _dialect(options: read_options.ReadOptions) -> dict[str, Any]:
    quote, escape = options.quote or '"', options.escape or '"'
    return {
        "delimiter": options.delimiter or ",",
        "quotechar": quote,
        "doublequote": escape == quote,
        "escapechar": None if escape == quote else escape,
    }


def _open(path: str, options: read_options.ReadOptions) -> Any:
    charset = options.charset.lower()
    return open(path, encoding=charset, errors="replace", newline="")  # noqa: SIM115


def _csv_records(path: str, options: read_options.ReadOptions) -> Any:
    with _open(path, options) as text:
        reader = csv.reader(text, **_dialect(options))
        previous = 0
        for number, fields in enumerate(reader):
            start, previous = previous + 1, reader.line_num
            if number == 0 and options.has_header:
                continue
            yield start, ("fields", tuple(fields))
            yield start, ("values", tuple(fields))


def _json_records(path: str, options: read_options.ReadOptions) -> Any:
    with _open(path, options) as text:
        for number, line in enumerate(text, start=1):
            yield number, ("text", line.strip())
            try:
                values = json.loads(line)
            except ValueError:
                continue
            if isinstance(values, dict):
                texts = ((k, _json_text(v)) for k, v in values.items())
                yield number, ("json", tuple(sorted((k, v) for k, v in texts if v != "")))


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _local(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri
