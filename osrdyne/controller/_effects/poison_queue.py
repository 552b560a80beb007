"""Parking a request in the pool's poison queue (`P-poison`): a copy of it, with headers
saying why, where it was taken from and the key it was sent with. The dead-letter responder
parks what reached the delivery limit; a consumer parks what it cannot handle as sent. The
operators' view of the queue (list, replay, drop) is `osrdyne.controller.poison`.
"""

from __future__ import annotations

import uuid

import aio_pika.abc

from osrdyne import wire
from osrdyne.controller._effects import replies
from osrdyne.wire import PoolNames

#: Header carrying a poison entry's id (set when the request is moved to the poison queue).
POISON_ID = "x-osrdyne-poison-id"
#: Why it was parked: `delivery_limit`, or what a consumer could not do with it.
POISON_REASON = "x-osrdyne-poison-reason"
#: The queue it was taken from.
POISON_FROM = "x-osrdyne-poison-from"
#: The routing key it was published with (the worker key), to replay it to.
POISON_KEY = "x-osrdyne-poison-key"


def new_id() -> str:
    return uuid.uuid4().hex[:12]


async def park(
    channel: aio_pika.abc.AbstractChannel,
    message: aio_pika.abc.AbstractIncomingMessage,
    *,
    names: PoolNames,
    reason: str,
    taken_from: str,
) -> str:
    """Keep `message` in the pool's poison queue with `reason`; return its poison id.

    `channel` should confirm publications: the caller acks the original only after this."""
    kept = replies.copy_of(message)
    entry_id = new_id()
    kept.headers = {
        **(kept.headers or {}),
        POISON_ID: entry_id,
        POISON_REASON: reason[:1000],
        POISON_FROM: taken_from,
        # As it came: a key that is not UTF-8 is kept as the bytes it was.
        POISON_KEY: wire.encodable((message.routing_key or "").encode("utf-8", "surrogateescape")),
    }
    await channel.default_exchange.publish(kept, routing_key=names.poison_queue, mandatory=True)
    return entry_id
