"""The poison inventory: requests that reached the delivery limit, or that the controller could
not handle as they were sent, kept for inspection.

The dead-letter responder stores each request that reached the delivery limit in `P-poison`
with its properties, its death history (`x-death`) and an id header of ours; a consumer that
gives up on a message (`consumer`) parks it there too, with the reason. Operators list them,
replay one into the request exchange (after fixing the worker: with a fresh deadline, so it
runs instead of being answered `expired`), or drop one. Browsing takes messages without acking
them and closes the channel, so everything not replayed or dropped goes back to the queue
untouched. The queue is bounded by a policy (`queues.poison_max_length`, oldest dropped
first), so a flood of bad requests cannot fill the broker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import time
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aio_pika.abc
import aio_pika.exceptions

from osrdyne import wire
from osrdyne.controller._effects import replies
from osrdyne.controller._effects.poison_queue import (
    POISON_FROM,
    POISON_ID,
    POISON_KEY,
    POISON_REASON,
)
from osrdyne.exceptions import PoolNotFound
from osrdyne.wire import PoolNames

_DEATH_HEADERS = (
    "x-death",
    "x-first-death-reason",
    "x-first-death-queue",
    "x-first-death-exchange",
    "x-last-death-reason",
    "x-last-death-queue",
    "x-last-death-exchange",
    POISON_ID,
    POISON_REASON,
    POISON_FROM,
    POISON_KEY,
)


@dataclasses.dataclass(frozen=True)
class PoisonEntry:
    id: str
    key: str
    reason: str
    correlation_id: str | None
    reply_to: str | None
    deaths: int | None
    size: int
    headers: dict[str, Any]
    #: The request's id (`message_id`: UUIDv7 from osrdyne's client, sorts by time).
    request_id: str | None = None

    @classmethod
    def of(cls, message: aio_pika.abc.AbstractIncomingMessage) -> PoisonEntry:
        headers = dict(message.headers or {})
        death = wire.Death.of(headers, message.routing_key)
        return cls(
            id=wire.text(headers.get(POISON_ID)) or message.message_id or "?",
            key=wire.text(headers.get(POISON_KEY)) or death.key,
            reason=wire.text(headers.get(POISON_REASON)) or death.reason,
            correlation_id=message.correlation_id,
            reply_to=message.reply_to,
            deaths=death.count,
            size=len(message.body),
            headers=headers,
            request_id=wire.request_id(message.message_id),
        )


@contextlib.asynccontextmanager
async def _browse(
    url: wire.Urls, pool: str, limit: int | None = None
) -> AsyncIterator[tuple[aio_pika.abc.AbstractChannel, list[aio_pika.abc.AbstractIncomingMessage]]]:
    """The poison messages (the oldest `limit` of them), taken unacked; whatever is not acked
    returns to the queue."""
    connection = await wire.connect(url, name=f"osrdyne poison {pool}")
    try:
        channel = await connection.channel(publisher_confirms=True)
        name = PoolNames(pool).poison_queue
        try:
            queue = await channel.declare_queue(name, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity as exc:
            raise PoolNotFound(
                f"pool {pool!r} has no poison queue {name!r} (a controller of the pool "
                "declares it when it starts)"
            ) from exc
        messages: list[aio_pika.abc.AbstractIncomingMessage] = []
        while limit is None or len(messages) < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            messages.append(message)
        yield channel, messages
    finally:
        await connection.close()  # unacked messages are requeued


async def list_entries(url: wire.Urls, pool: str, *, limit: int | None = None) -> list[PoisonEntry]:
    """The poison entries (at most the `limit` oldest when given), ordered by request id:
    the time each request was made (`wire.order`); entries without a UUIDv7 id last, in
    queue order."""
    async with _browse(url, pool, limit) as (_, messages):
        return wire.order((PoisonEntry.of(m) for m in messages), lambda e: e.request_id)


@dataclasses.dataclass(frozen=True)
class Replayed:
    """What `replay` published."""

    entry: PoisonEntry
    #: The deadline (`x-deadline`) the replayed request carries, epoch seconds; None: none.
    deadline: float | None
    #: The time budget it was given from now (seconds), None when its deadline was kept or
    #: it has none.
    budget: float | None
    #: The original deadline was kept (`keep_deadline`).
    kept: bool


def original_budget(message: aio_pika.abc.AbstractIncomingMessage) -> float | None:
    """The time the caller first gave the request, in seconds: its `expiration` (osrdyne's
    client sets it to the call's timeout), else its `x-deadline` minus its publish time."""
    expiration = message.expiration  # seconds (aio-pika decodes the milliseconds)
    if isinstance(expiration, int | float) and expiration > 0:
        return float(expiration)
    deadline = _deadline_of(message.headers)
    published = message.timestamp
    if deadline is not None and isinstance(published, datetime.datetime):
        budget = deadline - published.timestamp()
        return budget if budget > 0 else None
    return None


def _deadline_of(headers: dict[str, Any] | None) -> float | None:
    value = (headers or {}).get(wire.Header.DEADLINE)
    try:
        return float(wire.text(value) or "") / 1000 if value is not None else None
    except ValueError:
        return None


async def replay(
    url: wire.Urls,
    pool: str,
    entry_id: str,
    *,
    keep_deadline: bool = False,
    budget: float | None = None,
) -> Replayed | None:
    """Publish the entry back to the pool's request exchange (death history removed).

    The request gets a fresh deadline: `budget` seconds from now, or by default the time its
    caller first gave it (`original_budget`); a request whose budget cannot be known is
    replayed without a deadline. With `keep_deadline`, its deadline is left as it was (a
    request past it is answered `expired` without running).
    """
    async with _browse(url, pool) as (channel, messages):
        for message in messages:
            entry = PoisonEntry.of(message)
            if entry.id != entry_id:
                continue
            copy = replies.copy_of(message)
            headers = {k: v for k, v in (copy.headers or {}).items() if k not in _DEATH_HEADERS}
            if keep_deadline:
                given, deadline = None, _deadline_of(headers)
            else:
                given = budget if budget is not None else original_budget(message)
                copy.timestamp = datetime.datetime.now(datetime.UTC)
                deadline = None if given is None else time.time() + given
                if deadline is None:
                    headers.pop(wire.Header.DEADLINE, None)
                    copy.expiration = None
                else:
                    headers[wire.Header.DEADLINE] = int(deadline * 1000)
                    copy.expiration = given if copy.expiration is not None else None
            copy.headers = headers
            exchange = await channel.get_exchange(PoolNames(pool).request_exchange, ensure=False)
            await exchange.publish(copy, routing_key=entry.key, mandatory=True)
            await message.ack()
            return Replayed(entry=entry, deadline=deadline, budget=given, kept=keep_deadline)
    return None


async def drop(url: wire.Urls, pool: str, entry_id: str) -> PoisonEntry | None:
    async with _browse(url, pool) as (_, messages):
        for message in messages:
            entry = PoisonEntry.of(message)
            if entry.id == entry_id:
                await message.ack()
                return entry
    return None
