"""A keyed Spark worker whose own loader raises (docs/spark.md's example, a key whose path does
not exist) answers each request with the loader's error, without a crash loop, and serves the
key once its data is there, without an operator. A real controller, the real worker process,
real Spark (one JVM, in the worker)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from osrdyne import Client, Status
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(240)


def loader_driver(tmp_path: Path, root: Path) -> dict[str, Any]:
    return {
        "kind": "subprocess",
        "subprocess": {
            "command": [sys.executable, "-m", "tests.spark.loader_worker"],
            "env": {
                "LOADER_ROOT": str(root),
                "WORKER_ACTIVITY_INTERVAL": "1",
                "WORKER_DRAIN_TIMEOUT": "5",
                "SPARK_WORKER_MASTER": "local[1]",
                "SPARK_WORKER_DRIVER_MEMORY": "512m",
                "SPARK_WORKER_RELOAD_INTERVAL": "0.5",
                "SPARK_LOCAL_IP": "127.0.0.1",
            },
            "owner": str(tmp_path / "workers"),
            "stop_timeout": 10,
            "restart_backoff": 0.5,
        },
    }


async def test_a_loader_that_raises_is_answered_per_request_then_the_key_is_served(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    root.mkdir()
    running = await make_controller(
        pool,
        groups={"failing_after": 2, "failing_window": 60},
        driver=loader_driver(tmp_path, root),
    )

    first = await client.call(pool, "trips", timeout=180)
    assert first.status == Status.WORKER_ERROR, first.body[:500]
    error = first.json()
    assert error["details"]["reason"] == "dataset"
    assert "PATH_NOT_FOUND" in error["error"] or "does not exist" in error["error"], error
    assert str(root / "trips") in error["error"]

    # The same worker answers later callers: it did not exit, nothing was restarted.
    later = await client.call(pool, "trips", timeout=60)
    assert later.status == Status.WORKER_ERROR
    assert later.json()["worker_id"] == error["worker_id"]
    (worker,) = running.controller.driver.describe()["trips"]
    assert worker.restarts == 0
    assert running.controller.status().groups["trips"].failing_reason is None

    # The data arrives: a request after the reload interval loads it and is answered.
    (root / "trips").mkdir()
    pq.write_table(pa.table({"n": [1, 2, 3]}), root / "trips" / "part-0.parquet")

    async def served() -> Any:
        answer = await client.call(pool, "trips", timeout=120)
        return answer if answer.ok else None

    answer = await eventually(served, timeout=120, interval=0.5, what="the key served")
    assert answer.json() == {"rows": 3}
    assert running.controller.driver.describe()["trips"][0].restarts == 0
