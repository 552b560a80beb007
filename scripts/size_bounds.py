#!/usr/bin/env python3
"""The size bounds of the packages (scripts/check.sh runs it): no module over 500 lines and no
class over 300 in osrdyne, drivers, worker_sdk and spark_workers. A module or a class that
grows past them has taken on a second job: split it by job, not into halves."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("osrdyne", "drivers", "worker_sdk", "spark_workers")
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300


def oversized(root: Path) -> list[str]:
    """One line per module or class of the packages under `root` that is over its bound."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            where = path.relative_to(root)
            lines = source.count("\n")
            if lines > MAX_MODULE_LINES:
                found.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(source, filename=str(path))):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    size = node.end_lineno - node.lineno + 1
                    if size > MAX_CLASS_LINES:
                        found.append(
                            f"{where}:{node.lineno}: class {node.name}: {size} lines"
                            f" (at most {MAX_CLASS_LINES})"
                        )
    return found


def main() -> int:
    found = oversized(Path(__file__).resolve().parents[1])
    for line in found:
        print(f"size_bounds: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
