"""Leadership: only one controller of a pool acts at a time.

The leader is the controller whose connection holds the pool's exclusive `P-leader` queue.
Standbys try to declare it every `retry` seconds and fail with RESOURCE_LOCKED while the leader
lives; when the leader's connection dies, the broker deletes the queue and the next standby's
attempt succeeds. Leadership ends with the connection that holds it, so a leader that lost its
connection cannot go on acting (no split brain through the broker).
"""

from __future__ import annotations

import asyncio
import logging

import aio_pika.abc
import aiormq.exceptions

from osrdyne.protocol import PoolNames

logger = logging.getLogger(__name__)


async def acquire(
    connection: aio_pika.abc.AbstractConnection, names: PoolNames, *, retry: float = 1.0
) -> aio_pika.abc.AbstractChannel:
    """Wait until this connection leads the pool; return the channel holding the lock."""
    announced = False
    while True:
        channel = await connection.channel()
        try:
            await channel.declare_queue(names.leader_queue, exclusive=True, auto_delete=True)
        except aiormq.exceptions.ChannelLockedResource:
            if not announced:
                logger.info("another controller leads pool %r: standing by", names.pool)
                announced = True
            await asyncio.sleep(retry)
            continue
        logger.info("leading pool %r", names.pool)
        return channel
