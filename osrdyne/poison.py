"""The poison inventory: requests that reached the delivery limit, kept for inspection.

The dead-letter responder stores each one in `P-poison` with its properties, its death history
(`x-death`) and an id header of ours. Operators list them, replay one into the request exchange
(after fixing the worker), or drop one. Browsing takes messages without acking them and closes
the channel, so everything not replayed or dropped goes back to the queue untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aio_pika.abc

from osrdyne import connections, deaths, replies
from osrdyne.protocol import PoolNames

#: Header carrying a poison entry's id (set when the request is moved to the poison queue).
POISON_ID = "x-osrdyne-poison-id"
_DEATH_HEADERS = (
    "x-death",
    "x-first-death-reason",
    "x-first-death-queue",
    "x-first-death-exchange",
    "x-last-death-reason",
    "x-last-death-queue",
    "x-last-death-exchange",
    POISON_ID,
)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclasses.dataclass(frozen=True)
class PoisonEntry:
    id: str
    key: str
    correlation_id: str | None
    reply_to: str | None
    deaths: int | None
    size: int
    headers: dict[str, Any]

    @classmethod
    def of(cls, message: aio_pika.abc.AbstractIncomingMessage) -> PoisonEntry:
        headers = dict(message.headers or {})
        death = deaths.Death.of(headers, message.routing_key)
        return cls(
            id=str(headers.get(POISON_ID) or message.message_id or "?"),
            key=death.key,
            correlation_id=message.correlation_id,
            reply_to=message.reply_to,
            deaths=death.count,
            size=len(message.body),
            headers=headers,
        )


@contextlib.asynccontextmanager
async def _browse(
    url: str, pool: str
) -> AsyncIterator[tuple[aio_pika.abc.AbstractChannel, list[aio_pika.abc.AbstractIncomingMessage]]]:
    """Every poison message, taken unacked; whatever is not acked returns to the queue."""
    connection = await connections.connect(url, name=f"osrdyne poison {pool}")
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.get_queue(PoolNames(pool).poison_queue, ensure=False)
        messages = []
        while (message := await queue.get(no_ack=False, fail=False)) is not None:
            messages.append(message)
        yield channel, messages
    finally:
        await connection.close()  # unacked messages are requeued


async def list_entries(url: str, pool: str) -> list[PoisonEntry]:
    async with _browse(url, pool) as (_, messages):
        return [PoisonEntry.of(m) for m in messages]


async def replay(url: str, pool: str, entry_id: str) -> PoisonEntry | None:
    """Publish the entry back to the pool's request exchange (death history removed)."""
    async with _browse(url, pool) as (channel, messages):
        for message in messages:
            entry = PoisonEntry.of(message)
            if entry.id != entry_id:
                continue
            copy = replies.copy_of(message)
            copy.headers = {
                k: v for k, v in (copy.headers or {}).items() if k not in _DEATH_HEADERS
            }
            exchange = await channel.get_exchange(PoolNames(pool).request_exchange, ensure=False)
            await exchange.publish(copy, routing_key=entry.key, mandatory=True)
            await message.ack()
            return entry
    return None


async def drop(url: str, pool: str, entry_id: str) -> PoisonEntry | None:
    async with _browse(url, pool) as (_, messages):
        for message in messages:
            entry = PoisonEntry.of(message)
            if entry.id == entry_id:
                await message.ack()
                return entry
    return None
