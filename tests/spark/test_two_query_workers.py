"""One dataset key served by two real query worker processes (its group sized to two by the
controller's scaler, `min_workers = 2`), started by a controller with the subprocess driver:
queries sent at once are spread over both, and every answer equals the one Spark computes
directly from the dataset."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from drivers.subprocess import SubprocessDriver
from osrdyne import Client, wire
from tests import broker
from tests.waiting import eventually

#: One Spark start (the in-process session and the datasets, or a worker's JVM with its
#: dataset): 100 s was seen on the loaded 2-core CI machine.
SPARK_START = 180
#: A query on a loaded worker, and the reports that tell who answered (1 s apart).
QUERY = 60
REPORTS = 30
#: The test's steps and their bounds; its own bound is their sum, not less.
STEPS = {
    "the in-process session and datasets": SPARK_START,
    "the direct computation": QUERY,
    "the controller's leadership": 30,
    "the first worker's Spark start and first answer": SPARK_START,
    "the scaler sizing the group to two": REPORTS,
    "the second worker's Spark start": SPARK_START,
    "the queries, sent at once": QUERY,
    "the workers' reports": REPORTS,
    "the controller stopping its workers (and their 10 s stop timeout)": 30 + 10,
}
pytestmark = pytest.mark.timeout(sum(STEPS.values()))

KEY = "trips"
SQL = (
    "SELECT city, payment, count(*) AS n, sum(passengers) AS passengers, "
    "max(trip_id) AS top_trip FROM dataset GROUP BY city, payment ORDER BY city, payment"
)
#: Queries sent at once once both workers consume: RabbitMQ hands them out in turn.
QUERIES = 8
#: Each worker's driver heap: two JVMs and the tests' own beside them.
HEAP = "512m"


async def test_one_key_served_by_two_query_workers_answers_the_same(
    pool: str,
    run_query_workers: Callable[..., Awaitable[Any]],
    client: Client,
    spark: Any,
    datasets: Path,
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    trips = spark.read.parquet(str(datasets / KEY))
    direct = [
        row.asDict()
        for row in trips.groupBy("city", "payment")
        .agg(
            F.count("*").alias("n"),
            F.sum("passengers").alias("passengers"),
            F.max("trip_id").alias("top_trip"),
        )
        .orderBy("city", "payment")
        .collect()
    ]

    running = await run_query_workers(memory=HEAP, scaling={"min_workers": 2, "max_workers": 2})
    driver = running.controller.driver
    assert isinstance(driver, SubprocessDriver)
    # The workers' reports, heard beside the controller: who handled how many requests.
    async with broker.activity_reports(pool) as reports:
        first = await client.call(pool, KEY, {"sql": SQL}, timeout=SPARK_START)
        assert first.status == "ok", first.body[:500]
        assert first.json()["rows"] == direct

        async def both_consuming() -> bool:
            return await reports.consumers(KEY) == 2

        await eventually(
            lambda: driver.sizes().get(KEY) == 2, timeout=REPORTS, what="a group of two"
        )
        await eventually(both_consuming, timeout=SPARK_START, what="both workers consuming")
        answers = await asyncio.gather(
            *(client.call(pool, KEY, {"sql": SQL}, timeout=QUERY) for _ in range(QUERIES))
        )
        for answer in answers:
            assert answer.status == "ok", answer.body[:500]
            assert answer.json()["rows"] == direct

        workers = {info.worker_id for info in driver.describe()[KEY]}
        assert len(workers) == 2
        handled: dict[str, int] = {}

        async def both_answered() -> bool:
            for headers in await reports.read():
                worker = wire.text(headers.get(wire.Header.WORKER_ID))
                count = headers.get(wire.Header.HANDLED)
                if worker in workers and isinstance(count, int):
                    handled[worker] = max(count, handled.get(worker, 0))
            # Each request handled once, the first included, by one worker or the other.
            return min(handled.values(), default=0) >= 1 and sum(handled.values()) == QUERIES + 1

        await eventually(both_answered, timeout=REPORTS, what=f"reports of {sorted(workers)}")
        assert len(handled) == 2
