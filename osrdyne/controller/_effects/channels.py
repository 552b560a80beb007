"""A small pool of AMQP channels that replaces the ones the broker closed.

Many broker operations end a channel when they fail (a passive declare of a missing queue, a
precondition). Control loops run operations concurrently on a few channels and get a fresh one
whenever the previous one was closed, instead of letting one failure stall the loop.

The most recently returned channel is handed out first: as many channels are open as
operations ran at once (not `size` once `size` operations ran one after another), and the
first new keys after a start find the channel the one before used instead of each opening
one more (a round trip on a new key's path).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aio_pika.abc


class ChannelPool:
    def __init__(self, connection: aio_pika.abc.AbstractConnection, *, size: int) -> None:
        self._connection = connection
        # Last in, first out: open channels are returned on top of the slots not used yet.
        self._idle: asyncio.LifoQueue[aio_pika.abc.AbstractChannel | None] = asyncio.LifoQueue()
        for _ in range(size):
            self._idle.put_nowait(None)
        self._closing: set[asyncio.Future[None]] = set()

    @contextlib.asynccontextmanager
    async def channel(self) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
        channel = await self._idle.get()
        try:
            if channel is None or channel.is_closed:
                channel = await self._connection.channel()
            yield channel
        except (TimeoutError, asyncio.CancelledError):
            # Abandoned in the middle of an operation: an answer may still come. Never hand it
            # out again; close it in the background (aiormq already does when an RPC of it
            # was cancelled).
            if channel is not None and not channel.is_closed:
                closing = asyncio.ensure_future(channel.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            channel = None
            raise
        finally:
            self._idle.put_nowait(
                channel if channel is not None and not channel.is_closed else None
            )

    async def close(self) -> None:
        await asyncio.gather(*self._closing, return_exceptions=True)
        while not self._idle.empty():
            channel = self._idle.get_nowait()
            if channel is not None and not channel.is_closed:
                with contextlib.suppress(Exception):
                    await channel.close()
