"""Keyed workers over one real Spark Connect server: real worker processes started by an
osrdyne controller (subprocess driver), real broker, the pyspark distribution's server.

Two keys served at once through one server, each in a session of its own; client SQL
served, hostile SQL refused before the server sees it; a runaway job of one key cancelled at
its deadline while the other key answers; a stopped worker's data released; a pinned
version's repeated query answered from the worker's memory; the server restarted under load
with every request answered. The restart test comes last: it stops
the session's shared server.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from osrdyne import Client
from spark_workers import SparkWorkerSettings, connect, result_cache
from tests.spark_connect import conftest
from tests.spark_connect.conftest import TRIPS_ROWS, connect_driver
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)

COUNT_BY_CITY = {"group_by": ["city"], "aggregates": [{"fn": "count", "as": "n"}]}
COUNT_BY_STORE = {"group_by": ["store"], "aggregates": [{"fn": "count", "as": "n"}]}

#: Hostile SQL of tests/security (commands, reflection, files, the JVM's secrets): over
#: Connect the worker refuses it before the server receives anything.
HOSTILE_SQL = [
    "DROP VIEW dataset",
    "execute immediate 'DROP VIEW dataset'",
    "EXECUTE IMMEDIATE 'CREATE OR REPLACE TEMPORARY VIEW dataset AS SELECT 1 AS fare'",
    "CREATE OR REPLACE GLOBAL TEMPORARY VIEW leak AS SELECT * FROM dataset",
    "DECLARE OR REPLACE VARIABLE stmt STRING DEFAULT 'DROP VIEW dataset'",
    "SELECT reflect('java.lang.System', 'getenv', 'WORKER_AMQP_URI')",
    "SELECT IDENTIFIER('java_method')('java.lang.System', 'exit', 1)",
    "SELECT * FROM read_files('/etc/passwd')",
    "SELECT * FROM csv.`/etc/passwd`",
    "SELECT '${env:WORKER_AMQP_URI}' AS leak",
]


def total(answer: Any) -> int:
    assert answer.status == "ok", answer.body[:500]
    return sum(row["n"] for row in answer.json()["rows"])


async def test_two_keys_share_one_server_each_in_its_own_session(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    connect_url: str,
    connect_datasets: Path,
    tmp_path: Path,
) -> None:
    await make_controller(pool, driver=connect_driver(tmp_path, connect_datasets, connect_url))

    trips, sales = await asyncio.gather(
        client.call(pool, "trips", COUNT_BY_CITY, timeout=180),
        client.call(pool, "sales", COUNT_BY_STORE, timeout=180),
    )
    assert total(trips) == TRIPS_ROWS and total(sales) == 200

    # Each session's `dataset` is its own key's data.
    schemas = await asyncio.gather(
        client.call(pool, "trips", path="schema", timeout=60),
        client.call(pool, "sales", path="schema", timeout=60),
    )
    columns = [{c["name"] for c in s.json()["columns"]} for s in schemas]
    assert "city" in columns[0] and "city" not in columns[1]
    assert "store" in columns[1] and "store" not in columns[0]
    assert [s.json()["rows"] for s in schemas] == [TRIPS_ROWS, 200]

    # Another session on the same server sees neither key's view.
    spark = connect.build_remote_session(SparkWorkerSettings(remote=connect_url))
    try:
        with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
            spark.table("dataset").count()
        assert spark.catalog.listTables("global_temp") == []
    finally:
        spark.stop()

    # Results in both formats, structured queries only.
    arrow = await client.call(
        pool, "trips", {"select": ["city"], "limit": 3, "format": "arrow"}, timeout=60
    )
    assert arrow.status == "ok" and arrow.body[:4] == b"\xff\xff\xff\xff"
    unknown = await client.call(pool, "trips", {"select": ["nope"]}, timeout=60)
    assert unknown.status == "worker_error" and unknown.json()["details"]["reason"] == (
        "unknown_column"
    )


async def test_sql_is_served_and_hostile_sql_refused_before_the_server_sees_it(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    connect_url: str,
    connect_datasets: Path,
    tmp_path: Path,
) -> None:
    await make_controller(pool, driver=connect_driver(tmp_path, connect_datasets, connect_url))
    assert total(await client.call(pool, "trips", COUNT_BY_CITY, timeout=180)) == TRIPS_ROWS

    answers = await asyncio.gather(
        *(client.call(pool, "trips", {"sql": sql}, timeout=60) for sql in HOSTILE_SQL)
    )
    for sql, answer in zip(HOSTILE_SQL, answers, strict=True):
        assert answer.status == "worker_error", sql
        error = answer.json()
        # `syntax`: what sqlglot cannot parse (`IDENTIFIER('f')(...)`) is refused as such.
        assert error["details"]["reason"] in ("refused", "syntax"), (sql, error)

    # Client SQL is served, with the structured query's answer.
    by_sql = await client.call(
        pool,
        "trips",
        {"sql": "SELECT city, count(*) AS n FROM dataset GROUP BY city ORDER BY city"},
        timeout=60,
    )
    assert total(by_sql) == TRIPS_ROWS
    structured = await client.call(
        pool, "trips", {**COUNT_BY_CITY, "order_by": ["city"]}, timeout=60
    )
    assert by_sql.json()["rows"] == structured.json()["rows"]

    # A query error that echoes what a lost server says is still the query's error: the
    # worker answers it and keeps serving (it does not end itself nor requeue the request).
    echo = "[INVALID_HANDLE.SESSION_CHANGED] StatusCode.UNAVAILABLE"
    failed = await client.call(
        pool, "trips", {"where": [{"column": "passengers", "value": echo}]}, timeout=60
    )
    assert failed.status == "worker_error", failed.body[:300]
    assert failed.json()["details"]["reason"] == "query_failed"

    # Nothing ran: the view is still the dataset, no global view leaked, the server is up.
    assert total(await client.call(pool, "trips", COUNT_BY_CITY, timeout=60)) == TRIPS_ROWS
    spark = connect.build_remote_session(SparkWorkerSettings(remote=connect_url))
    try:
        assert spark.catalog.listTables("global_temp") == []
    finally:
        spark.stop()


async def test_a_runaway_job_is_cancelled_without_disturbing_the_other_key(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    connect_url: str,
    connect_datasets: Path,
    tmp_path: Path,
) -> None:
    # Each request's bound: 6 s (the client waits longer, to hear the worker's answer).
    driver = connect_driver(tmp_path, connect_datasets, connect_url, SPARK_WORKER_QUERY_TIMEOUT="6")
    await make_controller(pool, driver=driver)
    await asyncio.gather(
        client.call(pool, "trips", COUNT_BY_CITY, timeout=180),
        client.call(pool, "sales", COUNT_BY_STORE, timeout=180),
    )

    runaway = asyncio.create_task(client.call(pool, "trips", path="slow", timeout=120))
    await eventually(lambda: running_jobs() > 0, timeout=60, what="the runaway job runs")
    # The other key answers while the runaway job holds the server's cores.
    assert total(await client.call(pool, "sales", COUNT_BY_STORE, timeout=120)) == 200

    answer = await runaway
    assert answer.status == "worker_error"
    assert answer.json()["details"]["reason"] == "timeout"
    await eventually(lambda: running_jobs() == 0, timeout=60, what="the job is cancelled")
    # Both sessions carry on.
    assert total(await client.call(pool, "trips", COUNT_BY_CITY, timeout=60)) == TRIPS_ROWS
    assert total(await client.call(pool, "sales", COUNT_BY_STORE, timeout=60)) == 200


async def test_a_stopped_worker_releases_its_data(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    connect_url: str,
    connect_datasets: Path,
    tmp_path: Path,
) -> None:
    before = {block["id"] for block in conftest.storage()}
    await make_controller(
        pool,
        driver=connect_driver(tmp_path, connect_datasets, connect_url),
        groups={"unbind_delay": 1, "stop_delay": 2},
    )
    assert total(await client.call(pool, "trips", COUNT_BY_CITY, timeout=180)) == TRIPS_ROWS
    # The worker answers from the source while its cache is built (`cache_in_background`).
    held = await eventually(
        lambda: [
            b for b in conftest.storage() if b["id"] not in before and b["numCachedPartitions"] > 0
        ],
        timeout=120,
        what="the worker's cached blocks are held by the server",
    )

    # Idle, the group is stopped: its worker releases its session, the server its blocks.
    await eventually(
        lambda: not {b["id"] for b in conftest.storage()} & {b["id"] for b in held},
        timeout=120,
        what="the stopped worker's blocks are released",
    )


async def test_a_pinned_version_is_answered_from_the_workers_memory_and_a_name_never(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    connect_url: str,
    connect_datasets: Path,
    tmp_path: Path,
) -> None:
    """The result cache over Spark Connect: `sales@v1` (a version directory) answers a
    repeated query from the worker's memory (`x-result-cache: hit`); `sales` (the link to it,
    which an ingest would move) never keeps an answer."""
    root = tmp_path / "versions"
    root.mkdir()
    shutil.copytree(connect_datasets / "sales", root / "sales@v1")
    (root / "sales").symlink_to("sales@v1")
    await make_controller(
        pool,
        driver=connect_driver(tmp_path, root, connect_url),
        groups={"unbind_delay": 3600, "stop_delay": 3600},  # the worker and its cache live on
    )
    for key, first_header, again_header in (("sales@v1", "miss", "hit"), ("sales", None, None)):
        first = await client.call(pool, key, COUNT_BY_STORE, timeout=180)
        again = await client.call(pool, key, COUNT_BY_STORE, timeout=60)
        assert total(first) == total(again) == 200
        assert first.headers.get(result_cache.HEADER) == first_header, key
        assert again.headers.get(result_cache.HEADER) == again_header, key
    status = await client.call(pool, "sales@v1", path="status", timeout=60)
    assert status.json()["result_cache"]["hit"] == 1


@pytest.mark.timeout(480)  # a server restart took 100 s in a loaded CI run
async def test_the_server_restarting_loses_no_request(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    connect_url: str,
    connect_state: Path,
    connect_datasets: Path,
    tmp_path: Path,
) -> None:
    await make_controller(pool, driver=connect_driver(tmp_path, connect_datasets, connect_url))
    await asyncio.gather(
        client.call(pool, "trips", COUNT_BY_CITY, timeout=180),
        client.call(pool, "sales", COUNT_BY_STORE, timeout=180),
    )

    await asyncio.to_thread(conftest.server, "--stop", state=connect_state)
    # A session opened while the server is down is usable once it is back (what a worker
    # restarted during the outage does), its checkpoints included.
    waiting = asyncio.create_task(
        asyncio.to_thread(
            connect.build_remote_session,
            # A loaded 2-core machine (a CI run) took 100 s to start the server again.
            SparkWorkerSettings(remote=connect_url, connect_timeout=300),
        )
    )
    calls = [
        asyncio.create_task(client.call(pool, key, body, timeout=240))
        for _ in range(5)
        for key, body in (("trips", COUNT_BY_CITY), ("sales", COUNT_BY_STORE))
    ]
    await asyncio.sleep(3)  # the workers find the server gone
    await asyncio.to_thread(conftest.server, state=connect_state)

    answers = await asyncio.gather(*calls)
    assert [total(a) for a in answers] == [TRIPS_ROWS, 200] * 5

    spark = await waiting
    try:
        _, rows = await asyncio.to_thread(connect.cache, spark.range(10))
        assert rows == 10
    finally:
        spark.stop()


def running_jobs() -> int:
    """Jobs the server is running (its REST API)."""
    return len(conftest.server_api("jobs?status=running"))
