"""What a raw CSV file is, guessed as DuckDB's sniffer guesses it, from a sample of its
beginning, middle and end: the encoding, the delimiter, the quote, whether a header line is
there, and per column a candidate type with the format its values are written in
(`value_guess`).

The sample is up to `PART_BYTES` from the start, the middle and the end of each file (of
`MAX_FILES` at most; a compressed file is read from its start only, up to three parts'
worth). What it finds is a candidate: `inference.infer` then checks each column's type and
format over every row, and keeps a column text where a value does not fit.

- **encoding**: a UTF-8 byte order mark, or bytes that decode as UTF-8, give UTF-8 (so does
  a UTF-8 file with one damaged line: `detect_encoding`); other bytes are Windows-1252 (a
  byte from 0x80 to 0x9F is a C1 control in Latin-1, never text, and a printable character
  in Windows-1252: `’`, `€`), or ISO-8859-1 where a byte is one that Windows-1252 leaves
  undefined;
- **delimiter**: of `,` `;` tab `|`, the one that splits the most sampled lines into the same
  number of fields (more than one); ties go in that order;
- **header**: the first line is a header unless every one of its fields fits the type its
  column has in the other lines and one column at least is not text (a file of numbers
  only has no header);
- **types and formats** of each column: `value_guess`.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
from collections import Counter
from collections.abc import Iterable

from spark_workers import manifest, read_options, value_guess
from spark_workers.pipeline_errors import SniffError

#: Bytes read from each of the start, middle and end of a file.
PART_BYTES = 256 << 10
#: Files sampled at most (a directory of many parts: the first ones by name).
MAX_FILES = 16
#: Sampled rows per part at most, and of all parts.
MAX_ROWS = 1_000
MAX_SAMPLE_ROWS = 6_000
DELIMITERS = (",", "\t", ";", "|")
#: Windows-1252 leaves these bytes undefined: a file holding one is ISO-8859-1.
_CP1252_UNDEFINED = frozenset(b"\x81\x8d\x8f\x90\x9d")


@dataclasses.dataclass(frozen=True)
class Sniffed:
    """The dialect found (as read options: only those the user left unset are filled),
    the column names (a header's, made unique and non-empty; `_c0`... without one), whether
    names had to be changed from the header's, and a `Guess` per column."""

    options: read_options.ReadOptions
    names: list[str]
    renamed: bool
    guesses: dict[str, value_guess.Guess]
    rows: int


def sniff(src: str, options: read_options.ReadOptions) -> Sniffed | None:
    """The dialect and column guesses of CSV source `src` (None for a remote source, which
    is not read twice, or a format other than CSV)."""
    found = manifest.source_paths(src)
    if options.format != "csv" or found is None:
        return None
    paths = sorted(found[1])[:MAX_FILES]
    if not paths:
        return None
    raw = [_read_parts(path) for path in paths]
    encoding = options.encoding or detect_encoding(b"".join(b"".join(parts) for parts in raw))
    texts = [[_decode(part, encoding, i > 0) for i, part in enumerate(parts)] for parts in raw]
    # The first part of the first file holds the header; the lines of the others follow.
    head = texts[0][0]
    body = [line for parts in texts for part in parts for line in part.splitlines()[:MAX_ROWS]]
    delimiter = options.delimiter or detect_delimiter(body, options.quote or '"')
    rows = _rows(head, texts, delimiter, options)
    if not rows:
        raise SniffError(f"{src}: no line to read")
    width = Counter(len(r) for r in rows).most_common(1)[0][0]
    rows = [r for r in rows if len(r) == width]
    first, rest = rows[0], rows[1:]
    markers = set(options.null_values)
    file_decimal = _file_decimal(rest, delimiter, markers)
    guesses_rest = [
        value_guess.guess([r[i] for r in rest], markers, file_decimal) for i in range(width)
    ]
    header = options.header
    if header is None:
        header = is_header(first, guesses_rest, markers, file_decimal, rest) if rest else True
    data = rest if header else rows
    guesses = (
        guesses_rest
        if header
        else [value_guess.guess([r[i] for r in data], markers, file_decimal) for i in range(width)]
    )
    names, renamed = column_names(first if header else None, width)
    updated = options.model_dump()
    updated.update(
        delimiter=delimiter
        if options.delimiter is None and delimiter != ","
        else options.delimiter,
        encoding=options.encoding or (encoding if encoding != "UTF-8" else None),
        header=header if options.header is None and not header else options.header,
        renamed_header=renamed,
    )
    return Sniffed(
        options=read_options.ReadOptions.model_validate(updated),
        names=names,
        renamed=renamed,
        guesses=dict(zip(names, guesses, strict=True)),
        rows=len(data),
    )


def check_headers(src: str, options: read_options.ReadOptions) -> None:
    """Every file of `src` starts with the same header line as the first (by its fields):
    Spark's reader does this check itself, but against the names, which were changed."""
    found = manifest.source_paths(src)
    if found is None:
        return
    first: list[str] | None = None
    for path in sorted(found[1]):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as data:
            head = data.read(PART_BYTES)
        text = _decode(head, options.charset, False)
        rows = _parse(
            text.splitlines(keepends=True)[:1],
            options.delimiter or ",",
            options.quote or '"',
            options.escape or '"',
        )
        fields = rows[0] if rows else []
        if first is None:
            first = fields
        elif fields != first:
            raise SniffError(
                f"CSV header does not conform to the first file's: {path} has "
                f"{fields[:20]}, the first file {first[:20]}"
            )


def _read_parts(path: str) -> list[bytes]:
    """Up to `PART_BYTES` from the start, middle and end of `path` (the whole file when it is
    smaller than three parts); a gzip file's start, decompressed, three parts' worth."""
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as data:
            return [data.read(3 * PART_BYTES)]
    with open(path, "rb") as data:
        data.seek(0, io.SEEK_END)
        size = data.tell()
        data.seek(0)
        if size <= 3 * PART_BYTES:
            return [data.read()]
        parts = [data.read(PART_BYTES)]
        for start in (size // 2 - PART_BYTES // 2, size - PART_BYTES):
            data.seek(start)
            parts.append(data.read(PART_BYTES))
        return parts


def detect_encoding(raw: bytes) -> str:
    """UTF-8 (with or without a byte order mark), else Windows-1252, else ISO-8859-1.

    A sample that is not all UTF-8 is still taken as UTF-8 with damaged lines (which the
    ingest quarantines, each with its reason, instead of reading every other line wrong)
    when it holds a valid multi-byte UTF-8 character, or when the lines UTF-8 refuses are a
    single one and under 1% of the sample's: a file written in a single-byte charset has its
    accented letters on many lines or is small."""
    if raw.startswith(b"\xef\xbb\xbf"):
        return "UTF-8"
    lines = raw.split(b"\n")
    refused = 0
    for number, line in enumerate(lines):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A part may end inside a character: a failure in its last 3 bytes does not count.
            cut = number == len(lines) - 1 and exc.reason == "unexpected end of data"
            refused += not (cut and exc.start >= len(line) - 3)
            continue
        if not text.isascii():
            return "UTF-8"
    if refused == 0 or (refused == 1 and refused < len(lines) / 100):
        return "UTF-8"
    return "ISO-8859-1" if any(b in _CP1252_UNDEFINED for b in set(raw)) else "windows-1252"


def _decode(part: bytes, encoding: str, cut: bool) -> str:
    """A part's text; a middle or end part without its first (partial) line."""
    text = part.decode(read_options.python_codec(encoding), errors="replace").lstrip("\ufeff")
    if cut:
        text = text.split("\n", 1)[1] if "\n" in text else ""
    # The last line of a part may be cut short (the file's own last line aside).
    return text


def detect_delimiter(lines: list[str], quote: str) -> str:
    """The delimiter that splits the most lines into one number (more than one) of fields."""
    best, best_score = ",", (0, 0)
    sample = [line for line in lines if line.strip()][:MAX_ROWS]
    for delimiter in DELIMITERS:
        try:
            widths = [len(r) for r in csv.reader(sample, delimiter=delimiter, quotechar=quote)]
        except csv.Error:
            continue
        if not widths:
            continue
        width, count = Counter(widths).most_common(1)[0]
        score = (count if width > 1 else 0, width)
        if score[0] > best_score[0]:
            best, best_score = delimiter, score
    return best


def _rows(
    head: str, texts: list[list[str]], delimiter: str, options: read_options.ReadOptions
) -> list[list[str]]:
    """The sampled records: the first file's first part from its start (its first line may
    be a header), then each other part's whole lines."""
    quote = options.quote or '"'
    escape = options.escape or '"'
    rows: list[list[str]] = []
    for f, parts in enumerate(texts):
        for p, part in enumerate(parts):
            lines = part.splitlines(keepends=True)
            if len(lines) > 1 and not part.endswith(("\n", "\r")) and (p < len(parts) - 1):
                lines = lines[:-1]  # cut short by the part's end
            # A file read whole (one part) gets the three parts' share.
            found = _parse(lines[: MAX_ROWS * 3 // len(parts) + 1], delimiter, quote, escape)
            if f > 0 and p == 0 and options.header is not False:
                found = found[1:]  # another file's header
            rows += found
            if len(rows) >= MAX_SAMPLE_ROWS:
                return rows
    return rows


def _parse(lines: Iterable[str], delimiter: str, quote: str, escape: str) -> list[list[str]]:
    kwargs: dict[str, object] = {"delimiter": delimiter, "quotechar": quote}
    if escape != quote:
        kwargs.update(escapechar=escape, doublequote=False)
    try:
        return [r for r in csv.reader(lines, **kwargs) if r]  # type: ignore[arg-type]
    except csv.Error:
        return []


def column_names(header: list[str] | None, width: int) -> tuple[list[str], bool]:
    """A header's names, each empty one `column<i>` and each repeated one `<name>_<n>`
    (as DuckDB names them), and whether any was changed; `_c<i>` without a header."""
    if header is None:
        return [f"_c{i}" for i in range(width)], False
    names: list[str] = []
    seen: set[str] = set()
    for i, raw in enumerate(header):
        name = raw if raw.strip() else f"column{i}"
        base, n = name, 0
        while name.lower() in seen:
            n += 1
            name = f"{base}_{n}"
        seen.add(name.lower())
        names.append(name)
    return names, names != header


def _file_decimal(rows: list[list[str]], delimiter: str, markers: set[str]) -> value_guess.Decimal:
    """`,` when the file writes numbers with a decimal comma (a value such as `1,5` or
    `-0,25` in a file that is not comma-separated), else `.`."""
    if delimiter == ",":
        return "."
    for row in rows[:MAX_ROWS]:
        for value in row:
            v = value.strip()
            if "," in v and v not in markers and value_guess.DECIMAL_COMMA.fullmatch(v):
                if not value_guess.GROUPED[","].fullmatch(v):
                    return ","
    return "."


def is_header(
    first: list[str],
    guesses: list[value_guess.Guess],
    markers: set[str],
    decimal: value_guess.Decimal,
    rest: list[list[str]],
) -> bool:
    """Whether `first` is a header: not every field fits its column's type, or no column is
    typed (then names are the likelier reading), or the typed columns' fields are whole
    numbers above columns of decimals only (years naming columns of rates)."""
    typed = [g for g in guesses if g.type != "string"]
    if not typed:
        return True
    named_by_numbers = False
    for i, (value, column) in enumerate(zip(first, guesses, strict=False)):
        v = value.strip()
        if column.type == "string" or v in markers:
            continue
        alone = value_guess.guess([value], markers, decimal).type
        numbers = ("int", "double")
        if column.type in numbers and alone not in numbers:
            return True
        if column.type == "boolean" and alone != "boolean":
            return True
        if column.type in ("date", "timestamp") and not (
            set(column.patterns) & set(value_guess.patterns_of(v))
        ):
            return True
        if column.type == "double" and value_guess.INTEGER.fullmatch(v):
            others = [r[i].strip() for r in rest if i < len(r)]
            named_by_numbers = named_by_numbers or not any(
                value_guess.INTEGER.fullmatch(o) for o in others
            )
        elif column.type == "double":
            return False
    return named_by_numbers
