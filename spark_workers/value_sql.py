"""Raw text values as Spark SQL: literals and names no user's text can end or escape, each
type's parse of a value (null where it does not parse) and its test, shared by inference
(`inference`: which type every value of a column is) and conversion (`conversion`: the typed
values, and why a row is bad).
"""

from __future__ import annotations

import re

from spark_workers import read_options

_DATE = r"^\d{4}-\d{2}-\d{2}$"
_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?(Z|[+-]\d{2}:?\d{2})?$"


#: Text written as a plain SQL literal: letters, digits and a few signs, none of which ends
#: or escapes one. Anything else is hex (a plain literal parses and plans faster).
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9 _./:+=,;-]*")


def sql_text(value: str) -> str:
    """`value` as a Spark SQL string literal that no character of it can end or escape
    (markers, formats and messages come from users): quoted as it is when every character
    is one of `_PLAIN_TEXT`'s (allowed, not escaped), else its UTF-8 bytes in hex, cast to
    text."""
    if _PLAIN_TEXT.fullmatch(value):
        return f"'{value}'"
    return f"CAST(X'{value.encode().hex()}' AS STRING)"


def sql_name(name: str) -> str:
    """A column name as a SQL identifier (`read_options.check_columns` refuses backticks;
    doubled anyway)."""
    return "`" + name.replace("`", "``") + "`"


def in_list(raw: str, values: list[str] | tuple[str, ...]) -> str:
    """`raw IN (values)` in SQL, false for no values."""
    if not values:
        return "false"
    return f"{raw} IN ({', '.join(sql_text(v) for v in values)})"


def parse(
    raw: str,
    type_name: str,
    options: read_options.ReadOptions,
    fmt: read_options.ColumnFormat | None = None,
) -> str:
    """`raw` (SQL) parsed as `type_name`, null where it does not parse; written as `fmt`
    says where the column has a format of its own."""
    pattern = fmt.pattern if fmt is not None else None
    if type_name == "date" and (pattern or options.date_format):
        return f"try_to_date({raw}, {sql_text(pattern or options.date_format or '')})"
    if type_name in ("timestamp", "timestamp_ntz") and (pattern or options.timestamp_format):
        chosen = pattern or options.timestamp_format or ""
        parsed = f"try_to_timestamp({raw}, {sql_text(chosen)})"
        return f"CAST({parsed} AS TIMESTAMP_NTZ)" if type_name == "timestamp_ntz" else parsed
    if type_name == "boolean":
        words = (
            (TRUE_WORDS, FALSE_WORDS) if fmt is not None and fmt.words else (("true",), ("false",))
        )
        cases = " ".join(
            f"WHEN {sql_text(w)} THEN {value}"
            for value, spelled in zip(("true", "false"), words, strict=True)
            for w in spelled
        )
        return f"CASE lower(trim({raw})) {cases} END"
    if fmt is not None and (fmt.decimal != "." or fmt.thousands) and _is_number(type_name):
        return _number(raw, type_name, fmt)
    return f"try_cast({raw} AS {type_name})"


#: Booleans as R, spreadsheets and DuckDB write them (any case), with a `words` format.
TRUE_WORDS = ("true", "t", "yes")
FALSE_WORDS = ("false", "f", "no")


def same_family(type_name: str, guessed: str) -> bool:
    """Whether a declared type (Spark's `typeName`) takes the format of a guessed one."""
    numbers = ("byte", "short", "integer", "long", "float", "double", "decimal")
    if guessed in ("int", "double"):
        return type_name in numbers or type_name.startswith("decimal")
    return type_name == guessed


def _is_number(type_name: str) -> bool:
    return type_name in ("tinyint", "smallint", "int", "bigint", "float", "double") or (
        type_name.startswith("decimal")
    )


def _number(raw: str, type_name: str, fmt: read_options.ColumnFormat) -> str:
    """`raw` as a number written with `fmt`'s separators (`1.234,5`): only where every
    group of digits is where a thousands separator puts them, then the separators
    translated to Spark's form."""
    digits = r"\d+"
    if fmt.thousands:
        digits = rf"(\d+|\d{{1,3}}({re.escape(fmt.thousands)}\d{{3}})+)"
    decimal = re.escape(fmt.decimal)
    integral = type_name in ("tinyint", "smallint", "int", "bigint")
    shape = (
        f"^[+-]?{digits}$"
        if integral
        else rf"^[+-]?({digits}({decimal}\d*)?|{decimal}\d+)([eE][+-]?\d+)?$"
    )
    value = f"trim({raw})"
    translated = f"translate({value}, {sql_text(fmt.decimal + (fmt.thousands or ''))}, '.')"
    return (
        f"CASE WHEN {value} RLIKE {sql_text(shape)} THEN try_cast({translated} AS {type_name}) END"
    )


def fails(
    raw: str,
    type_name: str,
    options: read_options.ReadOptions,
    fmt: read_options.ColumnFormat | None = None,
) -> str:
    """True where a present value is not of `type_name` as inference understands it."""
    bad = f"{parse(raw, type_name, options, fmt)} IS NULL"
    pattern = fmt.pattern if fmt is not None else None
    if type_name == "date" and not (options.date_format or pattern):
        bad += f" OR NOT {raw} RLIKE {sql_text(_DATE)}"  # Spark's cast takes '2013' as a date
    if type_name == "timestamp" and not (options.timestamp_format or pattern):
        bad += f" OR NOT trim({raw}) RLIKE {sql_text(_TIMESTAMP)}"
    return f"({bad})"


#: Words Spark's date and timestamp parsers have read as values (in some versions).
_SPECIAL_MOMENTS = ("epoch", "now", "today", "yesterday", "tomorrow")


#: Datetime pattern letters whose field may be written in letters (month and day names,
#: eras, AM/PM, zones, quarters by name): `MMM`, `LLL`, `E`, `G`, `a`, `B`, `z`, `V`, `O`,
#: `X`/`x` (`Z`), `QQQ`. A pattern without them reads digits and punctuation only.
_WORD_FIELDS = re.compile(r"[MLQq]{3,}|[EGaBzVOXxZ]")


def _unquoted(pattern: str) -> str:
    """A datetime pattern without its quoted literals (`'T'`, `'at'`)."""
    return re.sub(r"'[^']*'", "", pattern)


def may_parse(
    marker: str,
    type_name: str,
    options: read_options.ReadOptions,
    fmt: read_options.ColumnFormat | None = None,
) -> bool:
    """False when missing-value marker `marker` cannot be a value of `type_name` whatever
    Spark's parser does: ASCII text with no digit is no number, date nor timestamp (nor
    `NaN`, `Infinity`), and no boolean unless it spells one. Any other marker is asked to
    Spark, in the plan (`conversion`): a sentinel, `-999`. The bench's 8 columns with the six
    default markers: a plan of 2.4 kB of SQL instead of 7.5."""
    if not marker.isascii():
        return True
    lower = marker.lower()
    if type_name == "boolean":
        words = fmt is not None and fmt.words and lower.strip() in TRUE_WORDS + FALSE_WORDS
        return "true" in lower or "false" in lower or words
    if type_name in ("date", "timestamp", "timestamp_ntz"):
        patterns = [
            fmt.pattern if fmt is not None else None,
            options.date_format,
            options.timestamp_format,
        ]
        if any(p is not None and _WORD_FIELDS.search(_unquoted(p)) for p in patterns):
            return True  # a pattern of words (month names, AM/PM, zones) needs no digit
        return any(c.isdigit() for c in marker) or any(w in lower for w in _SPECIAL_MOMENTS)
    if any(c.isdigit() for c in marker):
        return True
    if type_name in ("float", "double"):
        return "inf" in lower or "nan" in lower
    return type_name not in ("tinyint", "smallint", "int", "bigint") and not type_name.startswith(
        "decimal"
    )
