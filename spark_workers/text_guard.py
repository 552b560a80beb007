"""Client SQL over Spark Connect: decided in the worker, before the server receives anything.

Over Spark Connect the worker has no JVM, and the only way to see Spark's plan of a text is
to have the server analyse it, which for `EXECUTE IMMEDIATE '<command>'` runs the command
(see `connect`). So the text is parsed here, by sqlglot (Spark dialect, pure Python), and:

1. the text is bounded and holds no `${`, as in `sql_guard`;
2. the tree is checked against the allowlist of `sql_allowlist`, the embedded guard's own:
   every node's type must be a known-good piece of a read-only query (`TEXT_NODES`; anything
   else, a command sqlglot could only keep as an opaque `Command` included, is refused),
   every function call an allowed function (`ALLOWED_FUNCTIONS`, by name, or by the sqlglot
   class those names parse into), qualified at most `builtin.`/`system.builtin.`, every
   relation the view `dataset` or a CTE of the query, hints join hints only, and the bounds
   of `sql_bounds` (data generated from constants, CTE expansion, grouping sets) hold;
3. the server is sent SQL **generated from the checked tree** (`tree.sql(dialect="spark")`,
   comments dropped), never the client's text; the generated text is parsed again and must
   give the same tree (a literal or identifier the generator would quote differently never
   reaches the server as something else);
4. the server analyses that text (`DataFrame.schema`: analysis only) and the worker reads its
   analysed plan (`explain`): every operator must be one of `ANALYZED_OPERATORS`, and every
   leaf relation the temp view `dataset`, a constant or a CTE reference. Connect renders the
   plan as text, not as the JSON the embedded guard walks: the expressions' resolved
   classes are not visible there (docs/security.md says what that leaves to step 2).

The DataFrame is the lazy SQL relation of the generated text: one round trip less than
`spark.sql` (which executes a command to learn it is a query).
"""

from __future__ import annotations

import functools
import logging
import re
from typing import TYPE_CHECKING, Any

from spark_workers import connect, plan_tree, sql_bounds
from spark_workers import sql_allowlist as allow
from spark_workers.sql_guard import Limits, QueryRefused, QueryTooLarge
from worker_sdk import HandlerError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from sqlglot import exp


def _dialect() -> Any:
    """sqlglot's Spark dialect, reading string literals as Spark's lexer does: a doubled quote
    inside a literal is the quote (`'it''s'` is `it's`; sqlglot's Spark reads two literals
    `'it'` `'s'`, concatenated: found by the differential test)."""
    from sqlglot.dialects.spark import Spark

    class SparkLexer(Spark):
        class Tokenizer(Spark.Tokenizer):
            STRING_ESCAPES = ["\\", "'", '"']

    return SparkLexer


DIALECT: Any = _dialect()

# sqlglot logs the text it could not parse (a client's): the guard answers instead.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


def checked_sql(
    spark: SparkSession, sql: str, *, view: str = "dataset", limits: Limits | None = None
) -> DataFrame:
    """The Connect DataFrame of `sql` once it is known to be an allowed read-only query of
    `view` (raises `HandlerError` with the reasons `sql_guard` gives)."""
    text = checked_text(sql, view=view, limits=limits)
    df: Any = connect.lazy_sql(spark, text)
    try:
        plan = df._explain_string(extended=True)
    except Exception as exc:
        raise HandlerError(
            f"invalid query: {_server_message(exc)}", details={"reason": "analysis"}
        ) from exc
    check_analyzed_text(plan, view=view)
    return df  # type: ignore[no-any-return]


def checked_text(sql: str, *, view: str = "dataset", limits: Limits | None = None) -> str:
    """The Spark SQL generated from the checked tree of `sql` (no server involved)."""
    import sqlglot
    from sqlglot import errors

    limits = limits or Limits()
    if not sql.strip():
        raise QueryRefused("empty SQL query")
    if limits.max_sql_chars is not None and len(sql) > limits.max_sql_chars:
        raise QueryTooLarge(
            "SQL text too long", limit="max_sql_chars", size=len(sql), maximum=limits.max_sql_chars
        )
    if "${" in sql:
        raise QueryRefused("'${' is not allowed in SQL text (no variable substitution)")
    try:
        trees = sqlglot.parse(sql, dialect=DIALECT)
    except RecursionError:
        raise QueryRefused("the query is nested too deeply") from None
    except (errors.SqlglotError, LookupError, ValueError, TypeError) as exc:
        # sqlglot's function builders raise plain errors on a wrong arity.
        raise HandlerError(
            f"invalid SQL: {_first_line(exc)}", details={"reason": "syntax"}
        ) from exc
    statements = [t for t in trees if t is not None]
    if len(statements) != 1:
        raise HandlerError(
            "invalid SQL: exactly one statement is allowed", details={"reason": "syntax"}
        )
    tree = statements[0]
    try:
        check_tree(tree, view=view, limits=limits)
        text = tree.sql(dialect=DIALECT, comments=False)
        # What is sent must itself pass, and be written back the same: the guard's verdict
        # is then about the very text the server receives.
        again = sqlglot.parse_one(text, dialect=DIALECT)
        check_tree(again, view=view, limits=limits)
        stable = again.sql(dialect=DIALECT, comments=False) == text
    except RecursionError:
        raise QueryRefused("the query is nested too deeply") from None
    except (errors.SqlglotError, LookupError, ValueError, TypeError) as exc:
        raise QueryRefused(f"the query cannot be written back as Spark SQL: {exc}") from None
    if not stable or "${" in text:
        raise QueryRefused("the query does not survive being written back as Spark SQL")
    return text


def check_tree(tree: exp.Expr, *, view: str = "dataset", limits: Limits | None = None) -> None:
    """Refuse a sqlglot tree holding anything but allowed parts, or asking more than
    `limits`."""
    from sqlglot import exp

    limits = limits or Limits()
    if not isinstance(tree, exp.Query | exp.Values):
        raise QueryRefused(
            f"only SELECT queries are allowed (found {type(tree).__name__})",
            operator=type(tree).__name__,
        )
    checker = _TextChecker(limits, view, _cte_names(tree))
    try:
        checker.visit(tree)
        sql_bounds.check_plan_size(_expanded_size(tree, {}), max_plan_nodes=limits.max_plan_nodes)
    except sql_bounds.OutOfBounds as exc:
        raise QueryRefused(str(exc), **exc.details) from None


#: An operator line of Spark's plan rendering: tree drawing, then the node's name.
_PLAN_LINE = re.compile(r"^[\s:|+\-]*([A-Za-z][A-Za-z0-9]*)")
#: Leaves of an analysed read-only query, besides the dataset's view.
_LEAVES = frozenset({"OneRowRelation", "LocalRelation", "CTERelationRef"})


def check_analyzed_text(plan: str, *, view: str = "dataset") -> None:
    """Refuse an analysed plan (as `explain(extended=True)` renders it) with an operator
    outside `ANALYZED_OPERATORS` or a relation other than the temp view `view`."""
    section = plan.split("== Analyzed Logical Plan ==", 1)[-1]
    section = section.split("== Optimized Logical Plan ==", 1)[0]
    # After the header: the output schema (`a: int, b: string`), then the plan's tree.
    lines = [ln for ln in section.splitlines()[1:] if ln.strip()][1:]
    inside_view = None
    for line in lines:
        depth = len(line) - len(line.lstrip(" :|+-"))
        if inside_view is not None and depth > inside_view:
            continue  # the dataset's own plan: reading it is the point
        inside_view = None
        match = _PLAN_LINE.match(line)
        if match is None:
            continue
        name = match.group(1)
        if name == "View":
            target = line.split("View (", 1)[-1].split(",", 1)[0].strip("` ()")
            if target != view:
                raise QueryRefused(f"only the view {view!r} can be queried, not {target!r}")
            inside_view = depth
        elif name not in allow.ANALYZED_OPERATORS:
            raise QueryRefused(
                f"only SELECT queries are allowed (the analysed plan holds {name})",
                operator=name,
            )


class _TextChecker:
    """A walk over every node of a sqlglot tree."""

    def __init__(self, limits: Limits, view: str, ctes: frozenset[str]) -> None:
        self.view = view
        self.ctes = ctes
        self.budget = sql_bounds.Budget(limits.max_generated)

    def visit(self, node: exp.Expr) -> None:
        from sqlglot import exp

        kind = type(node).__name__
        if isinstance(node, exp.Anonymous | exp.Func) and kind not in allow.TEXT_NODES:
            self.function(node)
        elif kind not in allow.TEXT_NODES:
            _refuse_node(node)
        elif isinstance(node, exp.Table):
            self.table(node)
        elif isinstance(node, exp.Hint):
            self.hint(node)
            return  # its arguments are relation names, checked there
        elif isinstance(node, exp.Dot):
            self.dot(node)
        elif isinstance(node, exp.Cube | exp.Rollup | exp.GroupingSets):
            groups = len(node.expressions)
            self.budget.add_grouping_sets(kind, groups)
        elif isinstance(node, exp.With) and node.args.get("recursive"):
            raise QueryRefused("recursive CTEs are not allowed")
        for child in node.iter_expressions():
            self.visit(child)

    def function(self, node: exp.Expr) -> None:
        from sqlglot import exp

        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name not in allow.ALLOWED_FUNCTIONS:
                raise QueryRefused(f"function {node.name!r} is not allowed", function=name)
        else:
            names = _function_classes().get(type(node).__name__)
            if names is None:
                name = _spelling(node)
                raise QueryRefused(f"function {name!r} is not allowed", function=name)
            sized = [n for n in names if n in sql_bounds.SIZED_FUNCTIONS]
            name = sized[0] if sized else names[0]
        args = _call_args(node)
        self.budget.call(name, args, constant=_constant, named=_is_named)

    def table(self, node: exp.Table) -> None:
        from sqlglot import exp

        target = node.this
        if not isinstance(target, exp.Identifier):
            name = _spelling(target) if target is not None else "?"
            raise QueryRefused(f"table-valued functions are not allowed ({name})")
        parts = [p.name for p in node.parts]
        if len(parts) != 1:
            raise QueryRefused(f"only the view 'dataset' can be queried, not {'.'.join(parts)!r}")
        name = parts[0]
        if name.lower() != self.view.lower() and name.lower() not in self.ctes:
            raise QueryRefused(f"only the view {self.view!r} can be queried, not {name!r}")
        for key in ("version", "when", "changes", "format", "pattern", "partition", "only"):
            if node.args.get(key):
                raise QueryRefused(f"only the view {self.view!r} can be queried (a {key} read)")

    def hint(self, node: exp.Hint) -> None:
        from sqlglot import exp

        for item in node.expressions:
            name = item.name.upper() if isinstance(item, exp.JoinHint | exp.Anonymous) else ""
            if not name or name not in allow.JOIN_HINTS:
                shown = name or type(item).__name__
                raise QueryRefused(f"hint {shown} is not allowed (join hints only)")
            for target in item.expressions:
                names = _dotted(target.this if isinstance(target, exp.Table) else target)
                if not isinstance(target, exp.Table | exp.Column | exp.Identifier) or "?" in names:
                    raise QueryRefused(f"hint {name} takes relation names only")

    def dot(self, node: exp.Dot) -> None:
        """`builtin.f(...)`, `system.builtin.f(...)`: a qualified function call."""
        from sqlglot import exp

        if not isinstance(node.expression, exp.Func):
            return  # a struct field
        qualifier = tuple(p.lower() for p in _dotted(node.this))
        if qualifier not in allow.ALLOWED_QUALIFIERS:
            name = ".".join([*qualifier, node.expression.name])
            raise QueryRefused(f"function {name!r} is not allowed", function=name)


@functools.cache
def _function_classes() -> dict[str, tuple[str, ...]]:
    """The sqlglot class each allowed function name parses into -> those names (the names
    of `ALLOWED_FUNCTIONS` are the one list; this only says how sqlglot spells them)."""
    import sqlglot
    from sqlglot import errors, exp

    found: dict[str, list[str]] = {}
    for name in sorted(allow.ALLOWED_FUNCTIONS):
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            continue  # an operator (`+`, `<=>`...): syntax, in TEXT_NODES
        for args in ("a", "a, b", "a, b, c", ""):
            try:
                tree = sqlglot.parse_one(f"SELECT {name}({args})", dialect=DIALECT)
            except (errors.SqlglotError, LookupError, ValueError, TypeError):
                continue  # sqlglot's builders raise plain errors on a wrong arity
            node = tree.expressions[0] if isinstance(tree, exp.Select) else None
            if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous):
                found.setdefault(type(node).__name__, []).append(name)
                break
    return {cls: tuple(names) for cls, names in found.items()}


def _call_args(node: exp.Expr) -> list[exp.Expr]:
    from sqlglot import exp

    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    args: list[exp.Expr] = []
    for key in node.arg_types:
        value = node.args.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expr):
                args.append(item)
    return args


def _constant(node: Any) -> Any:
    """The value of a literal, `-literal` or `CAST(literal AS ...)`, else `NotConstant`."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _constant(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        try:
            return int(text)
        except ValueError:
            try:
                return float(text.rstrip("DdFfLlSsYy").rstrip("B"))
            except ValueError:
                raise plan_tree.NotConstant from None
    if isinstance(node, exp.Neg):
        value = _constant(node.this)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value
        raise plan_tree.NotConstant
    if isinstance(node, exp.Cast):
        value = _constant(node.this)
        target = node.to.this.name.lower() if node.to is not None else ""
        try:
            if target in ("int", "bigint", "smallint", "tinyint"):
                return int(str(value).strip())
            if target in ("double", "float", "decimal"):
                return float(str(value).strip())
        except ValueError:
            raise plan_tree.NotConstant from None
        return value
    raise plan_tree.NotConstant


def _is_named(node: Any) -> bool:
    from sqlglot import exp

    return isinstance(node, exp.Kwarg | exp.PropertyEQ)


def _cte_names(tree: exp.Expr) -> frozenset[str]:
    from sqlglot import exp

    return frozenset(cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE))


def _expanded_size(node: exp.Expr, ctes: dict[str, int]) -> int:
    """Nodes of the tree, each reference to a CTE counted as its definition's size."""
    from sqlglot import exp

    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and not node.db:
        return ctes.get(node.name.lower(), 1)
    total, scope = 1, ctes
    with_ = node.args.get("with_") or node.args.get("with")
    if isinstance(with_, exp.With):
        scope = dict(ctes)
        for cte in with_.expressions:
            size = _expanded_size(cte.this, scope)
            name = cte.alias_or_name.lower()
            scope[name] = max(size, scope.get(name, 0))
            total += size
    for child in node.iter_expressions():
        if child is not with_:
            total += _expanded_size(child, scope)
    return total


def _dotted(node: Any) -> list[str]:
    from sqlglot import exp

    if isinstance(node, exp.Dot):
        return [*_dotted(node.this), *_dotted(node.expression)]
    if isinstance(node, exp.Column):
        return [p.name for p in node.parts]
    if isinstance(node, exp.Identifier):
        return [node.name]
    return ["?"]


def _spelling(node: exp.Expr) -> str:
    from sqlglot import exp

    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    if isinstance(node, exp.Func):
        names = type(node).sql_names()
        return names[0].lower() if names else type(node).__name__
    return type(node).__name__


def _refuse_node(node: exp.Expr) -> None:
    from sqlglot import exp

    if isinstance(node, exp.Query | exp.DerivedTable):
        raise QueryRefused(f"{type(node).__name__} is not an allowed part of a query")
    if not isinstance(node, exp.Condition) or isinstance(node, exp.Command):
        raise QueryRefused(
            f"only SELECT queries are allowed (found {type(node).__name__})",
            operator=type(node).__name__,
        )
    raise QueryRefused(
        f"{type(node).__name__} is not an allowed function or expression",
        expression=type(node).__name__,
    )


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _server_message(exc: BaseException) -> str:
    getter = getattr(exc, "getMessage", None)
    try:
        text = getter() if callable(getter) else str(exc)
    except Exception:
        text = str(exc)
    return str(text).strip().split("\n== SQL ==")[0].strip().splitlines()[0]
