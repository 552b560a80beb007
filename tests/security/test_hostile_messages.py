"""Messages nobody can handle as sent are answered once and never loop, on a real broker.

The attack: a request whose `x-rpc-path` is the byte 0xff (a long string that is not UTF-8,
which pamqp decodes to bytes and refuses to encode). Sent to a cold key, the first version's
orphan processor could not republish it, requeued it, and got it back at once (30,780
redeliveries in 33 s at 94% CPU); sent to a warm key, the worker raised in its error path and
held the request unacked, and one of its slots, forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aio_pika
import aio_pika.abc
import pytest

from osrdyne import Client, PoolNames, Status
from osrdyne.controller import poison
from osrdyne.controller._effects import consumer
from osrdyne.ops.metrics import ControllerMetrics
from tests import broker
from tests.broker import RawText
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

NOT_TEXT = {"x-rpc-path": RawText(b"\xff")}


async def orphan_redeliveries(pool: str) -> int:
    """How many times the broker redelivered messages of the pool's orphan queue."""
    name = PoolNames(pool).orphan_queue
    async with broker.management() as http:
        response = await http.get(f"/queues/%2F/{name}")
    stats = response.json().get("message_stats") or {}
    return int(stats.get("redeliver", 0))


async def test_a_header_that_is_not_text_is_answered_once_on_a_cold_key(
    pool: str, make_controller: Callable[..., Awaitable[Running]], client: Client
) -> None:
    running = await make_controller(pool)
    response = await client.call(pool, "cold", b"x", headers=NOT_TEXT, timeout=30)
    assert response.status == Status.INVALID_REQUEST
    doc = response.json()
    assert doc["status"] == "invalid_request" and "x-rpc-path is not text" in doc["error"]
    # Decided before anything acted on it: no group, no queue, no redelivery, same session.
    assert await running.controller.driver.list() == set()
    assert await broker.request_queues(pool) == []
    assert await orphan_redeliveries(pool) == 0
    assert running.controller.sessions == 1
    # The pool goes on serving.
    assert (await client.call(pool, "cold", b"fine", timeout=60)).body == b"fine"


@pytest.mark.slow
async def test_a_header_that_is_not_text_is_answered_by_a_warm_worker_which_goes_on(
    pool: str, make_controller: Callable[..., Awaitable[Running]], client: Client
) -> None:
    # One worker with one slot: a request it held forever would block the next one.
    env = {"WORKER_CONCURRENCY": "1", "WORKER_ACTIVITY_INTERVAL": "0.5"}
    await make_controller(pool, driver={"subprocess": {"env": env}})
    assert (await client.call(pool, "warm", b"first", timeout=60)).ok
    for _ in range(3):
        refused = await client.call(pool, "warm", b"x", headers=NOT_TEXT, timeout=30)
        assert refused.status == Status.INVALID_REQUEST
        assert refused.json()["status"] == "invalid_request"
    assert (await client.call(pool, "warm", b"after", timeout=30)).body == b"after"
    queue = await broker.request_queue(pool, "warm")
    assert queue is not None
    await eventually(
        lambda: _unacked(pool, "warm"), what="nothing left unacked in the request queue"
    )


async def _unacked(pool: str, key: str) -> bool:
    queue = await broker.request_queue(pool, key)
    return queue is not None and queue.get("messages_unacknowledged") == 0


async def test_a_refused_request_without_reply_to_is_kept_as_poison(
    pool: str, amqp_url: str, make_controller: Callable[..., Awaitable[Running]]
) -> None:
    running = await make_controller(pool)
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange)
        message = aio_pika.Message(b"fire and forget", headers=NOT_TEXT, correlation_id="ff")
        await exchange.publish(message, routing_key="cold")
    entries = await eventually(
        lambda: poison.list_entries(amqp_url, pool), what="the request kept as poison"
    )
    assert [(e.key, e.correlation_id) for e in entries] == [("cold", "ff")]
    assert "x-rpc-path is not text" in entries[0].reason
    assert await running.controller.driver.list() == set()


async def test_poison_listing_survives_any_header_shape(pool: str, amqp_url: str) -> None:
    names = PoolNames(pool)
    shapes: list[dict[str, Any]] = [
        {"x-death": "not a list"},
        {"x-death": [1, 2, 3]},
        {"x-death": [{"count": "many", "routing-keys": "k", "time": "yesterday"}]},
        {"x-death": [{"routing-keys": [RawText(b"\xfe")]}], "x-first-death-reason": 7},
        {"x-osrdyne-poison-id": RawText(b"\xff"), "x-osrdyne-poison-reason": [1]},
    ]
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(names.poison_queue, durable=True)
        for headers in shapes:
            await channel.default_exchange.publish(
                aio_pika.Message(b"?", headers=headers), routing_key=names.poison_queue
            )
    entries = await poison.list_entries(amqp_url, pool)
    assert len(entries) == len(shapes)
    assert all(isinstance(e.reason, str) and isinstance(e.key, str) for e in entries)


class Flaky(consumer.QueueConsumer):
    """A consumer whose handler always fails the way it is told to: the give-up mechanics
    every controller consumer shares, on a real queue."""

    def __init__(self, channel: aio_pika.abc.AbstractChannel, queue: str, error: Exception):
        super().__init__(
            channel,
            prefetch=4,
            names=PoolNames(queue.rsplit("-", 1)[0]),
            metrics=ControllerMetrics(),
            retry_delay=0.05,
        )
        self.queue_name = queue
        self.error = error
        self.calls = 0

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        self.calls += 1
        raise self.error


Setup = tuple[aio_pika.abc.AbstractConnection, str, aio_pika.abc.AbstractQueue]


@pytest.fixture
async def flaky_setup(pool: str, amqp_url: str) -> AsyncIterator[Setup]:
    """A connection, a queue of the pool with one bad message in it, and a reply queue."""
    names = PoolNames(pool)
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(names.poison_queue, durable=True)
        queue = f"{pool}-flaky"
        await channel.declare_queue(queue, auto_delete=False)
        replies = await channel.declare_queue(exclusive=True)
        await channel.default_exchange.publish(
            aio_pika.Message(b"bad", correlation_id="c1", reply_to=replies.name),
            routing_key=queue,
        )
        yield connection, queue, replies


@pytest.mark.parametrize(
    ("error", "tries"),
    [(ValueError("cannot read this"), 1), (ConnectionError("broker hiccup"), 3)],
    ids=["a fault of the message: given up at once", "transient: retried, then given up"],
)
async def test_a_consumer_gives_up_on_a_message_after_bounded_tries(
    pool: str,
    amqp_url: str,
    flaky_setup: Setup,
    error: Exception,
    tries: int,
) -> None:
    connection, queue, replies = flaky_setup
    consumer = Flaky(await connection.channel(publisher_confirms=True), queue, error)
    await consumer.start()
    try:
        entries = await eventually(
            lambda: poison.list_entries(amqp_url, pool), what="the message parked"
        )
        answer = await eventually(lambda: replies.get(fail=False), what="an answer")
        await asyncio.sleep(0.5)  # room for a (wrong) redelivery to show
    finally:
        await consumer.stop(1)
    assert consumer.calls == tries
    assert answer.headers["x-status"] == Status.INVALID_REQUEST
    assert answer.correlation_id == "c1"
    assert [e.correlation_id for e in entries] == ["c1"]
    assert type(error).__name__ in entries[0].reason
    assert consumer._metrics.unprocessable.labels("flaky")._value.get() == 1
