"""Answers the controller gives on a worker's behalf, and copies of requests.

Errors carry an `x-status` and the JSON error document every sender uses
(`wire.error_document`), sent to the request's `reply_to` with its `correlation_id`; copies of
requests (orphans forwarded, poison kept) preserve every property."""

from __future__ import annotations

import logging
from typing import Any

import aio_pika
import aio_pika.abc

from osrdyne import wire
from osrdyne.wire import Header

logger = logging.getLogger(__name__)


async def answer_error(
    channel: aio_pika.abc.AbstractChannel,
    request: aio_pika.abc.AbstractIncomingMessage,
    *,
    status: str,
    document: dict[str, Any],
) -> bool:
    """Answer `request` with an error; False when it has no `reply_to` (nobody to tell).

    `document` gives `error`, `pool` and `key`; its other fields (but a `reason` that only
    repeats `status`) go to `details`: the body has the one shape of every error answer
    (`wire.error_document`), whoever sends it.
    """
    if not request.reply_to:
        return False
    given = dict(document)
    error, pool, key = given.pop("error", status), given.pop("pool", None), given.pop("key", None)
    if given.get("reason") == status:
        del given["reason"]
    body = wire.error_body(
        status=status,
        error=str(error),
        pool=pool,
        key=key,
        path=wire.text((request.headers or {}).get(Header.RPC_PATH)),
        details=given or None,
    )
    reply = aio_pika.Message(
        body,
        # The request's trace context goes back with the answer (docs/observability.md).
        headers={Header.STATUS: status, **wire.trace_headers(request.headers)},
        correlation_id=request.correlation_id,
        content_type="application/json",
        delivery_mode=wire.reply_delivery_mode(request.reply_to),
    )
    # mandatory=False: RabbitMQ 3.10 bounces mandatory replies to direct reply-to addresses.
    await channel.default_exchange.publish(reply, routing_key=request.reply_to, mandatory=False)
    return True


def copy_of(message: aio_pika.abc.AbstractIncomingMessage) -> aio_pika.Message:
    """The same request, every property kept (but `user_id`, which RabbitMQ checks against the
    publishing connection's user)."""
    return aio_pika.Message(
        message.body,
        # Re-encodable as they came (a header that is not UTF-8 decodes to bytes, which the
        # encoder refuses): a request can always be forwarded or parked.
        headers=wire.encodable(dict(message.headers or {})),
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        delivery_mode=message.delivery_mode,
        priority=message.priority,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        expiration=message.expiration,
        message_id=message.message_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
    )
