"""`wire.RenewingChannel` on the real broker: a refused publish is tried again on a fresh
channel, then after growing pauses until its deadline; a refusal that lasts past the deadline
reaches the caller; one that passes (the queue has room again) ends in the message taken, the
same message; a retired channel is closed only once nobody holds it.

A queue with `x-max-length: 0` and `x-overflow: reject-publish` refuses every publish with a
negative confirm, whatever the channel: the refusal the queue explains. (The refusal a stale
channel causes after quorum-queue leaders moved needs a cluster losing nodes:
tests/cluster/test_repeated_faults.py.)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import aio_pika
import aio_pika.abc
import aiormq.exceptions
import pytest

from osrdyne import wire
from tests.waiting import eventually


@pytest.fixture
async def full_queue(amqp_url: str) -> AsyncIterator[tuple[aio_pika.abc.AbstractConnection, str]]:
    connection = await aio_pika.connect(amqp_url)
    name = f"t-renewing-{uuid.uuid4().hex[:6]}"
    channel = await connection.channel()
    await channel.declare_queue(
        name, arguments={"x-max-length": 0, "x-overflow": "reject-publish"}, auto_delete=False
    )
    try:
        yield connection, name
    finally:
        await channel.queue_delete(name)
        await connection.close()


async def test_a_refusal_that_lasts_is_retried_until_the_deadline_then_raised(
    full_queue: tuple[aio_pika.abc.AbstractConnection, str],
) -> None:
    connection, name = full_queue
    publisher = wire.RenewingChannel(connection, name="test", min_age=0)
    first = await publisher.channel()
    tries = 0

    async def send(channel: aio_pika.abc.AbstractChannel) -> object:
        nonlocal tries
        tries += 1
        return await channel.default_exchange.publish(aio_pika.Message(b"x"), routing_key=name)

    with pytest.raises(aiormq.exceptions.DeliveryError) as refused:
        await publisher.publish(send, deadline=time.monotonic() + 5.0)
    assert wire.is_refusal(refused.value)
    # Every try was refused for real, the first on the first channel, the rest on fresh ones.
    assert tries >= 2 and publisher.retries == tries - 1
    assert publisher.renewals >= 1 and publisher.current is not first
    await eventually(lambda: first.is_closed, what="the retired channel closed")
    await publisher.close()


async def test_a_refusal_that_passes_ends_in_the_same_message_taken(amqp_url: str) -> None:
    """A queue at its `x-max-length` with `reject-publish` nacks for real until a consumer
    takes its message: the publish, tried again meanwhile, is then taken, once, with its own
    message id."""
    connection = await aio_pika.connect(amqp_url)
    name = f"t-renewing-{uuid.uuid4().hex[:6]}"
    channel = await connection.channel()
    queue = await channel.declare_queue(
        name, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}, auto_delete=False
    )
    try:
        await channel.default_exchange.publish(
            aio_pika.Message(b"first", message_id="first"), routing_key=name
        )
        publisher = wire.RenewingChannel(connection, name="test")

        async def send(on: aio_pika.abc.AbstractChannel) -> object:
            return await on.default_exchange.publish(
                aio_pika.Message(b"second", message_id="second"), routing_key=name
            )

        publishing = asyncio.create_task(publisher.publish(send))
        await eventually(lambda: publisher.retries >= 2, what="the publish refused twice")
        assert not publishing.done()
        taken = await queue.get(no_ack=True)
        assert taken is not None and taken.message_id == "first"
        await publishing
        second = await queue.get(no_ack=True)
        assert second is not None and second.message_id == "second"
        assert await queue.get(fail=False) is None  # taken once
        await publisher.close()
    finally:
        await channel.queue_delete(name)
        await connection.close()


async def test_a_young_channel_is_not_renewed(
    full_queue: tuple[aio_pika.abc.AbstractConnection, str],
) -> None:
    """A refusal on a channel opened less than `min_age` ago is not the channel's: tried
    again on the same channel, no new one (a refusal streak does not churn channels)."""
    connection, name = full_queue
    publisher = wire.RenewingChannel(connection, name="test", min_age=3600)
    first = await publisher.channel()

    async def send(channel: aio_pika.abc.AbstractChannel) -> object:
        return await channel.default_exchange.publish(aio_pika.Message(b"x"), routing_key=name)

    # Long enough for a retry on a loaded machine (a nack can take most of half a second).
    with pytest.raises(aiormq.exceptions.DeliveryError):
        await publisher.publish(send, deadline=time.monotonic() + 3)
    assert publisher.retries >= 1
    assert publisher.renewals == 0
    assert publisher.current is first and not first.is_closed
    await publisher.close()


async def test_a_retired_channel_stays_open_while_it_is_held(
    full_queue: tuple[aio_pika.abc.AbstractConnection, str],
) -> None:
    """The client's calls hold the channel their request went out on (direct replies come
    back there): a renewal retires it, and it is closed when the last holder lets go."""
    connection, _ = full_queue
    publisher = wire.RenewingChannel(connection, name="test", min_age=0)
    held = await publisher.acquire()
    fresh = await publisher.renew(held)
    assert fresh is not None and fresh is not held
    assert publisher.is_retired(held) and not held.is_closed
    # A second renewal asked for the same old channel gets the fresh one, not a third.
    assert await publisher.renew(held) is fresh
    publisher.release(held)
    await eventually(lambda: held.is_closed, what="the retired channel closed")
    assert not fresh.is_closed
    await publisher.close()
