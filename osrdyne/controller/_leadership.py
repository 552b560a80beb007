"""Leadership: only one controller of a pool acts at a time.

The leader is the controller whose connection holds the pool's exclusive `P-leader` queue.
Standbys try to declare it every `retry` seconds and fail with RESOURCE_LOCKED while the leader
lives; when the leader's connection dies, the broker deletes the queue and the next standby's
attempt succeeds. Leadership ends with the connection that holds it, so a leader that lost its
connection cannot go on acting (no split brain through the broker).

A controller names its connection `osrdyne <pool> <instance>`, followed by ` api=<url>` when
its HTTP API is known, so a standby can say who leads: the broker's management API names the
connection that owns the `P-leader` queue (`find_leader`), and that connection's name says
the rest.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aio_pika.abc
import aiormq.exceptions

from osrdyne.controller._management import ManagementApi
from osrdyne.controller._status import Leader
from osrdyne.wire import PoolNames

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


def connection_name(pool: str, instance: str, api_url: str | None) -> str:
    """The name a controller's connection shows to the broker (and to `find_leader`)."""
    name = f"osrdyne {pool} {instance}"
    return f"{name} api={api_url}" if api_url else name


async def find_leader(api: ManagementApi, names: PoolNames) -> Leader | None:
    """Who leads the pool, as the broker says (None: nobody, or the broker has not said yet;
    it fills in a queue's owner a few seconds after the queue is declared)."""
    queue = await api.queue(names.leader_queue)
    owner: Any = (queue or {}).get("owner_pid_details")
    if not isinstance(owner, dict) or not isinstance(owner.get("name"), str):
        return None
    connection = await api.connection(owner["name"])
    properties = (connection or {}).get("client_properties") or {}
    name = properties.get("connection_name") if isinstance(properties, dict) else None
    prefix = f"osrdyne {names.pool} "
    if not isinstance(name, str) or not name.startswith(prefix):
        return None
    instance, _, api_url = name[len(prefix) :].partition(" api=")
    return Leader(instance=instance, api=api_url or None)
