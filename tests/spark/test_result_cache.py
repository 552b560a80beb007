"""The result cache of keyed Spark workers: answers of a pinned dataset version kept in
memory, never those of a key that can move.

- the cache itself: an LRU bounded in bytes, too large an answer not kept;
- which keys pin a version (`Catalog.pinned_version`): `name@version` as a directory of its
  own, never `name` (a link that ingests and appends move), nor a version reached through a
  link, nor a URI template that ignores the version;
- a query worker on the shared session: a repeated query (in any spelling of its normal
  form) answered from memory with `x-result-cache: hit`, its counts in the `status`
  endpoint; a key that can move keeps nothing;
- real query worker processes started by a controller: after an append moves `name` to a
  new version, `name`'s answers never come from a cache (its worker restarted reads the new
  version), while `name@old` goes on answering its own rows from memory.
"""

from __future__ import annotations

import functools
import json
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from drivers.subprocess import SubprocessDriver
from osrdyne import Client
from spark_workers import catalog, query_worker, result_cache
from tests.spark.conftest import make_request, query_worker_driver, settings_for
from tests.spark.test_real_data import ingest
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(900)

COUNT_BY_CITY = {"group_by": ["city"], "aggregates": [{"fn": "count", "as": "n"}]}
HEADER = result_cache.HEADER


def test_an_lru_bounded_in_bytes() -> None:
    cache = result_cache.ResultCache(8 * 1024)
    for i in range(40):
        assert cache.put(i, result_cache.Answer(b"x" * 300, "application/json"))
    assert cache.bytes <= 8 * 1024 and len(cache) < 40
    assert cache.get(0) is None and cache.get(39) is not None  # the oldest went first
    assert cache.stats["evicted"] == 40 - len(cache)
    assert not cache.put("big", result_cache.Answer(b"x" * 2000, None))  # over an eighth
    assert cache.get("big") is None and cache.stats["too_large"] == 1
    status = cache.status()
    assert status["entries"] == len(cache) and status["max_bytes"] == 8 * 1024


def test_only_a_version_that_cannot_move_is_pinned(tmp_path: Path) -> None:
    (tmp_path / "sales@v1").mkdir()
    (tmp_path / "sales").symlink_to("sales@v1")
    (tmp_path / "alias@v9").symlink_to("sales@v1")  # a version name that is a link
    (tmp_path / "plain").mkdir()
    cat = catalog.Catalog(str(tmp_path))
    assert cat.pinned_version("sales@v1") == "v1"
    assert cat.pinned_version("sales@v1/city=Lyon") == "v1"
    assert cat.pinned_version("sales") is None
    assert cat.pinned_version("alias@v9") is None
    assert cat.pinned_version("plain") is None
    assert cat.pinned_version("missing@v1") is None
    remote = catalog.Catalog("s3a://bucket/data")
    assert remote.pinned_version("sales@v1") == "v1" and remote.pinned_version("sales") is None
    ignores = catalog.Catalog("/data", uri_template="s3a://bucket/{name}/")
    assert ignores.pinned_version("sales@v1") is None


@pytest.fixture
def versioned(spark: Any, tmp_path: Path) -> Path:
    """`sales@v1` (a version directory) and the link `sales` to it."""
    from spark_workers import pipeline

    root = tmp_path / "root"
    pipeline.sales(spark, 200, 7).coalesce(1).write.parquet(str(root / "sales@v1"))
    (root / "sales").symlink_to("sales@v1")
    return root


def ask(app: Any, body: Any, path: str | None = None) -> Any:
    handler = query_worker.answer_count if path == "count" else query_worker.answer_query
    return app.call(handler, make_request(body, path=path), cache_key=query_worker.cache_key)


def test_a_pinned_version_answers_a_repeated_query_from_memory(spark: Any, versioned: Path) -> None:
    app = query_worker.create_app(settings_for(versioned, query_timeout=300))
    app.start("sales@v1", spark=spark)
    assert app.version == "v1" and app.results is not None
    query = {"group_by": ["store"], "aggregates": [{"fn": "count", "as": "n"}]}
    first = ask(app, query)
    assert first.headers == {HEADER: "miss"} and first.content_type == "application/json"
    second = ask(app, {**query, "where": [], "format": "json"})  # the same query, spelled out
    assert second.headers == {HEADER: "hit"} and second.body == first.body
    assert sum(row["n"] for row in json.loads(second.body)["rows"]) == 200
    sql = ask(app, {"sql": "SELECT count(*) AS n FROM dataset"})
    again = ask(app, {"sql": "  SELECT count(*)\n  AS n   FROM dataset "})
    assert (sql.headers[HEADER], again.headers[HEADER]) == ("miss", "hit")
    quoted = ask(app, {"sql": "SELECT count(*) AS n FROM dataset WHERE store != 'a  b'"})
    spaced = ask(app, {"sql": "SELECT count(*) AS n FROM dataset WHERE store != 'a b'"})
    assert (quoted.headers[HEADER], spaced.headers[HEADER]) == ("miss", "miss")
    counted = ask(app, {"where": [{"column": "store", "op": "=", "value": "s1"}]}, "count")
    assert counted.headers == {HEADER: "miss"}
    arrow = ask(app, {**query, "format": "arrow"})  # another answer: another entry
    assert arrow.headers == {HEADER: "miss"} and arrow.body[:4] == b"\xff\xff\xff\xff"
    status = app.call(functools.partial(query_worker.answer_status, app=app), make_request())
    cached = status["result_cache"]
    assert status["version"] == "v1" and (cached["hit"], cached["miss"]) == (2, 6)
    assert cached["entries"] == 6 and 0 < cached["bytes"] <= cached["max_bytes"]


def test_a_key_that_can_move_keeps_nothing_and_the_setting_turns_it_off(
    spark: Any, versioned: Path
) -> None:
    moving = query_worker.create_app(settings_for(versioned, query_timeout=300))
    moving.start("sales", spark=spark)
    assert moving.version is None and moving.results is None
    for _ in range(2):
        answer = ask(moving, COUNT_BY_CITY | {"group_by": ["store"]})
        assert isinstance(answer, dict)  # no Reply: nothing kept, no header
    status = moving.call(functools.partial(query_worker.answer_status, app=moving), make_request())
    assert status["result_cache"] is None
    off = query_worker.create_app(settings_for(versioned, result_cache_bytes=0))
    off.start("sales@v1", spark=spark)
    assert off.version == "v1" and off.results is None


async def test_an_append_moves_the_name_and_no_answer_of_it_comes_from_a_cache(
    pool: str,
    make_controller: Callable[..., Awaitable[Any]],
    client: Client,
    spark: Any,
    tmp_path: Path,
) -> None:
    root = tmp_path / "versions"
    first = tmp_path / "day1.csv"
    first.write_text("id,city\n" + "".join(f"{i},Lyon\n" for i in range(30)))
    second = tmp_path / "day2.csv"
    second.write_text("id,city\n" + "".join(f"{i},Nice\n" for i in range(30, 40)))
    done = ingest(first, root, "--name", "sales", "--version", "v1")
    assert done.exit_code == 0, done.output
    # Real worker processes over the root (its path given to them by the driver).
    # Groups never stopped for idleness here: `sales@v1`'s worker (its cache) must live
    # through the append and the restart of `sales`'s, minutes on a loaded machine.
    running = await make_controller(
        pool,
        driver=query_worker_driver(tmp_path, root, memory="512m"),
        groups={"unbind_delay": 3600, "stop_delay": 3600},
    )
    driver = running.controller.driver
    assert isinstance(driver, SubprocessDriver)
    count = {"group_by": ["city"], "aggregates": [{"fn": "count", "as": "n"}]}

    async def counts(key: str) -> tuple[dict[str, int], str | None]:
        answer = await client.call(pool, key, count, timeout=240)
        assert answer.ok, answer.body[:500]
        rows = {row["city"]: row["n"] for row in answer.json()["rows"]}
        return rows, answer.headers.get(HEADER)

    assert await counts("sales@v1") == ({"Lyon": 30}, "miss")
    assert await counts("sales@v1") == ({"Lyon": 30}, "hit")
    assert await counts("sales") == ({"Lyon": 30}, None)
    assert await counts("sales") == ({"Lyon": 30}, None)

    done = ingest(second, root, "--name", "sales", "--version", "v2", "--append")
    assert done.exit_code == 0, done.output
    assert os.readlink(root / "sales") == "sales@v2"
    # The name's worker, started again, reads the version the link names now: no answer
    # of the old version comes back from anywhere.
    (worker,) = driver.describe()["sales"]
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)

    async def moved() -> bool:
        rows, header = await counts("sales")
        assert header is None
        return rows == {"Lyon": 30, "Nice": 10}

    await eventually(moved, timeout=240, interval=1, what="the name serving the appended rows")
    assert await counts("sales") == ({"Lyon": 30, "Nice": 10}, None)
    # The pinned version keeps its own rows, from memory.
    assert await counts("sales@v1") == ({"Lyon": 30}, "hit")
    assert await counts("sales@v2") == ({"Lyon": 30, "Nice": 10}, "miss")
    status = await client.call(pool, "sales", path="status", timeout=60)
    assert status.ok and status.json()["result_cache"] is None
