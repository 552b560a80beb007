"""Layers stay layers, checked on the source so a violation fails here before it ships.

    osrdyne.wire        the protocol: imports nothing else of osrdyne, drivers or worker_sdk
    osrdyne.client      wire, exceptions, and the ops instruments (tracing)
    osrdyne.controller  wire, exceptions, the ops instruments (metrics, logs), drivers
    osrdyne.ops         the operator surface: may use every package above
    worker_sdk          osrdyne.wire, and osrdyne.ops.logs: the one log set-up, so a worker's
                        lines read like its controller's (JSON with `log.json`) on a shared
                        stream; it imports nothing else of osrdyne
    drivers             osrdyne.wire only; never each other (but `base`, `names`), except
                        `registry`, the one module that knows every driver

A package's `_`-modules are its own: no other package imports them (tests may).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("osrdyne", "drivers", "worker_sdk", "spark_workers")


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(package: str) -> Iterator[tuple[str, set[str]]]:
    for path in sorted((REPO / package).rglob("*.py")):
        yield module_of(path), imports_of(path)


def ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


#: What each layer may import of ours (prefixes), besides itself.
ALLOWED = {
    "osrdyne.wire": (),
    "osrdyne.client": ("osrdyne.wire", "osrdyne.exceptions", "osrdyne.ops.tracing"),
    "osrdyne.controller": (
        "osrdyne.wire",
        "osrdyne.exceptions",
        "osrdyne.ops.metrics",
        "osrdyne.ops.logs",
        "drivers",
    ),
    "osrdyne.exceptions": ("osrdyne.client",),  # for type annotations only
    "osrdyne.ops.metrics": (),
    "osrdyne.ops.logs": (),
    "osrdyne.ops.tracing": (),
    "worker_sdk": ("osrdyne.wire", "osrdyne.ops.logs"),
}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_what_is_below_it(layer: str) -> None:
    top = layer.split(".")[0]
    for module, names in sources(top):
        if not (module == layer or module.startswith(layer + ".")):
            continue
        for name in filter(ours, names):
            if name == layer or name.startswith(layer + ".") or name in ("osrdyne", layer):
                continue
            allowed = ALLOWED[layer]
            assert any(name == a or name.startswith(a + ".") for a in allowed), (
                f"{module} imports {name}"
            )


def test_drivers_do_not_import_each_other() -> None:
    shared = {"drivers", "drivers.base", "drivers.names"}
    for module, names in sources("drivers"):
        if module == "drivers.registry":
            continue
        for name in names:
            if name.split(".")[0] == "osrdyne":
                assert name.startswith("osrdyne.wire"), f"{module} imports {name}"
            if name.split(".")[0] == "drivers":
                imported = ".".join(name.split(".")[:2])
                assert imported in shared or imported == module, f"{module} imports {name}"


def test_private_modules_stay_in_their_package() -> None:
    for package in PACKAGES:
        for module, names in sources(package):
            for name in filter(ours, names):
                parts = name.split(".")
                private = next((i for i, p in enumerate(parts) if p.startswith("_")), None)
                if private is None or parts[private].startswith("__"):
                    continue
                owner = ".".join(parts[:private])
                assert module == owner or module.startswith(owner + "."), (
                    f"{module} imports {name}, private to {owner}"
                )
