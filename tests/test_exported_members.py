"""Each package's public surface is its sorted `__all__`, and every name in it exists."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["osrdyne", "worker_sdk", "drivers", "spark_workers"])
def test_all_is_sorted_and_complete(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is exported but missing"
