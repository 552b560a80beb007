"""Spark plans as Python trees: what the SQL guard reads.

`TreeNode.toJSON` renders a plan as a pre-order list of nodes, each with its class and
"num-children". A field holding one of the node's children is rendered as the child's index.
A field holding a tree that is not a child (a subquery's plan, a `Generate`'s generator, the
rows of a `VALUES`) is rendered as a nested list of the same form. One JVM call then lets the
whole plan be checked in Python, expressions and subqueries included.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

#: Every class of a plan the guard can allow lives under this package.
CATALYST = "org.apache.spark.sql.catalyst."


class NotConstant(Exception):
    """The expression is not a plain constant (a literal, a negated or cast literal)."""


@dataclasses.dataclass(frozen=True)
class Tree:
    """One node of a plan and its children (expressions or plans alike)."""

    node: dict[str, Any]
    children: tuple[Tree, ...]

    @property
    def cls(self) -> str:
        """The fully qualified class name."""
        return str(self.node["class"])

    @property
    def name(self) -> str:
        """The simple class name; an anonymous subclass (`IsUnknown$$anon$1`) is named after
        the class it was written in (`IsUnknown`)."""
        return self.cls.rsplit(".", 1)[-1].split("$$anon$", 1)[0]

    def fields(self) -> Iterator[tuple[str, Any]]:
        """The node's own fields (not its class nor child count)."""
        for key, value in self.node.items():
            if key not in ("class", "num-children"):
                yield key, value

    def field(self, key: str) -> Tree | None:
        """The tree a field holds, whether it refers to a child or nests its own tree."""
        value = self.node.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return self.children[value] if 0 <= value < len(self.children) else None
        found = list(nested(value))
        return found[0] if found else None

    def field_list(self, key: str) -> list[Tree]:
        """The trees of a field holding a list of children (`children`, `arguments`...)."""
        value = self.node.get(key)
        if isinstance(value, list) and all(isinstance(i, int) for i in value):
            return [self.children[i] for i in value if 0 <= i < len(self.children)]
        return list(nested(value))


def loads(text: str) -> list[Tree]:
    """The trees of a plan's JSON rendering."""
    return trees(json.loads(text))


def trees(flat: list[dict[str, Any]]) -> list[Tree]:
    """The trees of a pre-order node list (usually one)."""
    out, i = [], 0
    while i < len(flat):
        tree, i = _build(flat, i)
        out.append(tree)
    return out


def _build(flat: list[dict[str, Any]], i: int) -> tuple[Tree, int]:
    node, children, j = flat[i], [], i + 1
    for _ in range(int(node.get("num-children", 0))):
        if j >= len(flat):
            raise ValueError("truncated plan")
        child, j = _build(flat, j)
        children.append(child)
    return Tree(node, tuple(children)), j


def nested(value: Any) -> Iterator[Tree]:
    """The trees held in a field's value (a nested node list, or lists/objects of them)."""
    if isinstance(value, list) and value:
        if isinstance(value[0], dict) and "num-children" in value[0]:
            yield from trees(value)
        else:
            for item in value:
                yield from nested(item)
    elif isinstance(value, dict) and "num-children" not in value:
        for item in value.values():
            yield from nested(item)


def constant(tree: Tree) -> Any:
    """The value of a literal, `-literal` or `CAST(literal AS ...)`, else `NotConstant`."""
    if tree.name == "Literal":
        return _literal_value(tree.node)
    if tree.name == "UnaryMinus" and len(tree.children) == 1:
        value = constant(tree.children[0])
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value
        raise NotConstant
    if tree.name == "Cast" and len(tree.children) == 1:
        value = constant(tree.children[0])
        target = str(tree.node.get("dataType", ""))
        try:
            if target in ("integer", "long", "short", "byte"):
                return int(str(value).strip())
            if target in ("double", "float") or target.startswith("decimal"):
                return float(str(value).strip())
        except ValueError:
            raise NotConstant from None
        return value
    raise NotConstant


def _literal_value(node: dict[str, Any]) -> Any:
    value, kind = node.get("value"), str(node.get("dataType", ""))
    if value is None:
        return None
    try:
        if kind in ("integer", "long", "short", "byte"):
            return int(value)
        if kind in ("double", "float") or kind.startswith("decimal"):
            return float(value)
    except (TypeError, ValueError):
        raise NotConstant from None
    return value


def name_parts(value: Any) -> list[str]:
    """A Scala Seq of names rendered as "[a, b]" (or a JSON list) as a list of names."""
    if isinstance(value, list):
        return [str(v) for v in value]
    text = str(value or "").strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [part.strip() for part in text.split(",")] if text else []


def split_identifier(text: str) -> list[str]:
    """`a.b`, `` `a.b`.c `` as name parts (what `IDENTIFIER('...')` names)."""
    parts, current, quoted, i = [], "", False, 0
    while i < len(text):
        char = text[i]
        if char == "`":
            if quoted and text[i + 1 : i + 2] == "`":
                current, i = current + "`", i + 2
                continue
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += char
        i += 1
    parts.append(current.strip())
    return parts
