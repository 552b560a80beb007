"""Requests nobody serves in time die as `expired` and are answered: behind a worker too slow
for them, and for a key whose workers cannot even start. `queues.message_ttl` is small here."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import pytest

from osrdyne import Status
from tests.conftest import Running
from tests.faults.conftest import Caller
from tests.faults.report import Tally

pytestmark = pytest.mark.timeout(120)


@pytest.mark.slow
async def test_requests_behind_a_slow_worker_expire_and_are_answered(
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    tally = make_tally(
        "TTL 2 s, worker busy 6 s (concurrency 4)",
        "the 4 taken are answered ok; those queued behind them expire",
    )
    await make_controller(pool, queues={"message_ttl": 2})
    caller = await make_caller(tally)
    await caller.send(pool, "slowpoke", path="whoami")
    assert not await caller.settle(60, grace=0)
    busy = [await caller.send(pool, "slowpoke", b"6", path="sleep") for _ in range(4)]
    queued = [await caller.send(pool, "slowpoke", b"late") for _ in range(3)]
    assert not await caller.settle(60)
    assert caller.statuses(busy) == {Status.OK: 4}
    assert caller.statuses(queued) == {Status.EXPIRED: 3}
    assert tally.row()["duplicated"] == 0


async def test_requests_for_a_key_whose_workers_cannot_start_expire(
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    """Below the failing threshold (a group that fails to start is answered `start_failed`,
    tests/dispatch/test_failing_groups.py), the requests of a crash-looping group expire."""
    tally = make_tally(
        "TTL 2 s, workers exit at once (crash loop, failing threshold not reached)",
        "the group is started, its queue created, its requests expire",
    )
    running = await make_controller(
        pool,
        queues={"message_ttl": 2},
        groups={"failing_after": 1000},
        driver={
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-c", "raise SystemExit(3)"],
                "restart_backoff": 0.5,
            },
        },
    )
    caller = await make_caller(tally)
    sent = [await caller.send(pool, "doomed", f"{i}".encode()) for i in range(5)]
    assert not await caller.settle(60)
    assert caller.statuses(sent) == {Status.EXPIRED: 5}
    assert await running.controller.driver.list() == {"doomed"}
