"""Workers dying for real: a worker SIGKILLed mid-request, and a request that kills every
worker it reaches. Real broker, real controller, real echo worker processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from osrdyne import PoolNames, Status
from tests.conftest import Running, raw_connection
from tests.faults.conftest import Caller, workers_of
from tests.faults.report import Tally
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.mark.slow
async def test_worker_sigkilled_mid_request_is_redelivered_and_answered(
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    tally = make_tally(
        "worker SIGKILLed mid-request",
        "unacked requests go back to the quorum queue; the restarted worker answers",
    )
    await make_controller(pool)
    caller = await make_caller(tally)
    first = await caller.send(pool, "victim", path="whoami")
    assert not await caller.settle(60, grace=0)
    pid = int(json.loads(caller.bodies[first])["pid"])

    slow = [await caller.send(pool, "victim", b"1.5", path="sleep") for _ in range(8)]
    await asyncio.sleep(0.7)  # the first ones are being handled (concurrency 4)
    os.kill(pid, signal.SIGKILL)
    await eventually(
        lambda: workers_of(pool) and pid not in workers_of(pool),
        what="a new worker started",
        timeout=30,
    )
    assert not await caller.settle(60)
    assert caller.statuses(slow) == {Status.OK: 8}
    assert tally.row()["duplicated"] == 0


async def poison_count(url: str, pool: str) -> int:
    async with raw_connection(url) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(PoolNames(pool).poison_queue, passive=True)
        return int(queue.declaration_result.message_count or 0)


@pytest.mark.slow
async def test_request_crashing_every_worker_dies_as_delivery_limit_and_is_kept(
    pool: str,
    amqp_url: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    tally = make_tally(
        "request crashes every worker (delivery limit 2)",
        "poison answered delivery_limit and kept in P-poison; requests prefetched by the "
        "crashing worker are redelivered too and may share its fate",
    )
    running = await make_controller(pool, queues={"delivery_limit": 2})
    caller = await make_caller(tally)
    await caller.send(pool, "fragile", b"warm-up")
    assert not await caller.settle(60, grace=0)

    poison = await caller.send(pool, "fragile", path="crash")
    bystanders = [await caller.send(pool, "fragile", f"b{i}".encode()) for i in range(5)]
    assert not await caller.settle(90)
    assert tally.status_of(poison) == Status.DELIVERY_LIMIT
    # Collateral: a bystander prefetched by each crashing worker counts deliveries too.
    assert set(caller.statuses(bystanders)) <= {Status.OK, Status.DELIVERY_LIMIT}
    await eventually(
        lambda: _equals(poison_count(amqp_url, pool), 1 + _dead(tally, bystanders)),
        what="poison kept",
        timeout=20,
    )

    # The group keeps serving.
    after = [await caller.send(pool, "fragile", f"a{i}".encode()) for i in range(5)]
    assert not await caller.settle(60)
    assert caller.statuses(after) == {Status.OK: 5}
    assert tally.row()["duplicated"] == 0
    # Workers that served and then crashed are no failed starts: the group was never failing
    # (its requests would have been answered start_failed instead).
    kinds = [e.kind.value for e in running.controller.history.events("fragile")]
    assert "failing" not in kinds


def _dead(tally: Tally, cids: list[str]) -> int:
    return sum(1 for c in cids if tally.status_of(c) == Status.DELIVERY_LIMIT)


async def _equals(awaitable: Awaitable[Any], value: Any) -> bool:
    return bool(await awaitable == value)
