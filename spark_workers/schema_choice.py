"""The schema an ingest chose, shown before it is trusted: per column its type, the format
its values are written in, how many values the sample and the whole file held, and why a
column that looks like dates stayed text. Printed by `ingest` (and by `--dry-run`, which
stops there) and kept in the manifest (`inference`).

    dialect: delimiter ',', quote '"', header, UTF-8 (sampled 1461 rows: start, middle, end)
      date           DATE       yyyy/M/d    1461 values (1461 sampled)
      precipitation  DOUBLE                 1461 values (1461 sampled)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from spark_workers import inference, read_options, sniffing


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str
    format: str | None
    values: int | None
    sampled: int | None
    text_because: str | None


@dataclasses.dataclass(frozen=True)
class SchemaChoice:
    declared: bool
    dialect: dict[str, Any]
    sample_rows: int | None
    columns: list[Column]

    @classmethod
    def of(
        cls,
        schema: StructType,
        options: read_options.ReadOptions,
        inferred: inference.Inferred | None,
        sniffed: sniffing.Sniffed | None,
        declared: bool,
    ) -> SchemaChoice:
        columns = []
        for field in schema.fields:
            fmt = options.format_of(field.name)
            guess = sniffed.guesses.get(field.name) if sniffed is not None else None
            type_name = field.dataType.simpleString()
            described = fmt.describe() if fmt is not None else None
            if described is None and type_name == "date" and options.date_format:
                described = options.date_format
            if described is None and type_name.startswith("timestamp"):
                described = options.timestamp_format
            columns.append(
                Column(
                    name=field.name,
                    type=type_name,
                    format=described,
                    values=inferred.values.get(field.name) if inferred is not None else None,
                    sampled=guess.values if guess is not None else None,
                    text_because=inferred.date_text.get(field.name)
                    if inferred is not None
                    else None,
                )
            )
        dialect: dict[str, Any] = {"format": options.format}
        if options.format == "csv":
            dialect.update(
                delimiter=options.delimiter or ",",
                quote=options.quote or '"',
                header=options.has_header,
                encoding=options.charset,
                decimal=_decimal(options),
            )
        return cls(
            declared=declared,
            dialect=dialect,
            sample_rows=sniffed.rows if sniffed is not None else None,
            columns=columns,
        )

    def lines(self) -> list[str]:
        """The report printed by the ingest."""
        d = self.dialect
        head = f"{'declared' if self.declared else 'chosen'} columns"
        if d["format"] == "csv":
            head += (
                f" (delimiter {d['delimiter']!r}, quote {d['quote']!r}, "
                f"{'header' if d['header'] else 'no header'}, {d['encoding']}"
            )
            if self.sample_rows is not None:
                head += f"; sampled {self.sample_rows} rows from the start, middle and end"
            head += "):"
        else:
            head += ":"
        width = max([len(c.name) for c in self.columns] + [4])
        out = [head]
        for c in self.columns:
            counts = []
            if c.values is not None:
                counts.append(f"{c.values} values")
            if c.sampled is not None:
                counts.append(f"{c.sampled} sampled")
            line = f"  {c.name:<{width}}  {c.type.upper():<9}  {c.format or '':<16}  "
            line += ", ".join(counts)
            if c.text_because:
                line += f"  (text: {c.text_because})"
            out.append(line.rstrip())
        return out

    def entry(self) -> dict[str, Any]:
        """The manifest's `inference` section."""
        return {
            "declared": self.declared,
            "dialect": self.dialect,
            "sample_rows": self.sample_rows,
            "columns": {
                c.name: {
                    k: v for k, v in dataclasses.asdict(c).items() if k != "name" and v is not None
                }
                for c in self.columns
            },
        }


def _decimal(options: read_options.ReadOptions) -> str:
    decimals = {f.decimal for f in options.formats.values()}
    return "," if "," in decimals else "."
