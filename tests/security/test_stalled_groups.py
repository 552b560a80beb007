"""A worker that takes requests and stops answering shows as stalled in `/status`; its group
is never kept looking alive by reports of its own (the first version called such a group
healthy). The hung worker here is a plain consumer that never acks nor reports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aio_pika
import aio_pika.abc
import pytest

from osrdyne import PoolNames
from osrdyne.controller import Health
from tests import broker
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.mark.slow
async def test_a_hung_worker_shows_as_stalled(
    pool: str, amqp_url: str, make_controller: Callable[..., Awaitable[Running]]
) -> None:
    running = await make_controller(pool, driver={"kind": "noop"}, groups={"stall_after": 1.0})
    names = PoolNames(pool)
    held: list[aio_pika.abc.AbstractIncomingMessage] = []
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(names.request_exchange)
        await exchange.publish(aio_pika.Message(b"first"), routing_key="hung")
        queue = await eventually(
            lambda: broker.request_queue(pool, "hung"), what="the group's queue"
        )
        assert queue is not None
        worker = await connection.channel()
        await worker.set_qos(prefetch_count=1)
        request_queue = await worker.declare_queue(names.request_queue("hung"), passive=True)
        await request_queue.consume(held.append)  # takes it, never answers, never reports

        async def health() -> Health | None:
            report = await running.controller.report()
            group = report.groups.get("hung")
            return group.health if group is not None else None

        await eventually(lambda: held, what="the request taken")
        # The management API refreshes its figures every few seconds: bounded wait.
        assert await eventually(lambda: _is(health(), Health.STALLED), timeout=60, what="stalled")


async def _is(value: Awaitable[Health | None], expected: Health) -> bool:
    return await value is expected
