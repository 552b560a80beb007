"""What a raw CSV file is, guessed as DuckDB's sniffer guesses it, from a sample of its
beginning, middle and end: the encoding, the delimiter, the quote, whether a header line is
there, and per column a candidate type with the format its values are written in.

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
- **types and formats** (`Guess`): integers, numbers (a decimal comma in a file that is not
  comma-separated, thousands separators), booleans (`true`/`false`, `T`/`F` when both
  appear, `yes`/`no`, any case), dates and timestamps in ISO form or written with `/`, `.`,
  `-`, day first or month first, month names (`Jan 1 2000`, `1-Mar-2021`), times without
  seconds, with fractions, `AM`/`PM` or a zone. A date whose day and month could be either
  way round in every sampled value (no day past 12) keeps both orders as candidates; the
  check over every row decides, else the column stays text and says why.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import re
from collections import Counter
from collections.abc import Iterable
from typing import Literal

from spark_workers import manifest, read_options

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

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
TRUE_WORDS = ("true", "t", "yes")
FALSE_WORDS = ("false", "f", "no")

_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_GROUPED = {
    ",": re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?"),
    ".": re.compile(r"[+-]?\d{1,3}(\.\d{3})+(,\d+)?"),
}
_DECIMAL_COMMA = re.compile(r"[+-]?(\d+,?\d*|,\d+)([eE][+-]?\d+)?")
_LEADING_ZERO = re.compile(r"[+-]?0\d")

_YMD = re.compile(r"(\d{4})([/.-])(\d{1,2})\2(\d{1,2})")
_DMY = re.compile(r"(\d{1,2})([/.-])(\d{1,2})\2(\d{4})")
_MON_D_Y = re.compile(r"([A-Za-z]{3,9})([ -])(\d{1,2})(,?)\2(\d{4})")
_D_MON_Y = re.compile(r"(\d{1,2})([ -])([A-Za-z]{3,9})\2(\d{4})")
_TIME = re.compile(
    r"(?P<sep>[ T])(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?)?"
    r"(?: ?(?P<ampm>[AaPp][Mm]))?(?P<zsep> ?)(?P<zone>Z|[+-]\d{2}:\d{2}|[+-]\d{4}|[+-]\d{2})?"
)
#: ISO dates and timestamps Spark's cast reads with no pattern (`inference`'s default).
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
ISO_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?(Z|[+-]\d{2}:?\d{2})?"
)
#: A pattern of the default form: Spark's cast, no pattern.
ISO = ""


@dataclasses.dataclass(frozen=True)
class Guess:
    """What a column's sampled values are: `type` (`int`, `double`, `boolean`, `date`,
    `timestamp`, `string`), the candidate patterns of a date or timestamp (`ISO` for the
    default form; two for a day/month order the sample did not decide), the number format,
    whether booleans are spelled other than true/false, how many values were sampled, and
    for a text column that looks like dates, why it stayed text."""

    type: str
    patterns: tuple[str, ...] = ()
    decimal: Literal[".", ","] = "."
    thousands: Literal[",", "."] | None = None
    words: bool = False
    values: int = 0
    why_text: str | None = None

    def column_format(self, pattern: str | None = None) -> read_options.ColumnFormat | None:
        """The read format of this column once its pattern is chosen (None: the default)."""
        chosen = pattern if pattern is not None else (self.patterns[0] if self.patterns else "")
        fmt = read_options.ColumnFormat(
            pattern=chosen or None,
            decimal=self.decimal,
            thousands=self.thousands,
            words=self.words,
        )
        return None if fmt == read_options.ColumnFormat() else fmt


@dataclasses.dataclass(frozen=True)
class Sniffed:
    """The dialect found (as read options: only those the user left unset are filled),
    the column names (a header's, made unique and non-empty; `_c0`... without one), whether
    names had to be changed from the header's, and a `Guess` per column."""

    options: read_options.ReadOptions
    names: list[str]
    renamed: bool
    guesses: dict[str, Guess]
    rows: int


class SniffError(Exception):
    """The sample cannot be read as CSV (no line, no file)."""


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
    guesses_rest = [guess([r[i] for r in rest], markers, file_decimal) for i in range(width)]
    header = options.header
    if header is None:
        header = is_header(first, guesses_rest, markers, file_decimal, rest) if rest else True
    data = rest if header else rows
    guesses = (
        guesses_rest
        if header
        else [guess([r[i] for r in data], markers, file_decimal) for i in range(width)]
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


def _file_decimal(rows: list[list[str]], delimiter: str, markers: set[str]) -> Decimal:
    """`,` when the file writes numbers with a decimal comma (a value such as `1,5` or
    `-0,25` in a file that is not comma-separated), else `.`."""
    if delimiter == ",":
        return "."
    for row in rows[:MAX_ROWS]:
        for value in row:
            v = value.strip()
            if "," in v and v not in markers and _DECIMAL_COMMA.fullmatch(v):
                if not _GROUPED[","].fullmatch(v):
                    return ","
    return "."


def is_header(
    first: list[str],
    guesses: list[Guess],
    markers: set[str],
    decimal: Decimal,
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
        alone = guess([value], markers, decimal).type
        numbers = ("int", "double")
        if column.type in numbers and alone not in numbers:
            return True
        if column.type == "boolean" and alone != "boolean":
            return True
        if column.type in ("date", "timestamp") and not (set(column.patterns) & set(_patterns(v))):
            return True
        if column.type == "double" and _INTEGER.fullmatch(v):
            others = [r[i].strip() for r in rest if i < len(r)]
            named_by_numbers = named_by_numbers or not any(_INTEGER.fullmatch(o) for o in others)
        elif column.type == "double":
            return False
    return named_by_numbers


Decimal = Literal[".", ","]


def guess(values: list[str], markers: set[str], decimal: Decimal = ".") -> Guess:
    """The narrowest type every present value of `values` is written as (see the module)."""
    present = [v.strip() for v in values if v not in markers and v.strip() not in markers]
    present = [v for v in present if v]
    n = len(present)
    if not present:
        return Guess("string", values=0)
    leading_zero = any(_LEADING_ZERO.match(v) for v in present)
    number = _number(present, decimal)
    if number is not None:
        if leading_zero:
            return Guess("string", values=n)
        kind, thousands = number
        return Guess(
            kind, decimal=decimal if kind == "double" else ".", thousands=thousands, values=n
        )
    lower = {v.lower() for v in present}
    if lower <= set(TRUE_WORDS + FALSE_WORDS) and (not lower <= {"t", "f"} or lower == {"t", "f"}):
        return Guess("boolean", words=not lower <= {"true", "false"}, values=n)
    return _datetime(present, n)


def _number(present: list[str], decimal: Decimal) -> tuple[str, Decimal | None] | None:
    """(`int` or `double`, the thousands separator or None) when every value is a number."""
    thousands: Decimal = "." if decimal == "," else ","
    separator: Decimal | None = None
    grouped = _GROUPED[thousands]
    plain = _DECIMAL_COMMA if decimal == "," else _NUMBER
    kind = "int"
    for v in present:
        if _INTEGER.fullmatch(v):
            continue
        if grouped.fullmatch(v):
            separator = thousands
            if decimal in v:
                kind = "double"
            continue
        if plain.fullmatch(v) or (decimal == "," and _NUMBER.fullmatch(v) and "." not in v):
            kind = "double"
            continue
        return None
    return kind, separator


def _datetime(present: list[str], n: int) -> Guess:
    """A date or timestamp guess when one pattern (or one pair of day/month orders) reads
    every value; text otherwise, with the reason when the values look like dates."""
    common: set[str] | None = None
    looks = 0
    for v in present:
        found = set(_patterns(v))
        if found:
            looks += 1
        common = found if common is None else common & found
        if not common:
            break
    if not common:
        if looks * 2 >= n:
            return Guess("string", values=n, why_text=_why_mixed(present))
        return Guess("string", values=n)
    kind = "timestamp" if any("H" in p or "h" in p for p in common) else "date"
    if ISO in common:
        iso_kind = "date" if all(ISO_DATE.fullmatch(v) for v in present) else "timestamp"
        return Guess(iso_kind, patterns=(ISO,), values=n)
    ordered = sorted(common)
    if len(ordered) == 2 and {p[:2] for p in ordered} in ({"d/", "M/"}, {"d-", "M-"}, {"d.", "M."}):
        day_first, month_first = sorted(ordered, key=lambda p: p.startswith("M"))
        return Guess(kind, patterns=(day_first, month_first), values=n)
    return Guess(kind, patterns=(ordered[0],), values=n)


def _why_mixed(present: list[str]) -> str:
    by_pattern = Counter(p for v in present for p in (_patterns(v)[:1] or ["text"]))
    shown = ", ".join(f"{p or 'ISO'} ({c})" for p, c in by_pattern.most_common(3))
    return f"its values are written in more than one way: {shown}"


def _patterns(value: str) -> list[str]:
    """Every Spark datetime pattern (`ISO`: the cast's default form) that reads `value`."""
    if ISO_TIMESTAMP.fullmatch(value):
        return [ISO]
    date_end, dates = _date_patterns(value)
    if not dates:
        return []
    rest = value[date_end:]
    if not rest:
        return dates
    time = _TIME.fullmatch(rest)
    clock = _clock(time) if time is not None else None
    if time is None or clock is None:
        return []
    separator = "'T'" if time["sep"] == "T" else " "
    zones = [""]
    if time["zone"]:
        zone = time["zone"]
        if zone == "Z":
            zones = ["XXX", "XX", "X"]
        else:
            zones = ["XXX"] if ":" in zone else ["XX"] if len(zone) == 5 else ["X"]
        zones = [time["zsep"] + z for z in zones]
    elif time["zsep"]:
        return []
    return [f"{d}{separator}{clock}{z}" for d in dates for z in zones]


def _clock(time: re.Match[str]) -> str | None:
    """The pattern of a time of day (`H:mm`, `h:mm:ss a`, `H:mm:ss.SSS`), None if invalid."""
    hour, minute = int(time["h"]), int(time["m"])
    if minute > 59 or (time["s"] and int(time["s"]) > 59):
        return None
    if time["ampm"] and not 1 <= hour <= 12 or not time["ampm"] and hour > 23:
        return None
    clock = "h:mm" if time["ampm"] else "H:mm"
    if time["s"]:
        clock += ":ss"
        if time["f"]:
            clock += "." + "S" * len(time["f"])
    return clock + (" a" if time["ampm"] else "")


def _date_patterns(value: str) -> tuple[int, list[str]]:
    """(where the date ends, the patterns that read it) for a date at the start of `value`."""
    if m := _YMD.match(value):
        year, sep, month, day = int(m[1]), m[2], int(m[3]), int(m[4])
        if not _valid(year, month, day):
            return 0, []
        return m.end(), [f"yyyy{sep}M{sep}d"]
    if m := _DMY.match(value):
        a, sep, b, year = int(m[1]), m[2], int(m[3]), int(m[4])
        found = [f"d{sep}M{sep}yyyy"] if _valid(year, b, a) else []
        if _valid(year, a, b):
            found.append(f"M{sep}d{sep}yyyy")
        return m.end(), found
    if m := _MON_D_Y.match(value):
        named = _month(m[1])
        if named is None or not _valid(int(m[5]), named[0], int(m[3])):
            return 0, []
        sep = m[2]
        return m.end(), [f"{named[1]}{sep}d{m[4]}{sep}yyyy"]
    if m := _D_MON_Y.match(value):
        named = _month(m[3])
        if named is None or not _valid(int(m[4]), named[0], int(m[1])):
            return 0, []
        sep = m[2]
        return m.end(), [f"d{sep}{named[1]}{sep}yyyy"]
    return 0, []


def _month(word: str) -> tuple[int, str] | None:
    """(number, pattern letters) of an English month name or its three-letter abbreviation."""
    lower = word.lower()
    if lower in MONTHS:
        return MONTHS.index(lower) + 1, "MMM"
    if lower in MONTH_NAMES:
        return MONTH_NAMES.index(lower) + 1, "MMMM"
    return None


def _valid(year: int, month: int, day: int) -> bool:
    import datetime as dt

    try:
        dt.date(year, month, day)
    except ValueError:
        return False
    return year >= 1000
