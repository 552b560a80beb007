"""No text is silently compared as a date: a query comparing a text column with a literal
that looks like a date is refused, naming the column and the ingest option that types it.

`date >= '2014-06-01'` over a text column holding `2014/06/01` compares texts, and
`'2014/06/01' > '2014-09-01'`: a range filter that answers `ok` with no rows. The pipeline
types such columns as dates (`sniffing`); one it could not type (day and month either way
round, several formats) stays text, with the reason and the option that settles it kept in
the column's metadata (`manifest.TEXT_DATES_METADATA`, written into the Parquet files and
read back with them).

The rule, checked on the analyzed plan of every query (SQL and structured, `sql_guard`):
a comparison (`=`, `<=>`, `<>`, `<`, `<=`, `>`, `>=`, `BETWEEN`, `IN`) between a text
column itself and a text literal shaped like a date (`2014-06-01`, `2014-06`, `2014/06/01`,
`01/06/2014`, `1-Jun-2014`, `Jun 1 2014`, with a time or not) is refused (`reason:
refused`, `column`, `option`). Comparing a parsed value is the way: `to_date(col,
'yyyy/MM/dd') >= '2014-06-01'` (or `CAST(col AS STRING)` to mean the text comparison).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_workers import manifest

if TYPE_CHECKING:
    from spark_workers.plan_tree import Tree

#: Comparison expressions (Spark's classes): `BETWEEN` is analyzed into two of them.
COMPARISONS = frozenset(
    {
        "EqualTo",
        "EqualNullSafe",
        "LessThan",
        "LessThanOrEqual",
        "GreaterThan",
        "GreaterThanOrEqual",
        "In",
        "InSet",
    }
)
_MONTH = r"[A-Za-z]{3,9}\.?"
_TIME = r"([T ]\d{1,2}:\d{2}.*)?"
DATE_LIKE = re.compile(
    r"\s*("
    r"\d{4}[-/.]\d{1,2}([-/.]\d{1,2})?"
    r"|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}"
    rf"|\d{{1,2}}[ -]{_MONTH}[ -]\d{{2,4}}"
    rf"|{_MONTH}[ -]\d{{1,2}},?[ -]\d{{4}}"
    rf"){_TIME}\s*"
)


class TextDateComparison(Exception):
    """A text column compared with a date-looking literal: (column, literal, option)."""

    def __init__(self, column: str, literal: str, option: str) -> None:
        super().__init__(
            f"column {column!r} is text, and comparing it with {literal!r} would compare "
            f"texts, not dates (a silent wrong answer: '2014/06/01' > '2014-09-01'). "
            f"{option}; or compare a parsed value: to_date({column}, 'PATTERN') >= {literal!r}"
        )
        self.column, self.literal, self.option = column, literal, option


#: A column's reason to be text, from the dataset's schema (None: none known).
Hints = Callable[[str], str | None]


def check(trees: list[Tree], hints: Hints | None = None) -> None:
    """Raise `TextDateComparison` for the first comparison of a text column with a
    date-looking literal anywhere in an analyzed plan (subqueries and rewrites included).
    `hints` gives a column's reason to be text (the metadata the ingest wrote: a plan's
    JSON does not render attributes' metadata)."""
    for tree in trees:
        _visit(tree, hints or (lambda name: None))


def _visit(tree: Tree, hints: Hints) -> None:
    from spark_workers import plan_tree

    if tree.name in COMPARISONS:
        _comparison(tree, list(tree.children), hints)
    elif tree.name == "Between":  # its rewrite compares a common expression, not the column
        parts = [tree.field(k) for k in ("input", "lower", "upper")]
        _comparison(tree, [p for p in parts if p is not None], hints)
    for _key, value in tree.fields():
        for inner in plan_tree.nested(value):
            _visit(inner, hints)
    for child in tree.children:
        _visit(child, hints)


def _comparison(tree: Tree, operands: list[Tree], hints: Hints) -> None:
    columns = [c for c in operands if _is_text_column(c)]
    if not columns:
        return
    literals = [_text_literal(c) for c in operands]
    literals += [str(v) for v in _set_values(tree)]
    for literal in literals:
        if literal is not None and DATE_LIKE.fullmatch(literal):
            name = str(columns[0].node.get("name"))
            raise TextDateComparison(name, literal, _option(hints(name)))


def _is_text_column(tree: Tree) -> bool:
    return tree.name == "AttributeReference" and str(tree.node.get("dataType", "")).startswith(
        "string"
    )


def _text_literal(tree: Tree) -> str | None:
    if tree.name == "Literal" and str(tree.node.get("dataType", "")).startswith("string"):
        value = tree.node.get("value")
        return value if isinstance(value, str) else None
    return None


def _set_values(tree: Tree) -> list[Any]:
    """The values of an `InSet` (a long `IN` list the optimizer made; rendered as text)."""
    if tree.name != "InSet":
        return []
    value = tree.node.get("hset")
    if isinstance(value, list):
        return value
    return []


def hint_of(metadata: dict[str, Any]) -> str | None:
    """The ingest's reason a column is text, from its metadata."""
    why = metadata.get(manifest.TEXT_DATES_METADATA)
    return why if isinstance(why, str) and why else None


def _option(why: str | None) -> str:
    """What types the column: the pipeline's reason and option, or the general advice."""
    if why:
        return f"The ingest kept it text: {why}"
    return (
        "Ingest it again with `pipeline ingest` (which types dates written yyyy/MM/dd, "
        "dd/MM/yyyy, with month names...), with --date-format PATTERN (or "
        "--timestamp-format) where it says the order of day and month is ambiguous"
    )
