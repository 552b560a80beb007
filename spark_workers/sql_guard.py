"""Only read-only SELECTs over the worker's own dataset reach Spark.

Clients send SQL text; Spark SQL can also create tables, set configuration, read any file
(`parquet.`/path``, `read_files`), call Java methods (`reflect`) or list the catalog. The
guard checks a query twice, with Spark's own parser and analyzer rather than regexes:

1. the *parsed* plan (nothing executed yet; `spark.sql` would run a command eagerly) may only
   hold query operators from an allowlist, relations named by a single identifier, and no
   table-valued function or denied function;
2. the *analyzed* plan (`spark.sql` is lazy for queries) may only read the temp view
   `dataset`: every leaf relation outside that view is refused.

`spark.sql.runSQLOnFiles=false` (set by `session`) is a third, independent fence.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from worker_sdk import HandlerError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_PLAN_PACKAGE = "org.apache.spark.sql.catalyst.plans.logical."
_EXPRESSION_PACKAGES = (
    "org.apache.spark.sql.catalyst.expressions.",
    "org.apache.spark.sql.catalyst.analysis.",
)

#: Logical operators a read-only query is made of (simple class names).
ALLOWED_OPERATORS = frozenset(
    {
        "Aggregate",
        "CTERelationDef",
        "CTERelationRef",
        "Deduplicate",
        "Distinct",
        "Except",
        "Expand",
        "Filter",
        "Generate",
        "GlobalLimit",
        "Intersect",
        "Join",
        "LateralJoin",
        "LocalLimit",
        "LocalRelation",
        "Offset",
        "OneRowRelation",
        "Pivot",
        "Project",
        "Repartition",
        "RepartitionByExpression",
        "ResolvedHint",
        "Sample",
        "Sort",
        "SubqueryAlias",
        "Tail",
        "Union",
        "UnresolvedHint",
        "UnresolvedWith",
        "Unpivot",
        "View",
        "Window",
        "WithCTE",
        "WithWindowDefinition",
    }
)

#: Leaf relations allowed outside the dataset view (constants and CTE references).
ALLOWED_LEAVES = frozenset({"CTERelationRef", "LocalRelation", "OneRowRelation"})

#: Functions that reach outside the dataset: Java reflection, file names.
DENIED_FUNCTIONS = frozenset(
    {
        "input_file_block_length",
        "input_file_block_start",
        "input_file_name",
        "java_method",
        "reflect",
        "try_reflect",
    }
)


class QueryRefused(HandlerError):
    """The SQL is not a read-only query over the dataset."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, details={"reason": "refused", **details})


def checked_sql(spark: SparkSession, sql: str, *, view: str = "dataset") -> DataFrame:
    """The DataFrame of `sql`, once it is known to only read `view` (raises `HandlerError`)."""
    if not sql.strip():
        raise QueryRefused("empty SQL query")
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        parsed = json.loads(parser.parsePlan(sql).toJSON())
    except Exception as exc:
        raise HandlerError(f"invalid SQL: {_message(exc)}", details={"reason": "syntax"}) from exc
    check_parsed(parsed)
    try:
        df = spark.sql(sql)
        analyzed = json.loads(df._jdf.queryExecution().analyzed().toJSON())
    except Exception as exc:
        raise HandlerError(
            f"invalid query: {_message(exc)}", details={"reason": "analysis"}
        ) from exc
    check_analyzed(analyzed, view=view)
    return df


def check_parsed(flat_plan: list[dict[str, Any]]) -> None:
    """Refuse anything but query operators, single-name relations and allowed functions."""
    if not flat_plan:
        raise QueryRefused("empty plan")
    for node in _all_nodes(flat_plan):
        cls: str = node["class"]
        simple = cls.rsplit(".", 1)[-1]
        if simple == "UnresolvedRelation":
            parts = _name_parts(node.get("multipartIdentifier"))
            if len(parts) != 1:
                raise QueryRefused(
                    f"only the view 'dataset' can be queried, not {'.'.join(parts)!r}"
                )
        elif simple == "UnresolvedTableValuedFunction":
            name = ".".join(_name_parts(node.get("name")))
            raise QueryRefused(f"table-valued functions are not allowed ({name})")
        elif simple == "UnresolvedFunction":
            parts = _name_parts(node.get("nameParts"))
            if parts and parts[-1].lower() in DENIED_FUNCTIONS:
                raise QueryRefused(f"function {parts[-1]!r} is not allowed")
        elif cls.startswith(_PLAN_PACKAGE):
            if simple not in ALLOWED_OPERATORS:
                raise QueryRefused(
                    f"only SELECT queries are allowed (this is a {simple})", operator=simple
                )
        elif not cls.startswith(_EXPRESSION_PACKAGES):
            raise QueryRefused(f"only SELECT queries are allowed (found {simple})")


def check_analyzed(flat_plan: list[dict[str, Any]], *, view: str = "dataset") -> None:
    """Refuse a plan reading any relation other than the temp view `view`."""
    for tree in _trees(flat_plan):
        _check_tree(tree, view)


def _check_tree(tree: _Tree, view: str) -> None:
    node, children = tree
    simple = node["class"].rsplit(".", 1)[-1]
    if simple == "View":
        name = ((node.get("desc") or {}).get("identifier") or {}).get("table")
        if name != view or not node.get("isTempView"):
            raise QueryRefused(f"only the view {view!r} can be queried, not {name!r}")
        return  # the dataset's own plan: its relations are the point
    is_plan = not node["class"].startswith(_EXPRESSION_PACKAGES)
    if is_plan and not children and simple not in ALLOWED_LEAVES:
        raise QueryRefused(f"the query reads a relation other than {view!r} ({simple})")
    for value in node.values():  # subquery plans live in expression fields
        for nested in _nested_trees(value):
            _check_tree(nested, view)
    for child in children:
        _check_tree(child, view)


# -- Spark's TreeNode.toJSON: each tree is a pre-order list of nodes with "num-children" ----

_Tree = tuple[dict[str, Any], list[Any]]


def _trees(flat: list[dict[str, Any]]) -> list[_Tree]:
    trees, i = [], 0
    while i < len(flat):
        tree, i = _build(flat, i)
        trees.append(tree)
    return trees


def _build(flat: list[dict[str, Any]], i: int) -> tuple[_Tree, int]:
    node, children, j = flat[i], [], i + 1
    for _ in range(int(node.get("num-children", 0))):
        child, j = _build(flat, j)
        children.append(child)
    return (node, children), j


def _nested_trees(value: Any) -> Iterator[_Tree]:
    if isinstance(value, list) and value:
        if isinstance(value[0], dict) and "num-children" in value[0]:
            yield from _trees(value)
        else:
            for item in value:
                yield from _nested_trees(item)
    elif isinstance(value, dict) and "num-children" not in value:
        for item in value.values():
            yield from _nested_trees(item)


def _all_nodes(value: Any) -> Iterator[dict[str, Any]]:
    """Every node of every tree in a JSON plan, expressions and subqueries included."""
    if isinstance(value, dict):
        if "class" in value and "num-children" in value:
            yield value
        for item in value.values():
            yield from _all_nodes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _all_nodes(item)


def _name_parts(value: Any) -> list[str]:
    """A Scala Seq rendered as "[a, b]" (or a JSON list) as a list of names."""
    if isinstance(value, list):
        return [str(v) for v in value]
    text = str(value or "").strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [part.strip() for part in text.split(",")] if text else []


def _message(exc: BaseException) -> str:
    getter = getattr(exc, "getMessage", None)
    text = getter() if callable(getter) else str(exc)
    return str(text).strip().split("\n== SQL ==")[0].strip()
