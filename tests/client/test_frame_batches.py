"""Frames queued at once leave in one socket write (osrdyne/wire/_aiormq.py): the broker gets
the same bytes in the same order, and every publisher hears "written" and its confirm.

Real broker, one connection, publishes from many tasks on several channels at once (the
shape of a controller's burst), large bodies (several frames each) among them.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import aio_pika
import pytest
from pamqp.commands import Basic

from osrdyne.wire import _aiormq
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

CHANNELS = 4
PER_CHANNEL = 100


async def test_batched_frames_arrive_whole_and_in_order(
    amqp_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[int] = []
    joined = _aiormq._joined

    def counted(batch: list[object]) -> object:
        batches.append(len(batch))
        return joined(batch)  # type: ignore[arg-type]

    monkeypatch.setattr(_aiormq, "_joined", counted)
    name = f"t-batches-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(amqp_url)
    setup = await connection.channel()
    queue = await setup.declare_queue(name, auto_delete=False)
    try:
        channels = [await connection.channel(publisher_confirms=True) for _ in range(CHANNELS)]
        # Every tenth body is 300 KB: more than one frame (frame_max is 128 KB).
        bodies = {
            (c, i): os.urandom(300_000) if i % 10 == 0 else f"{c}:{i}".encode()
            for c in range(CHANNELS)
            for i in range(PER_CHANNEL)
        }

        async def publish(c: int) -> None:
            exchange = channels[c].default_exchange
            sends = [
                exchange.publish(
                    aio_pika.Message(bodies[c, i], headers={"c": c, "i": i}), routing_key=name
                )
                for i in range(PER_CHANNEL)
            ]
            # All at once: confirmed, each in its turn.
            for confirm in await asyncio.gather(*sends):
                assert isinstance(confirm, Basic.Ack)

        await asyncio.gather(*(publish(c) for c in range(CHANNELS)))
        received: list[aio_pika.abc.AbstractIncomingMessage] = []

        async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received.append(message)

        await queue.consume(take, no_ack=True)
        await eventually(lambda: len(received) == CHANNELS * PER_CHANNEL, what="every message")
        order: dict[int, list[int]] = {c: [] for c in range(CHANNELS)}
        for message in received:
            c, i = int(message.headers["c"]), int(message.headers["i"])  # type: ignore[arg-type]
            assert message.body == bodies[c, i]
            order[c].append(i)
        # A channel's publishes keep their order (AMQP's guarantee, and the writer's).
        assert all(order[c] == list(range(PER_CHANNEL)) for c in range(CHANNELS))
        # Frames did leave together (the change is in effect).
        assert batches and max(batches) > 1
    finally:
        await queue.delete(if_unused=False, if_empty=False)  # also when an assertion failed
        await connection.close()
    # The connection's close (a frame that ends its batch) was written and answered.
    assert connection.is_closed
