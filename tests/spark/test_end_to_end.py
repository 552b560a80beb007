"""The real query worker process, started by an osrdyne controller with the subprocess
driver, answers clients through RabbitMQ: queries, errors, an unknown key, a traversal key.

One Spark worker process in all (the unknown and invalid keys are refused before Spark
starts, so their workers are cheap).
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import pytest

from osrdyne import Client
from tests.spark.conftest import TRIPS_ROWS

pytestmark = pytest.mark.timeout(240)


async def test_query_worker_through_osrdyne(
    pool: str, run_query_workers: Callable[..., Awaitable[Any]], client: Client
) -> None:
    await run_query_workers()

    # Cold: the controller starts a worker, which starts Spark and loads the dataset.
    first = await client.call(
        pool,
        "trips",
        {"group_by": ["city"], "aggregates": [{"fn": "count", "as": "n"}]},
        timeout=180,
    )
    assert first.status == "ok", first.body[:500]
    assert sum(r["n"] for r in first.json()["rows"]) == TRIPS_ROWS

    schema = await client.call(pool, "trips", path="schema", timeout=60)
    assert schema.status == "ok" and schema.json()["rows"] == TRIPS_ROWS

    sql = "SELECT payment, count(*) AS n FROM dataset GROUP BY payment ORDER BY payment"
    arrow = await client.call(pool, "trips", {"sql": sql, "format": "arrow"}, timeout=60)
    assert arrow.status == "ok"
    table = pa.ipc.open_stream(io.BytesIO(arrow.body)).read_all()
    assert sum(table.column("n").to_pylist()) == TRIPS_ROWS

    refused = await client.call(pool, "trips", {"sql": "DROP VIEW dataset"}, timeout=60)
    assert refused.status == "worker_error"
    assert "only SELECT queries are allowed" in refused.json()["error"]
    bad = await client.call(pool, "trips", b"{oops", timeout=60)
    assert bad.status == "worker_error" and "invalid query document" in bad.json()["error"]

    # Keys that name no dataset: the worker starts, and answers with the reason.
    unknown = await client.call(pool, "nope", {}, timeout=120)
    assert unknown.status == "worker_error"
    assert "unknown dataset 'nope'" in unknown.json()["error"]
    again = await client.call(pool, "nope", {}, path="schema", timeout=60)
    assert again.status == "worker_error"
    traversal = await client.call(pool, "../etc", {}, timeout=120)
    assert traversal.status == "worker_error"
    assert "invalid dataset key" in traversal.json()["error"]


async def test_a_standby_query_worker_holds_spark_and_loads_a_new_key(
    pool: str, run_query_workers: Callable[..., Awaitable[Any]], client: Client
) -> None:
    """With `standby = 1` the query worker starts Spark before it has a key; a new key's
    first request is answered by that very process, which only loaded its dataset."""
    from drivers.subprocess import SubprocessDriver
    from osrdyne import PoolNames
    from tests import broker
    from tests.waiting import eventually

    running = await run_query_workers(standby=1)
    driver = running.controller.driver
    assert isinstance(driver, SubprocessDriver)
    names = PoolNames(pool)

    async def waiting() -> int | None:  # its standby queue exists once Spark has started
        (worker,) = driver.standby_workers() or (None,)
        if worker is None or worker.pid is None:
            return None
        async with broker.management() as http:
            queue = names.standby_queue(worker.worker_id).replace("/", "%2F")
            response = await http.get(f"/queues/{broker._vhost()}/{queue}")
        return worker.pid if response.status_code == 200 else None

    pid = await eventually(waiting, timeout=180, what="a standby worker with Spark started")
    schema = await client.call(pool, "trips", path="schema", timeout=120)
    assert schema.status == "ok" and schema.json()["rows"] == TRIPS_ROWS
    assert [w.pid for w in driver.describe()["trips"]] == [pid]
