"""What the controller's three consumers (orphans, dead letters, activity) share: consume a
queue with a prefetch, handle each message in its own tracked task, and on stop cancel the
consumer first and give in-flight messages a grace period (whatever is abandoned stays unacked
and is redelivered to the next leader)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aio_pika.abc

logger = logging.getLogger(__name__)


class QueueConsumer:
    #: Name of the queue consumed, for logs.
    queue_name: str = ""

    def __init__(self, channel: aio_pika.abc.AbstractChannel, *, prefetch: int) -> None:
        self.channel = channel
        self._prefetch = prefetch
        self._in_flight: set[asyncio.Task[None]] = set()
        self._queue: aio_pika.abc.AbstractQueue | None = None
        self._tag: str | None = None

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        await self.channel.set_qos(prefetch_count=self._prefetch)
        self._queue = await self.channel.get_queue(self.queue_name, ensure=False)
        self._tag = await self._queue.consume(self._on_message)

    async def _on_message(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        task = asyncio.create_task(self._guard(message), name=f"{self.queue_name} message")
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _guard(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        try:
            await self.handle(message)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(
                "could not handle a message of %s; it will be redelivered", self.queue_name
            )
            if not message.processed and not self.channel.is_closed:
                await _quietly(message.nack(requeue=True))

    async def stop(self, grace: float) -> None:
        if self._queue is not None and self._tag is not None and not self.channel.is_closed:
            await _quietly(self._queue.cancel(self._tag))
        if self._in_flight:
            _, pending = await asyncio.wait(self._in_flight, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                logger.warning(
                    "%s: %d message(s) abandoned at stop, to be redelivered",
                    self.queue_name,
                    len(pending),
                )


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        logger.debug("ignored failure during cleanup", exc_info=True)
