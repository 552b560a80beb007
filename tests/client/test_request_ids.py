"""Request ids that sort by time (UUIDv7 in `message_id`), kept and ordered by osrdyne.

Two clients' ids sort in the order their calls were made; the poison inventory lists entries
by them; ids from foreign clients are hostile input (huge, not UTF-8, control characters) and
are dropped, never stored or logged as sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import aio_pika
import uuid6

from osrdyne import Client, wire
from osrdyne.controller import poison
from tests.conftest import Running


def test_ids_are_uuid7_and_sort_by_time() -> None:
    ids = [wire.new_request_id() for _ in range(1000)]
    assert all(uuid.UUID(i).version == 7 for i in ids)
    times = [wire.uuid7_time_ms(i) for i in ids]
    assert times == sorted(times)


def test_foreign_ids_are_checked() -> None:
    assert wire.request_id("abc-123") == "abc-123"
    assert wire.request_id(b"abc") == "abc"
    assert wire.request_id(None) is None
    assert wire.request_id(42) is None
    assert wire.request_id("") is None
    assert wire.request_id("x" * (wire.MAX_REQUEST_ID + 1)) is None
    assert wire.request_id("a\x1b[31mb") is None
    assert wire.request_id("line\nforged") is None
    assert wire.request_id("é") is None
    assert wire.request_id(b"\xff\xfe") is None
    assert wire.request_id("has space") is None


def test_order_puts_uuid7_first_by_time_then_the_rest_by_arrival() -> None:
    early, late = str(uuid6.uuid7()), str(uuid6.uuid7())
    items = ["foreign-1", late, None, str(uuid.uuid4()), early, "foreign-2"]
    ordered = wire.order(items, lambda item: item)
    assert ordered[:2] == [early, late]
    assert ordered[2:] == ["foreign-1", None, items[3], "foreign-2"]


async def test_two_clients_ids_sort_in_call_order(
    controller: Running, pool: str, amqp_url: str
) -> None:
    async with Client(amqp_url, name="ids a") as a, Client(amqp_url, name="ids b") as b:
        seen: list[str] = []
        for i in range(20):
            client = a if i % 2 else b
            response = await client.call(pool, "ids", f"{i}".encode(), timeout=60)
            assert response.ok and response.request_id is not None
            seen.append(response.request_id)
    assert len(set(seen)) == len(seen)
    assert sorted(seen, key=lambda i: (wire.uuid7_time_ms(i), i)) == seen


async def test_poison_list_is_ordered_by_request_id(
    make_controller: Callable[..., Awaitable[Running]], pool: str, amqp_url: str
) -> None:
    await make_controller(pool)
    names = wire.PoolNames(pool)
    first, second, third = (str(uuid6.uuid7()) for _ in range(3))
    # Parked out of order, with a foreign id and hostile ones among them (a `message_id` is
    # at most 255 bytes on the wire).
    parked = [third, "foreign", first, "x" * 255, second, "bad\x00id"]
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        for i, message_id in enumerate(parked):
            await channel.default_exchange.publish(
                aio_pika.Message(f"{i}".encode(), message_id=message_id),
                routing_key=names.poison_queue,
            )
    finally:
        await connection.close()
    entries = await poison.list_entries(amqp_url, pool)
    assert [e.request_id for e in entries] == [first, second, third, "foreign", None, None]
    # Browsing gives every message back to the queue.
    assert len(await poison.list_entries(amqp_url, pool)) == len(parked)
