"""A standby worker's wait for its key (`WORKER_STANDBY_QUEUE`).

The worker waits, connected, on a queue of its own for the assignment naming its key and
request queue (docs/protocol.md), then lives the life of a worker started for that key.
"""

from __future__ import annotations

import asyncio
import logging

import aio_pika.abc

from osrdyne import wire
from worker_sdk import broker
from worker_sdk.settings import WorkerSettings

logger = logging.getLogger(__name__)


async def await_key(
    connection: aio_pika.abc.AbstractRobustConnection,
    settings: WorkerSettings,
    stop: asyncio.Event,
) -> asyncio.Future[None] | None:
    """Wait on the standby queue for the assignment naming this worker's key and request
    queue, and set them in `settings`: the closing of the standby channel (to await before
    the connection closes), or None when `stop` comes first. The queue is this worker's own
    (exclusive, auto-delete) and goes once the key is known (its channel closed), so a second
    assignment can never reach a worker that has one. An assignment that is not what the
    protocol says is refused and the wait goes on."""
    s = settings
    assert s.standby_queue is not None
    assigned: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    async def on_assignment(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        found = wire.read_assignment(message.body, pool=s.pool)
        if isinstance(found, str) or assigned.done():
            logger.warning("worker %s refuses an assignment: %s", s.id, found)
            await message.reject(requeue=False)
            return
        await message.ack()
        assigned.set_result(found)

    channel = await connection.channel()
    stopped: asyncio.Future[object] = asyncio.ensure_future(stop.wait())
    closing: asyncio.Future[None] | None = None
    try:
        await channel.set_qos(prefetch_count=1)
        queue = await channel.declare_queue(
            s.standby_queue,
            exclusive=True,
            auto_delete=True,
            arguments={"x-queue-type": "classic"},
        )
        await queue.consume(on_assignment)
        logger.info("worker %s of pool %r on standby", s.id, s.pool)
        await asyncio.wait([assigned, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not assigned.done():
            return None
    finally:
        # Closing the channel cancels the consumer, and the auto-delete queue goes. With a
        # key, off the key's path: the assignment is acked, and until the queue is gone a
        # second one would be refused (`assigned` is done).
        stopped.cancel()
        closing = asyncio.ensure_future(broker.close_quietly(channel))
        if not assigned.done():
            await closing
    found = assigned.result()
    assert isinstance(found, wire.Assignment)
    s.key, s.requests_queue = found
    logger.info("standby worker %s takes key %r", s.id, s.key)
    return closing
