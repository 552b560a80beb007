"""An upgrade from osrdyne 0.1 loses nothing: its request queues, named after the raw key
(`P-req-infra=42`), are adopted under their key, served while their old workers consume them,
then retired: the current queue (`P-req-infra+3D42`) takes the binding and the requests that
were waiting, and the old queue is deleted.

The old queues are made as 0.1 made them, through the management API (pamqp, under aio-pika,
refuses such names now that osrdyne no longer relaxes its check)."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import pytest

from osrdyne import Client, PoolNames
from tests import broker
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(150)


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


async def make_old_queue(pool: str, key: str) -> str:
    """The request queue of `key` as osrdyne 0.1 declared and bound it."""
    names = PoolNames(pool)
    queue, vhost = f"{names.request_queue_prefix}{key}", _q("/")
    async with broker.management() as http:
        response = await http.put(
            f"/queues/{vhost}/{_q(queue)}",
            json={
                "durable": True,
                "arguments": {
                    "x-queue-type": "quorum",
                    "x-dead-letter-exchange": names.dead_letter_exchange,
                },
            },
        )
        response.raise_for_status()
        response = await http.post(
            f"/bindings/{vhost}/e/{_q(names.request_exchange)}/q/{_q(queue)}",
            json={"routing_key": key},
        )
        response.raise_for_status()
    return queue


async def queue_exists(name: str) -> bool:
    async with broker.management() as http:
        return (await http.get(f"/queues/{_q('/')}/{_q(name)}")).status_code == 200


async def bound_queues(pool: str, key: str) -> set[str]:
    exchange = PoolNames(pool).request_exchange
    async with broker.management() as http:
        bindings = (await http.get(f"/exchanges/{_q('/')}/{_q(exchange)}/bindings/source")).json()
    return {b["destination"] for b in bindings if b["routing_key"] == key}


async def test_an_old_queue_with_waiting_requests_is_retired_and_they_are_served(
    pool: str, make_controller: Callable[..., Awaitable[Running]], amqp_url: str
) -> None:
    key = "infra=42"
    first = await make_controller(pool)
    await first.stop()  # the pool's exchanges stay; no controller runs while 0.1's queue is made
    old = await make_old_queue(pool, key)
    correlation_id = uuid.uuid4().hex
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        replies = await channel.declare_queue(exclusive=True)
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange)
        await exchange.publish(
            aio_pika.Message(b"waited", correlation_id=correlation_id, reply_to=replies.name),
            routing_key=key,
            mandatory=True,
        )
        assert (await broker.request_queue(pool, key)) is None  # it waits in the old queue

        await make_controller(pool)  # the 0.2 controller adopts the old queue
        answer = await eventually(
            lambda: replies.get(fail=False), timeout=90, what="the waiting request answered"
        )
    assert answer.correlation_id == correlation_id and answer.body == b"waited"
    assert answer.headers["x-status"] == "ok"
    current = PoolNames(pool).request_queue(key)
    await eventually(lambda: _not(queue_exists(old)), what="old queue deleted")
    assert await bound_queues(pool, key) == {current}


async def test_an_old_queue_still_consumed_serves_until_its_workers_leave(
    pool: str, make_controller: Callable[..., Awaitable[Running]], client: Client, amqp_url: str
) -> None:
    key = "old key"  # pamqp accepts a space: a 0.1 worker can be played with plain aio-pika
    first = await make_controller(pool)
    await first.stop()
    old = await make_old_queue(pool, key)
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.get_queue(old, ensure=False)

        async def old_worker(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await channel.default_exchange.publish(
                aio_pika.Message(
                    b"from the 0.1 worker",
                    headers={"x-status": "ok"},
                    correlation_id=message.correlation_id,
                ),
                routing_key=message.reply_to or "",
            )
            await message.ack()

        tag = await queue.consume(old_worker)
        await make_controller(pool)
        served = await client.call(pool, key, b"x", timeout=60)
        assert served.body == b"from the 0.1 worker"
        current = PoolNames(pool).request_queue(key)
        # Declared beside it, unbound, for workers started with the current name.
        await eventually(lambda: queue_exists(current), what="current queue declared")
        assert await bound_queues(pool, key) == {old}

        await queue.cancel(tag)  # the last 0.1 worker leaves
        await eventually(lambda: _not(queue_exists(old)), what="old queue retired")
    assert await bound_queues(pool, key) == {current}
    answer = await client.call(pool, key, b"from a 0.2 worker", timeout=60)
    assert answer.ok and answer.body == b"from a 0.2 worker"


async def _not(awaitable: Awaitable[Any]) -> bool:
    return not await awaitable


async def test_queue_names_are_what_workers_consume(
    pool: str, make_controller: Callable[..., Awaitable[Running]], client: Client
) -> None:
    """Each worker is given the encoded name; the queue carries its raw key as argument."""
    await make_controller(pool)
    keys = ["infra=42", "gare de lyon é", "y" * 250]
    answers = await asyncio.gather(*(client.call(pool, k, path="whoami", timeout=90) for k in keys))
    assert [a.json()["key"] for a in answers] == keys
    for key in keys:
        info = await broker.request_queue(pool, key)
        assert info is not None and info["arguments"]["x-osrdyne-key"] == key
