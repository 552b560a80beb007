"""Layers stay layers: the worker SDK never imports the controller, drivers never import each
other, and only the wiring (`osrdyne.driver_factory`, settings) picks drivers by name.
Checked on the source, so a violation fails here before it ships."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_worker_sdk_only_takes_the_protocol_from_osrdyne() -> None:
    for path in (REPO / "worker_sdk").rglob("*.py"):
        for name in imports_of(path):
            if name.split(".")[0] == "osrdyne":
                assert name.startswith("osrdyne.protocol"), f"{path}: imports {name}"


def test_drivers_do_not_import_each_other_nor_the_controller() -> None:
    shared = {"drivers", "drivers.base", "drivers.names"}
    for path in (REPO / "drivers").glob("*.py"):
        me = f"drivers.{path.stem}"
        for name in imports_of(path):
            top = name.split(".")[0]
            if top == "osrdyne":
                assert name.startswith("osrdyne.protocol"), f"{path}: imports {name}"
            if top == "drivers":
                module = ".".join(name.split(".")[:2])
                assert module in shared or module == me, f"{path}: imports {name}"
