"""The requests in flight, and what becomes of them when the worker stops.

aiormq runs each delivery in a task of its own: `InFlight` keeps those tasks, so that a stop
can give them `drain_timeout` to finish (`drain`), or, for a worker cut off from its broker,
end them at once (`abandon`). Either way what was not acked is redelivered by the broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import aio_pika.abc

logger = logging.getLogger(__name__)


class InFlight:
    """The consumer's callback (`on_message`), keeping each delivery's task while it runs."""

    def __init__(
        self, handle: Callable[[aio_pika.abc.AbstractIncomingMessage], Awaitable[None]]
    ) -> None:
        self._handle = handle
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    async def on_message(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        # aiormq runs each delivery in a task of its own: track it for draining.
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handle(message)
        finally:
            self._tasks.discard(task)

    async def drain(self, timeout: float) -> None:
        """Give the requests in flight `timeout` seconds to finish; cancel what is left (the
        broker redelivers it)."""
        if not self._tasks:
            return
        done, pending = await asyncio.wait(self._tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            logger.warning(
                "drain timeout: %d request(s) abandoned, the broker will redeliver them",
                len(pending),
            )
            await asyncio.wait(pending, timeout=1)

    def abandon(self) -> None:
        """Stop the requests in flight without their answers: a worker cut off from its broker
        can neither reply nor ack (acks belong to the channel the broker is losing), and the
        broker requeues whatever that channel held once it drops the connection (its
        heartbeat, or the socket closed as the process exits), for another worker to answer."""
        if self._tasks:
            logger.warning(
                "%d request(s) in flight abandoned: the broker will redeliver them",
                len(self._tasks),
            )
        for task in self._tasks:
            task.cancel()
