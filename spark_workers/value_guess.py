"""What a column's sampled values are written as (`Guess`), for the sniffer (`sniffing`):
integers, numbers (a decimal comma in a file that is not comma-separated, thousands
separators), booleans (`true`/`false`, `T`/`F` when both appear, `yes`/`no`, any case),
dates and timestamps in ISO form or written with `/`, `.`, `-`, day first or month first,
month names (`Jan 1 2000`, `1-Mar-2021`), times without seconds, with fractions, `AM`/`PM`
or a zone. A date whose day and month could be either way round in every sampled value (no
day past 12) keeps both orders as candidates; the check over every row (`inference`)
decides, else the column stays text and says why.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Literal

from spark_workers import read_options

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
INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


GROUPED = {
    ",": re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?"),
    ".": re.compile(r"[+-]?\d{1,3}(\.\d{3})+(,\d+)?"),
}


DECIMAL_COMMA = re.compile(r"[+-]?(\d+,?\d*|,\d+)([eE][+-]?\d+)?")
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
    grouped = GROUPED[thousands]
    plain = DECIMAL_COMMA if decimal == "," else _NUMBER
    kind = "int"
    for v in present:
        if INTEGER.fullmatch(v):
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
        found = set(patterns_of(v))
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
    by_pattern = Counter(p for v in present for p in (patterns_of(v)[:1] or ["text"]))
    shown = ", ".join(f"{p or 'ISO'} ({c})" for p, c in by_pattern.most_common(3))
    return f"its values are written in more than one way: {shown}"


def patterns_of(value: str) -> list[str]:
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
