"""Fixtures of the security tests: the Spark ones of `tests/spark` (one session, built the way
a worker builds it with credentials in its environment, and its datasets), shared with that
folder rather than built twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.conftest import (  # noqa: F401 - fixtures, found by pytest through this module
    PYSPARK_WARNINGS,
    dataset_root,
    datasets,
    make_app,
    run_query_workers,
    spark,
)

SECURITY_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SECURITY_DIR in Path(str(item.path)).parents:
            for spec in PYSPARK_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))
