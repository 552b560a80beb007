"""Every request that dies is answered with the reason: expired, maxlen, rejected,
delivery_limit (kept as poison). Real broker, real controller, real worker processes; the
policy is the one the controller applies through the management API."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import urllib.parse
import uuid
from typing import Any

import aio_pika
import pytest

from osrdyne import Client, PoolNames, Status
from osrdyne.controller import poison
from tests import broker
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

#: A "worker" that never consumes: requests stay queued until the broker kills them.
ASLEEP = {"command": [sys.executable, "-c", "import time; time.sleep(3600)"]}


def counter(running: Running, name: str, *labels: str) -> float:
    metric = getattr(running.controller.metrics, name)
    return (metric.labels(*labels) if labels else metric)._value.get()


@pytest.mark.slow
async def test_the_policy_is_applied_to_request_queues(
    make_controller: Any, client: Client, pool: str
) -> None:
    await make_controller(pool, queues={"message_ttl": 60, "delivery_limit": 3, "max_length": 100})
    assert (await client.call(pool, "p", b"x", timeout=60)).ok
    name = urllib.parse.quote(PoolNames(pool).request_queue("p"), safe="")
    async with broker.management() as http:
        info = await eventually(
            lambda: _queue_with_policy(http, name), what="policy applied to the queue"
        )
    assert info["arguments"]["x-queue-type"] == "quorum"
    assert info["effective_policy_definition"] == {
        "dead-letter-exchange": f"{pool}-dl-xchg",
        "message-ttl": 60000,
        "delivery-limit": 3,
        "max-length": 100,
        "overflow": "drop-head",
    }


async def _queue_with_policy(http: Any, name: str) -> dict[str, Any] | None:
    info: dict[str, Any] = (await http.get(f"/queues/%2F/{name}")).json()
    return info if info.get("effective_policy_definition") else None


async def test_a_request_nobody_takes_in_time_is_answered_expired(
    make_controller: Any, client: Client, pool: str
) -> None:
    running = await make_controller(pool, queues={"message_ttl": 1}, driver={"subprocess": ASLEEP})
    response = await client.call(pool, "sleepy", b"x", timeout=60)
    assert response.status == Status.EXPIRED
    doc = response.json()
    assert doc["status"] == "expired" and doc["key"] == "sleepy" and doc["pool"] == pool
    assert doc["details"]["queue"] == PoolNames(pool).request_queue("sleepy")
    assert counter(running, "dead_letters", "expired") == 1


@pytest.mark.slow
async def test_overflowing_requests_are_answered_maxlen(
    make_controller: Any, client: Client, pool: str
) -> None:
    await make_controller(
        pool, queues={"message_ttl": 3, "max_length": 2}, driver={"subprocess": ASLEEP}
    )
    await client.call(pool, "full", b"first", timeout=60)  # creates the queue; expires
    answers = await asyncio.gather(
        *(client.call(pool, "full", f"{i}".encode(), timeout=60) for i in range(6))
    )
    statuses = sorted(a.status for a in answers)
    assert statuses.count(Status.MAXLEN) >= 4  # the oldest are dropped as newer ones arrive
    assert set(statuses) <= {Status.MAXLEN, Status.EXPIRED}  # every one answered


async def test_a_rejected_request_is_answered_rejected(
    make_controller: Any, client: Client, pool: str
) -> None:
    """A worker of another implementation may reject without requeue (ours never does)."""
    await make_controller(pool, driver={"kind": "noop"})
    names = PoolNames(pool)
    async with raw_connection(broker.AMQP_URL) as connection:
        channel = await connection.channel()
        first = asyncio.create_task(client.call(pool, "picky", b"x", timeout=60))
        queue = await eventually(
            lambda: _declared(connection, names.request_queue("picky")),
            what="request queue created by the orphan processor",
        )

        async def reject(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await message.reject(requeue=False)

        await (await channel.get_queue(queue, ensure=False)).consume(reject)
        response = await first
    assert response.status == Status.REJECTED
    assert response.json()["key"] == "picky"


async def _declared(connection: aio_pika.abc.AbstractConnection, name: str) -> str | None:
    try:
        async with connection.channel() as spare:
            await spare.declare_queue(name, passive=True)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return None
    return name


async def test_a_dead_request_without_reply_to_is_counted_and_acked(
    make_controller: Any, pool: str
) -> None:
    running = await make_controller(
        pool, queues={"message_ttl": 0.5}, driver={"subprocess": ASLEEP}
    )
    names = PoolNames(pool)
    async with raw_connection(broker.AMQP_URL) as connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(names.request_exchange)
        await exchange.publish(aio_pika.Message(b"fire and forget"), routing_key="quiet")
        await eventually(lambda: counter(running, "dead_letters_unanswerable") == 1, what="counted")
        dl = await channel.declare_queue(names.dead_letter_queue, passive=True)
    assert dl.declaration_result.message_count == 0


@pytest.mark.slow
async def test_poison_is_kept_listed_replayed_and_dropped(
    make_controller: Any, client: Client, pool: str, amqp_url: str
) -> None:
    running = await make_controller(pool, queues={"delivery_limit": 1})
    correlation = uuid.uuid4().hex
    response = await client.call(
        pool, "crashy", b"kill", path="crash", timeout=90, headers={"case": correlation}
    )
    assert response.status == Status.DELIVERY_LIMIT
    assert response.json()["details"]["deaths"] == 1
    assert (await client.call(pool, "crashy", b"others still served", timeout=60)).ok
    assert counter(running, "poison") == 1

    entries = await poison.list_entries(amqp_url, pool)
    assert [(e.key, e.headers["case"]) for e in entries] == [("crashy", correlation)]
    assert await poison.list_entries(amqp_url, pool) == entries  # listing keeps them

    replayed = await poison.replay(amqp_url, pool, entries[0].id)
    assert replayed is not None
    await eventually(lambda: counter(running, "poison") == 2, what="replayed poison dies again")
    again = await poison.list_entries(amqp_url, pool)
    assert len(again) == 1 and again[0].id != entries[0].id

    assert await poison.drop(amqp_url, pool, again[0].id) is not None
    assert await poison.list_entries(amqp_url, pool) == []
    assert await poison.drop(amqp_url, pool, "nope") is None


#: Deliveries past RabbitMQ 4.x's default delivery limit of quorum queues (20).
PAST_4X_DEFAULT = 25


@pytest.mark.slow
async def test_no_delivery_limit_is_no_limit_on_either_broker(
    make_controller: Any, client: Client, pool: str
) -> None:
    """`queues.delivery_limit = None` means no limit: RabbitMQ 4.x's quorum queues dead-letter
    a request after 20 deliveries when no limit is set, so the controller's policy says -1
    there (3.x refuses -1, and has no default limit). A consumer that drops its channel with
    the request unacked (as a crashing worker does) `PAST_4X_DEFAULT` times still gets it
    back, nothing dies, then it acks."""
    running = await make_controller(pool, queues={"delivery_limit": None}, driver={"kind": "noop"})
    names = PoolNames(pool)
    call = asyncio.create_task(client.call(pool, "again", b"x", timeout=120))
    try:
        async with raw_connection(broker.AMQP_URL) as connection:
            queue_name = await eventually(
                lambda: _declared(connection, names.request_queue("again")),
                what="request queue created by the orphan processor",
            )
            for delivery in range(PAST_4X_DEFAULT + 1):
                channel = await connection.channel()
                queue = await channel.declare_queue(queue_name, passive=True)
                message = await eventually(
                    lambda q=queue: q.get(no_ack=False, fail=False),
                    what=f"delivery {delivery + 1}",
                    timeout=60,
                )
                if delivery == PAST_4X_DEFAULT:
                    await message.ack()
                await channel.close()  # unacked: back in the queue, one delivery more
        assert counter(running, "dead_letters", "delivery_limit") == 0
        name = urllib.parse.quote(queue_name, safe="")
        async with broker.management() as http:
            info = await eventually(
                lambda: _queue_with_policy(http, name), what="policy applied to the queue"
            )
        limit = info["effective_policy_definition"].get("delivery-limit")
        assert limit == (-1 if broker.VERSION == "4" else None)
    finally:
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
