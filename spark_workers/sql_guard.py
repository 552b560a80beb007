"""Only read-only queries over the worker's own dataset reach Spark, and nothing a client
sends runs before the guard has decided.

`spark.sql` runs a command as soon as it is called, and even *analysing* `EXECUTE IMMEDIATE
'<command>'` runs the command (Spark 4.3). So client SQL never meets `spark.sql`:

1. the text is bounded (`max_sql_chars`), holds no `${` and is parsed with
   `sessionState.sqlParser.parsePlan` (pure: it builds a tree), in a thread whose active
   session is the worker's: without one, the parser falls back to Spark's default conf and
   substitutes `${env:X}`, `${system:X}` with the JVM's environment and properties;
2. the **parsed** plan is checked against allowlists (`sql_allowlist`): query operators only
   (any command, `EXECUTE IMMEDIATE`, `SET VAR`, `INSERT OVERWRITE DIRECTORY`, script or
   `TRANSFORM` is refused here, before the analyzer sees it), functions by name, one-part
   relation names, join hints only, no table-valued functions, no recursive CTEs, and what
   the query asks of the driver (`sql_bounds`: data generated from constants, the plan its
   CTEs expand into, grouping sets). This matters before analysis: the analyzer evaluates
   some constants itself (`VALUES` rows, `IDENTIFIER`, `LIMIT`) and expands CTE chains;
3. the plan is analysed without being executed (`sessionState.executePlan(plan).analyzed`:
   lazy, commands are only run by `commandExecuted`, which is never reached);
4. the **analyzed** plan is checked: every operator and every expression by its resolved
   class, whatever the spelling (`IDENTIFIER('reflect')`, `system.builtin.x`, a bare
   `current_user`, a lambda, a subquery, a CTE), and every leaf relation must be the temp view
   `dataset` (constants and CTE references aside), and no text column is compared with
   a literal that looks like a date (`text_date_guard`: a silent lexicographic answer);
5. the DataFrame is built from that checked plan (`Dataset.ofRows`, which does not analyse an
   analysed plan again): what runs is exactly what was checked.

The structured queries of `spark_workers.query` take the same path, their values bound as
literals by the parser (`parsePlanWithParameters`). `spark.sql.runSQLOnFiles=false` is a
further, independent fence.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

from spark_workers import plan_tree, sql_bounds, text_date_guard
from spark_workers import sql_allowlist as allow
from worker_sdk import HandlerError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_workers.plan_tree import Tree


class QueryRefused(HandlerError):
    """The SQL is not a read-only query over the dataset made of allowed parts."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, details={"reason": "refused", **details})


class QueryTooLarge(HandlerError):
    """The query exceeds a size limit of the worker (refused before Spark sees it)."""

    def __init__(self, what: str, *, limit: str, size: int, maximum: int) -> None:
        super().__init__(
            f"{what}: {size} > {maximum} (SPARK_WORKER_{limit.upper()})",
            details={"reason": "limit", "limit": limit, "size": size, "max": maximum},
        )


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds the guard enforces (from `SparkWorkerSettings`)."""

    #: Longest SQL text (None: not checked, for SQL the worker wrote itself).
    max_sql_chars: int | None = 20_000
    #: Largest product of the sizes of data-generating calls in one query.
    max_generated: int = 10_000
    #: Most nodes of the parsed plan once every CTE reference is replaced by its definition
    #: (the analyzer and optimizer work on that expansion: a chain of CTEs each reading the
    #: previous one twice doubles it at every step).
    max_plan_nodes: int = 10_000


def checked_sql(
    spark: SparkSession,
    sql: str,
    *,
    view: str = "dataset",
    params: dict[str, Any] | None = None,
    limits: Limits | None = None,
) -> DataFrame:
    """The DataFrame of `sql` (named `params` bound as literals), once it is known to be an
    allowed read-only query of `view` (raises `HandlerError`)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException
    from pyspark.sql import DataFrame

    spark_errors = (Py4JJavaError, CapturedException)  # JVM exceptions, raw or as pyspark's

    limits = limits or Limits()
    if not sql.strip():
        raise QueryRefused("empty SQL query")
    if limits.max_sql_chars is not None and len(sql) > limits.max_sql_chars:
        raise QueryTooLarge(
            "SQL text too long",
            limit="max_sql_chars",
            size=len(sql),
            maximum=limits.max_sql_chars,
        )
    if "${" in sql:
        raise QueryRefused("'${' is not allowed in SQL text (no variable substitution)")
    jvm = _handles(spark)
    # The parser reads the conf of the thread's active session: a JVM thread that never had
    # one falls back to defaults, where `${env:X}` is substituted (see `session`).
    jvm.set_active(jvm.session)
    try:
        plan = _parse(jvm, sql, params)
        parsed = plan_tree.loads(plan.toJSON())
    except spark_errors as exc:
        raise HandlerError(f"invalid SQL: {_message(exc)}", details={"reason": "syntax"}) from exc
    try:
        check_parsed(parsed, limits=limits)
    except RecursionError:
        raise QueryRefused("the query is nested too deeply") from None
    try:
        analyzed = jvm.state.executePlan(plan, jvm.execution_mode).analyzed()
        tree = plan_tree.loads(analyzed.toJSON())
    except spark_errors as exc:
        raise HandlerError(
            f"invalid query: {_message(exc)}", details={"reason": "analysis"}
        ) from exc
    try:
        check_analyzed(tree, view=view, limits=limits, hints=lambda name: _hint(spark, view, name))
    except RecursionError:
        raise QueryRefused("the query is nested too deeply") from None
    return DataFrame(jvm.of_rows(jvm.session, analyzed), spark)


def _hint(spark: SparkSession, view: str, column: str) -> str | None:
    """Why the view's text column `column` is text, from its metadata (asked only when a
    query is refused for it)."""
    try:
        fields = {f.name: f for f in spark.table(view).schema.fields}
    except Exception:
        return None
    field = fields.get(column)
    return text_date_guard.hint_of(field.metadata) if field is not None else None


@dataclasses.dataclass(frozen=True)
class _Handles:
    """The JVM objects and static methods the guard calls, looked up once per session.

    Through py4j, every step of a dotted name (`jvm.org.apache.spark...`) and every static
    member of a class is a round trip to the JVM: looked up on each query, they cost it more
    than Spark's own parse (about 20 ms of a varied query, bench/query_bench.py). Objects
    here are the session's own (its state, parser and default execution mode are fixed for
    its life) or the JVM's classes.
    """

    session: Any
    set_active: Any
    state: Any
    parser: Any
    execution_mode: Any
    of_rows: Any
    literal: Any
    types: dict[str, Any]
    parameters: Any
    scala_map: Any


_HANDLES: weakref.WeakKeyDictionary[SparkSession, _Handles] = weakref.WeakKeyDictionary()


def _handles(spark: SparkSession) -> _Handles:
    handles = _HANDLES.get(spark)
    if handles is None:
        jvm: Any = spark._jvm
        session = spark._jsparkSession
        state = session.sessionState()
        sql = jvm.org.apache.spark.sql
        handles = _HANDLES[spark] = _Handles(
            session=session,
            set_active=sql.SparkSession.setActiveSession,
            state=state,
            parser=state.sqlParser(),
            execution_mode=getattr(state, "executePlan$default$2")(),
            of_rows=sql.classic.Dataset.ofRows,
            literal=sql.catalyst.expressions.Literal.create,
            types={name: getattr(sql.types.DataTypes, name) for name in _TYPE_NAMES},
            parameters=sql.catalyst.parser.NamedParameterContext.apply,
            scala_map=jvm.PythonUtils.toScalaMap,
        )
    return handles


def check_parsed(trees: list[Tree], *, limits: Limits | None = None) -> None:
    """Refuse a parsed plan holding anything but allowed operators and functions, or asking
    more than `limits` (see `sql_bounds`)."""
    if not trees:
        raise QueryRefused("empty plan")
    limits = limits or Limits()
    checker = _Parsed(limits)
    try:
        for tree in trees:
            checker.visit(tree)
        size = sum(sql_bounds.expanded_size(tree) for tree in trees)
        sql_bounds.check_plan_size(size, max_plan_nodes=limits.max_plan_nodes)
    except sql_bounds.OutOfBounds as exc:
        raise QueryRefused(str(exc), **exc.details) from None


def check_analyzed(
    trees: list[Tree],
    *,
    view: str = "dataset",
    limits: Limits | None = None,
    hints: text_date_guard.Hints | None = None,
) -> None:
    """Refuse an analyzed plan with a class outside the allowlists, reading anything but the
    temp view `view`, asking more than `limits`, or comparing a text column with a date
    (`text_date_guard`; `hints`: a column's reason to be text)."""
    checker = _Analyzed(limits or Limits(), view)
    try:
        for tree in trees:
            checker.visit(tree)
        text_date_guard.check(trees, hints)
    except sql_bounds.OutOfBounds as exc:
        raise QueryRefused(str(exc), **exc.details) from None
    except text_date_guard.TextDateComparison as exc:
        raise QueryRefused(str(exc), column=exc.column, option=exc.option) from None


class _Checker:
    """A walk over every node of a plan: operators, their expressions, nested subqueries."""

    operators: frozenset[str]
    expressions: frozenset[str]

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def visit(self, tree: Tree) -> None:
        if tree.name in self.operators and tree.cls.startswith(plan_tree.CATALYST):
            self.operator(tree)
            for _key, value in tree.fields():
                for inner in plan_tree.nested(value):
                    self.visit(inner)
            for child in tree.children:
                self.visit(child)
        else:
            self.expression(tree)

    def operator(self, tree: Tree) -> None:
        """Checks of one operator (its expressions and children are visited after)."""

    def expression(self, tree: Tree) -> None:
        if tree.name not in self.expressions or not tree.cls.startswith(plan_tree.CATALYST):
            _refuse_class(tree)
        skip = set()
        if "replacement" in tree.node and tree.name in allow.ALLOWED_EXPRESSIONS:
            # Spark's own rewrite of an allowed function (`nvl` -> `coalesce`...), built from
            # the arguments, which are checked where they are.
            skip.add(tree.node["replacement"])
        for key, value in tree.fields():
            if key != "replacement":
                for inner in plan_tree.nested(value):
                    self.visit(inner)
        for index, child in enumerate(tree.children):
            if index not in skip:
                self.visit(child)


class _Parsed(_Checker):
    operators = allow.PARSED_OPERATORS
    expressions = allow.ALLOWED_EXPRESSIONS | allow.PARSED_EXPRESSIONS

    def __init__(self, limits: Limits) -> None:
        super().__init__(limits)
        self.budget = sql_bounds.Budget(limits.max_generated)

    def operator(self, tree: Tree) -> None:
        node = tree.node
        if tree.name == "UnresolvedRelation":
            parts = plan_tree.name_parts(node.get("multipartIdentifier"))
            if len(parts) != 1:
                raise QueryRefused(
                    f"only the view 'dataset' can be queried, not {'.'.join(parts)!r}"
                )
            if node.get("isStreaming"):
                raise QueryRefused("streaming reads are not allowed")
        elif tree.name == "UnresolvedWith" and node.get("allowRecursion"):
            raise QueryRefused("recursive CTEs are not allowed")
        elif tree.name == "UnresolvedHint":
            name = str(node.get("name", "")).upper()
            if name not in allow.JOIN_HINTS:
                raise QueryRefused(f"hint {name} is not allowed (join hints only)")

    def expression(self, tree: Tree) -> None:
        if tree.name == "UnresolvedFunction":
            parts = plan_tree.name_parts(tree.node.get("nameParts"))
            self.call(parts, tree.field_list("arguments"))
        elif tree.name == "UnresolvedGenerator":
            name = tree.node.get("name") or {}
            keys = ("catalog", "database", "funcName")
            self.call([str(name[k]) for k in keys if name.get(k)], tree.children)
        elif tree.name == "ExpressionWithUnresolvedIdentifier":
            self.identifier(tree)
        elif tree.name in ("Cube", "Rollup", "GroupingSets"):
            self.budget.grouping(tree)
        super().expression(tree)

    def identifier(self, tree: Tree) -> None:
        """`IDENTIFIER('name')` takes a string literal: the name is then known here."""
        target = tree.field("identifierExpr")
        try:
            text = plan_tree.constant(target) if target is not None else None
        except plan_tree.NotConstant:
            text = None
        if not isinstance(text, str):
            raise QueryRefused("IDENTIFIER(...) only takes a string literal")
        parts = plan_tree.split_identifier(text)
        args = tree.field_list("otherExprs")
        if args or (parts and parts[-1].lower() in allow.ALLOWED_FUNCTIONS):
            self.call(parts, args)
        # else a column name: the analyzed plan shows what it resolved to

    def call(self, parts: list[str], args: list[Tree] | tuple[Tree, ...]) -> None:
        qualifier = tuple(p.lower() for p in parts[:-1])
        name = parts[-1].lower() if parts else ""
        if qualifier not in allow.ALLOWED_QUALIFIERS or name not in allow.ALLOWED_FUNCTIONS:
            raise QueryRefused(f"function {'.'.join(parts)!r} is not allowed", function=name)
        self.budget.call(name, args)


class _Analyzed(_Checker):
    operators = allow.ANALYZED_OPERATORS
    expressions = allow.ALLOWED_EXPRESSIONS

    def __init__(self, limits: Limits, view: str) -> None:
        super().__init__(limits)
        self.view = view

    def visit(self, tree: Tree) -> None:
        if tree.name == "View" and tree.cls.startswith(plan_tree.CATALYST):
            identifier = (tree.node.get("desc") or {}).get("identifier") or {}
            name = identifier.get("table")
            if name != self.view or not tree.node.get("isTempView"):
                raise QueryRefused(f"only the view {self.view!r} can be queried, not {name!r}")
            return  # the dataset's own plan: reading it is the point
        if not tree.children and tree.name not in self.operators and _is_plan(tree):
            raise QueryRefused(
                f"only the view {self.view!r} can be queried (the query reads a {tree.name})"
            )
        super().visit(tree)

    def expression(self, tree: Tree) -> None:
        sql_bounds.check_resolved(tree, max_generated=self.limits.max_generated)
        super().expression(tree)


# -- helpers --------------------------------------------------------------------------------


def _parse(jvm: _Handles, sql: str, params: dict[str, Any] | None) -> Any:
    if params is None:
        return jvm.parser.parsePlan(sql)
    values = {name: jvm.literal(value, _type(jvm.types, value)) for name, value in params.items()}
    return jvm.parser.parsePlanWithParameters(sql, jvm.parameters(jvm.scala_map(values)))


#: The Spark types a JSON scalar can be given (`_type`).
_TYPE_NAMES = ("NullType", "BooleanType", "IntegerType", "LongType", "DoubleType", "StringType")


def _type(types: dict[str, Any], value: Any) -> Any:
    """The Spark type of a JSON scalar, as `pyspark.sql.functions.lit` would pick it."""
    if value is None:
        return types["NullType"]
    if isinstance(value, bool):
        return types["BooleanType"]
    if isinstance(value, int):
        return types["IntegerType"] if -(2**31) <= value < 2**31 else types["LongType"]
    if isinstance(value, float):
        return types["DoubleType"]
    if isinstance(value, str):
        return types["StringType"]
    raise HandlerError(f"unsupported value {value!r}", details={"reason": "invalid_query"})


def _refuse_class(tree: Tree) -> None:
    if tree.name in ("UnresolvedTableValuedFunction", "UnresolvedTVFAliases"):
        name = ".".join(plan_tree.name_parts(tree.node.get("name")))
        raise QueryRefused(f"table-valued functions are not allowed ({name})")
    if _is_plan(tree):
        raise QueryRefused(
            f"only SELECT queries are allowed (found {tree.name})", operator=tree.name
        )
    raise QueryRefused(
        f"{tree.name} is not an allowed function or expression", expression=tree.name
    )


def _is_plan(tree: Tree) -> bool:
    """Whether a node of a class outside the allowlists is a plan (else an expression)."""
    return not tree.cls.startswith(plan_tree.CATALYST + "expressions.") and (
        tree.cls.startswith(plan_tree.CATALYST + "plans.")
        or not tree.name.startswith("Unresolved")
        or tree.name.endswith(("Relation", "Function", "Immediate", "With", "Procedure"))
    )


def _message(exc: BaseException) -> str:
    getter = getattr(exc, "getMessage", None) or getattr(
        getattr(exc, "java_exception", None), "getMessage", None
    )
    try:
        text = getter() if callable(getter) else str(exc)
    except Exception:
        text = str(exc)
    return str(text).strip().split("\n== SQL ==")[0].strip()
