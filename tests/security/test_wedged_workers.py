"""A handler cannot wedge its worker: past its time limit the request is answered and the
slot freed; a handler thread that never returns makes the worker end itself, and its driver
restarts it (the first version answered nothing and kept the group looking alive).
Real processes under the subprocess driver."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import pytest

from osrdyne import Client
from tests.conftest import Running
from tests.waiting import eventually
from worker_sdk.watchdog import EXIT_WEDGED

pytestmark = pytest.mark.timeout(120)

WORKER = {
    "command": [sys.executable, "-m", "tests.security.wedged_worker"],
    "env": {
        "WORKER_CONCURRENCY": "2",
        "WORKER_HANDLER_TIMEOUT": "1",
        "WORKER_STALL_GRACE": "1",
        "WORKER_ACTIVITY_INTERVAL": "0.5",
    },
}


@pytest.mark.slow
async def test_a_stuck_async_handler_is_answered_and_the_worker_goes_on(
    pool: str, make_controller: Callable[..., Awaitable[Running]], client: Client
) -> None:
    running = await make_controller(pool, driver={"subprocess": WORKER})
    first = await client.call(pool, "k", b"hi", timeout=60)
    pid = first.ok and running.controller.driver.describe()["k"][0].pid  # type: ignore[attr-defined]
    for _ in range(3):  # more than its two slots: each was given back
        stuck = await client.call(pool, "k", path="block-async", timeout=30)
        assert stuck.status == "worker_error"
        assert stuck.json()["details"]["reason"] == "timeout"
    assert (await client.call(pool, "k", b"still", timeout=30)).body == b"still"
    assert running.controller.driver.describe()["k"][0].pid == pid  # type: ignore[attr-defined]


async def test_a_wedged_handler_thread_ends_the_worker_and_the_driver_restarts_it(
    pool: str, make_controller: Callable[..., Awaitable[Running]], client: Client
) -> None:
    running = await make_controller(pool, driver={"subprocess": WORKER})
    driver = running.controller.driver
    assert (await client.call(pool, "k", b"hi", timeout=60)).ok
    stuck = await client.call(pool, "k", path="block-thread", timeout=30)
    assert stuck.status == "worker_error" and stuck.json()["details"]["reason"] == "timeout"

    def restarted() -> bool:
        worker = driver.describe()["k"][0]  # type: ignore[attr-defined]
        return worker.restarts >= 1 and worker.last_exit == EXIT_WEDGED

    await eventually(restarted, what="the worker ended itself and was restarted")
    assert (await client.call(pool, "k", b"back", timeout=60)).body == b"back"
    report = (await running.controller.report()).groups["k"]
    assert report.restarts and report.restarts >= 1
    assert report.workers and report.workers[0].last_exit == EXIT_WEDGED
