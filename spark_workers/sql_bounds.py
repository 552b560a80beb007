"""How much a query may ask of the driver before anything runs: the data it generates from
constants, the plan its CTEs expand into, its grouping sets.

Constant folding and the analyzer run in the driver and cannot be cancelled, so these are
decided on the plan, by `sql_guard`:

- data-generating functions (`sequence`, `repeat`, `lpad`, `array_repeat`, `stack`... see
  `sql_allowlist.SIZE_ARGUMENTS`) take a number constant as their size; the sizes of all
  such calls in a query multiply (a lambda or a nested call applies one per element of the
  other) and the product is at most `max_generated`. The analyzed plan is checked call by
  call as well, by class, whatever the spelling;
- `approx_count_distinct(x, rsd)` takes `rsd >= 0.01`;
- the parsed plan, every CTE reference counted as its definition, holds at most
  `max_plan_nodes` nodes (a chain of CTEs each read twice by the next doubles at each step);
- CUBE/ROLLUP/GROUPING SETS multiply to at most `MAX_GROUPING_SETS` sets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from spark_workers import plan_tree
from spark_workers import sql_allowlist as allow
from spark_workers.plan_tree import Tree

#: Functions whose arguments `Budget.call` bounds.
SIZED_FUNCTIONS = frozenset({*allow.SIZE_ARGUMENTS, "sequence", "approx_count_distinct"})

#: The value of a constant argument (raises `plan_tree.NotConstant` for anything else).
Constant = Callable[[Any], Any]


def _named_argument(arg: Any) -> bool:
    return bool(arg.name == "NamedArgumentExpression")


class OutOfBounds(Exception):
    """The query asks too much (`sql_guard` refuses it)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


def check_plan_size(size: int, *, max_plan_nodes: int) -> None:
    """Refuse a query whose plan would hold more than `max_plan_nodes` nodes once its CTEs
    are expanded (`size`: `expanded_size`, or the text guard's count of the same)."""
    if size > max_plan_nodes:
        raise OutOfBounds(
            f"the query's plan would hold {size} nodes once its CTEs are expanded (at most "
            f"{max_plan_nodes}, SPARK_WORKER_MAX_PLAN_NODES)",
            limit="max_plan_nodes",
        )


class Budget:
    """What one parsed query generates, call by call."""

    def __init__(self, max_generated: int) -> None:
        self.max_generated = max_generated
        self.generated: list[tuple[str, int]] = []
        self.grouping_sets = 1

    def call(
        self,
        name: str,
        args: Sequence[Any],
        *,
        constant: Constant = plan_tree.constant,
        named: Callable[[Any], bool] = _named_argument,
    ) -> None:
        """Account for a call of the allowed function `name`. The arguments are trees of a
        Spark plan by default; the Connect guard passes sqlglot nodes with its own `constant`
        (a value, or `plan_tree.NotConstant`) and `named` (a `name => value` argument)."""
        if name not in SIZED_FUNCTIONS:
            return
        if any(named(arg) for arg in args):
            raise OutOfBounds(f"{name} takes positional arguments only")
        if name == "sequence":
            self._generates(name, sequence_length(args, constant=constant))
        elif name == "approx_count_distinct":
            if len(args) > 1:
                check_relative_sd(_number(name, args[1], constant=constant))
        else:
            position = allow.SIZE_ARGUMENTS[name]
            argument = args[position] if position < len(args) else None
            size = size_of(name, argument, constant=constant)
            if size is not None:
                self._generates(name, size)

    def grouping(self, tree: Tree) -> None:
        """The grouping sets of a parsed plan's `Cube`, `Rollup` or `GroupingSets`."""
        indexes = tree.node.get("groupingSetIndexes")
        groups = len(indexes) if isinstance(indexes, list) else len(tree.children)
        self.add_grouping_sets(tree.name, groups)

    def add_grouping_sets(self, kind: str, groups: int) -> None:
        """CUBE of g groups is 2^g grouping sets, ROLLUP g + 1: the analyzer builds them all."""
        sets = {"Cube": 2 ** min(groups, 64), "Rollup": groups + 1}.get(kind, groups + 1)
        self.grouping_sets *= sets
        if self.grouping_sets > allow.MAX_GROUPING_SETS:
            raise OutOfBounds(
                f"too many grouping sets ({self.grouping_sets} > {allow.MAX_GROUPING_SETS})"
            )

    def _generates(self, name: str, size: int) -> None:
        self.generated.append((name, size))
        total = math.prod(s for _, s in self.generated)
        if total > self.max_generated:
            names = " and ".join(repr(n) for n in sorted({n for n, _ in self.generated}))
            raise OutOfBounds(
                f"{names} would generate {total} elements or characters in this query (at "
                f"most {self.max_generated}, SPARK_WORKER_MAX_GENERATED)",
                limit="max_generated",
            )


def check_resolved(tree: Tree, *, max_generated: int) -> None:
    """The bound of one resolved call of the analyzed plan, by class."""
    size: int | None
    if tree.name == "HyperLogLogPlusPlus":
        check_relative_sd(float(tree.node.get("relativeSD", 0.05)))
        return
    if tree.name == "Sequence":
        step = tree.field("stepOpt")
        bounds = [tree.field("start"), tree.field("stop")] + ([step] if step else [])
        size = sequence_length([b for b in bounds if b is not None])
    elif tree.name == "Stack":
        children = tree.field_list("children")
        size = size_of(tree.name, children[0] if children else None)
    elif tree.name in allow.SIZE_FIELDS:
        size = size_of(tree.name, tree.field(allow.SIZE_FIELDS[tree.name]))
    else:
        return
    if size is not None and size > max_generated:
        raise OutOfBounds(
            f"{tree.name} would generate {size} elements or characters (at most "
            f"{max_generated}, SPARK_WORKER_MAX_GENERATED)",
            limit="max_generated",
        )


def expanded_size(tree: Tree, ctes: dict[str, int] | None = None) -> int:
    """Nodes of a parsed plan, each reference to a CTE counted as its definition's size (a
    name defined twice counts as its largest definition: an over-estimate is fine)."""
    ctes = ctes or {}
    if tree.name == "UnresolvedRelation":
        parts = plan_tree.name_parts(tree.node.get("multipartIdentifier"))
        return ctes.get(parts[0].lower(), 1) if len(parts) == 1 else 1
    total, scope = 1, ctes
    with_ctes = tree.name == "UnresolvedWith"
    if with_ctes:
        scope = dict(ctes)
        for relation in tree.node.get("cteRelations") or []:
            name = str(relation.get("_1", "")).lower() if isinstance(relation, dict) else ""
            size = sum(expanded_size(d, scope) for d in plan_tree.nested(relation))
            scope[name] = max(size, scope.get(name, 0))
            total += size
    for key, value in tree.fields():
        if not (with_ctes and key == "cteRelations"):
            total += sum(expanded_size(inner, scope) for inner in plan_tree.nested(value))
    return total + sum(expanded_size(child, scope) for child in tree.children)


def size_of(
    name: str, argument: Any | None, *, constant: Constant = plan_tree.constant
) -> int | None:
    """The size a data-generating call asks for (None: a format pattern, not a size)."""
    if argument is None:
        return None
    text_allowed = name in ("format_number", "FormatNumber")
    value = _number(name, argument, text_allowed=text_allowed, constant=constant)
    return None if value is None else abs(int(value))


def sequence_length(args: Sequence[Any], *, constant: Constant = plan_tree.constant) -> int:
    values = []
    for arg in args[:3]:
        try:
            values.append(constant(arg))
        except plan_tree.NotConstant:
            values.append(None)
    if len(values) < 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise OutOfBounds("sequence(...) takes integer constants only")
    start, stop = values[0], values[1]
    step = values[2] if len(values) > 2 else (1 if stop >= start else -1)
    return 1 if step == 0 else max(1, (stop - start) // step + 1)


def check_relative_sd(value: float | None) -> None:
    if value is None or value < allow.MIN_RELATIVE_SD:
        raise OutOfBounds(
            f"approx_count_distinct: the relative error must be at least {allow.MIN_RELATIVE_SD}"
        )


def _number(
    name: str,
    argument: Any,
    *,
    text_allowed: bool = False,
    constant: Constant = plan_tree.constant,
) -> float | None:
    try:
        value = constant(argument)
    except plan_tree.NotConstant:
        value = None
    if isinstance(value, str) and text_allowed:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise OutOfBounds(f"the size argument of {name} must be a number constant")
    return value
