"""Over Spark Connect (`cache_in_background`, the default), a new key is served as soon as
its dataset is defined, from the source, while the cache is built; then from memory, with
the same answers. A cache that cannot be built leaves the source served.

The cache build is held back (a wrapper around `KeyDataset._cache` waits for the test), so
"before the cache is complete" is a state the test chooses, not a race it hopes to win. The
worker runs in this process, on a session of its own on the shared server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_workers import SparkWorker, SparkWorkerSettings, connect, query_worker
from tests.spark.conftest import call
from tests.spark_connect.conftest import CONNECT_WARNINGS, TRIPS_ROWS

pytestmark = [pytest.mark.timeout(300), *(pytest.mark.filterwarnings(w) for w in CONNECT_WARNINGS)]

GROUP_BY = {
    "group_by": ["payment"],
    "aggregates": [{"fn": "count", "as": "n"}],
    "order_by": ["payment"],
}


@pytest.fixture
def make_app(connect_url: str, connect_datasets: Path) -> Iterator[Any]:
    apps: list[SparkWorker] = []

    def make(build: Any = None) -> SparkWorker:
        settings = SparkWorkerSettings(remote=connect_url, dataset_root=str(connect_datasets))
        app = query_worker.create_app(settings)
        if build is not None:
            app.dataset._cache = build(app)  # type: ignore[method-assign]
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.cached.wait(60)
        if app.data is not None:
            connect.release(app.data.spark)


def test_answers_from_the_source_then_from_the_cache(make_app: Any) -> None:
    release = threading.Event()

    def held(app: SparkWorker) -> Any:
        build = app.dataset._cache

        def wait_then_build(source: Any) -> Any:
            release.wait(120)
            return build(source)

        return wait_then_build

    app = make_app(held)
    app.start("trips")
    try:
        assert app.data is not None and not app.cached.is_set() and app.data.rows is None
        from_source = call(app, GROUP_BY)
        assert sum(r["n"] for r in from_source["rows"]) == TRIPS_ROWS
        assert call(app, path="schema")["rows"] == TRIPS_ROWS  # counted from the source
    finally:
        release.set()
    assert app.cached.wait(240)
    assert app.data.rows == TRIPS_ROWS and "cache_s" in app.data.timings
    assert call(app, GROUP_BY) == from_source
    sql = {"sql": "SELECT count(*) AS n FROM dataset"}
    assert call(app, sql)["rows"] == [{"n": TRIPS_ROWS}]


def test_a_cache_that_cannot_be_built_leaves_the_source_served(
    make_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(app: SparkWorker) -> Any:
        def fail(source: Any) -> None:
            raise RuntimeError("no memory for the cache")

        return fail

    app = make_app(broken)
    with caplog.at_level(logging.WARNING, logger="spark_workers.key_dataset"):
        app.start("trips")
        assert app.cached.wait(60)
    assert "not cached, answered from its source: no memory for the cache" in caplog.text
    assert app.exit_code is None and app.lost is None
    assert sum(r["n"] for r in call(app, GROUP_BY)["rows"]) == TRIPS_ROWS


def test_requests_go_before_the_cache_build(make_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build waits while a request is being answered (the first answers do not share
    the server's cores with it), and starts once none is. (The settling time is made long
    enough for this test's request to be under way before it ends, however busy the
    machine.)"""
    from spark_workers import key_dataset
    from tests.spark.conftest import make_request

    monkeypatch.setattr(key_dataset, "_CACHE_SETTLE", 3.0)

    build_started = threading.Event()

    def recorded(app: SparkWorker) -> Any:
        build = app.dataset._cache

        def record_then_build(source: Any) -> Any:
            build_started.set()
            return build(source)

        return record_then_build

    answering, release = threading.Event(), threading.Event()

    def slow(request: Any, data: Any) -> str:
        answering.set()
        release.wait(60)
        return "answered"

    app = make_app(recorded)
    app.start("trips")
    answer: list[Any] = []
    caller = threading.Thread(target=lambda: answer.append(app.call(slow, make_request())))
    caller.start()
    assert answering.wait(30)
    # Past the settling time the build still waits: a request is being answered.
    assert not build_started.wait(4.0) and not app.cached.is_set()
    release.set()
    caller.join(60)
    assert answer == ["answered"]
    assert build_started.wait(30) and app.cached.wait(240)
    assert app.data is not None and app.data.rows == TRIPS_ROWS
