"""Only orphans create worker groups: activity reports for a key nobody requested start
nothing (the first version started a group, and its processes, for each forged key)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aio_pika
import pytest

from osrdyne import Client, PoolNames
from tests import broker
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


async def test_forged_activity_starts_no_group(
    pool: str, amqp_url: str, make_controller: Callable[..., Awaitable[Running]], client: Client
) -> None:
    running = await make_controller(pool)
    metrics = running.controller.metrics
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(PoolNames(pool).activity_exchange)
        for key in ("forged-1", "forged-2"):
            for event in ("started", "ready", "request-received"):
                headers = {"x-event": event, "x-worker-id": "intruder"}
                await exchange.publish(aio_pika.Message(b"", headers=headers), routing_key=key)
    await eventually(lambda: metrics.activity_ignored._value.get() == 6, what="reports seen")
    session = running.controller.session
    assert session is not None
    assert not {"forged-1", "forged-2"} & set(session.tracker.state.value.groups)
    assert await running.controller.driver.list() == set()
    assert await broker.request_queues(pool) == []
    # A real request still creates its group, and its workers' reports count.
    assert (await client.call(pool, "real", b"hi", timeout=60)).ok
    await eventually(lambda: "real" in session.activity.last_seen, what="the worker's reports")
    assert await running.controller.driver.list() == {"real"}
