"""A publish the broker never answers is published again on a fresh channel, within bounds.

A channel that published to a quorum queue before the queue's Raft member went down holds
its next publish to that queue with no confirm and no refusal, for as long as it lives, while
a fresh channel is refused at once (seen in CI: an orphan forwarded after a broker SIGKILL
stayed unconfirmed for over a minute, its request unanswered). Here the member is stopped for
real on the private node (`ra:stop_server`), as in `test_queue_member_down`.

Every publisher of osrdyne goes through `wire.RenewingChannel.publish` (the controller's
forwarded orphans and answers, the workers' replies and activity): a publish not answered
within `confirm_timeout` seconds is taken as a refusal, the channel renewed, and the message
published again until its deadline. Before this, the publish below waited forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import aio_pika
import aio_pika.abc
import pytest

from osrdyne import wire
from tests.faults.rabbit_node import NodeError, RabbitNode

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def quorum_queue(rabbit_node: RabbitNode) -> AsyncIterator[str]:
    name = f"t-unconfirmed-{uuid.uuid4().hex[:8]}"
    async with await aio_pika.connect(rabbit_node.amqp_url) as connection:
        channel = await connection.channel()
        await channel.declare_queue(name, durable=True, arguments={"x-queue-type": "quorum"})
    try:
        yield name
    finally:
        with contextlib.suppress(NodeError):
            rabbit_node.queue_member(name, "restart_server")  # if a failed test left it down
        async with await aio_pika.connect(rabbit_node.amqp_url) as connection:
            channel = await connection.channel()
            await channel.queue_delete(name)


def _sender(queue: str, body: bytes) -> Callable[[aio_pika.abc.AbstractChannel], Awaitable[None]]:
    message = aio_pika.Message(body, message_id=uuid.uuid4().hex)

    async def send(channel: aio_pika.abc.AbstractChannel) -> None:
        await channel.default_exchange.publish(message, routing_key=queue)

    return send


async def _messages(node: RabbitNode, queue: str) -> int:
    async with await aio_pika.connect(node.amqp_url) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)


async def test_a_publish_never_answered_is_published_again_on_a_fresh_channel(
    rabbit_node: RabbitNode, quorum_queue: str
) -> None:
    node, queue = rabbit_node, quorum_queue
    async with await aio_pika.connect(node.amqp_url) as connection:
        publisher = wire.RenewingChannel(
            connection, name="unconfirmed test", min_age=0, confirm_timeout=1.0
        )
        await publisher.publish(_sender(queue, b"before"))  # the channel knows the queue
        stale = publisher.current
        node.queue_member(queue, "stop_server")

        # The member stays down: the publish is not held forever, it ends at its deadline
        # with the last refusal (the stale channel never answers; fresh ones are refused).
        with pytest.raises(Exception) as raised:
            await asyncio.wait_for(
                publisher.publish(_sender(queue, b"lost"), deadline=time.monotonic() + 4),
                timeout=60,  # the bug this tests: without the bound, this wait ends it
            )
        # A hung publish ends at the 60 s guard with a plain TimeoutError: not transient.
        assert wire.is_transient(raised.value), repr(raised.value)
        assert publisher.renewals >= 1 and publisher.current is not stale

        # The member comes back while a publish is being tried again: it is taken.
        renewals = publisher.renewals
        publish = asyncio.create_task(
            publisher.publish(_sender(queue, b"kept"), deadline=time.monotonic() + 60)
        )
        await asyncio.sleep(2)  # let it be refused or left unanswered at least once
        assert not publish.done()
        node.queue_member(queue, "restart_server")
        await asyncio.wait_for(publish, timeout=60)
        assert publisher.renewals >= renewals

    # "before" and "kept" are in the queue (and "lost" too when a stale channel's resend
    # reached it after the member came back: at least once, never less).
    assert await _messages(node, queue) >= 2
