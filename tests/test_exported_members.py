"""Each package's public surface is its sorted `__all__`, and every name in it exists."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "drivers",
    "osrdyne",
    "osrdyne.client",
    "osrdyne.controller",
    "osrdyne.ops",
    "osrdyne.wire",
    "spark_workers",
    "worker_sdk",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_sorted_and_complete(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is exported but missing"


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_are_exported(package: str) -> None:
    """Every public class or function a package's `__init__` defines or imports is in
    `__all__` (a name users can reach but the package does not promise is a trap)."""
    module = importlib.import_module(package)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith(package)
    }
    assert public <= set(module.__all__)
