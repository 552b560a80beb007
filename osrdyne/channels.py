"""A small pool of AMQP channels that replaces the ones the broker closed.

Many broker operations end a channel when they fail (a passive declare of a missing queue, a
precondition). Control loops run operations concurrently on a few channels and get a fresh one
whenever the previous one was closed, instead of letting one failure stall the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aio_pika.abc


class ChannelPool:
    def __init__(self, connection: aio_pika.abc.AbstractConnection, *, size: int) -> None:
        self._connection = connection
        self._idle: asyncio.Queue[aio_pika.abc.AbstractChannel | None] = asyncio.Queue()
        for _ in range(size):
            self._idle.put_nowait(None)

    @contextlib.asynccontextmanager
    async def channel(self) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
        channel = await self._idle.get()
        try:
            if channel is None or channel.is_closed:
                channel = await self._connection.channel()
            yield channel
        finally:
            self._idle.put_nowait(
                channel if channel is not None and not channel.is_closed else None
            )

    async def close(self) -> None:
        while not self._idle.empty():
            channel = self._idle.get_nowait()
            if channel is not None and not channel.is_closed:
                with contextlib.suppress(Exception):
                    await channel.close()
