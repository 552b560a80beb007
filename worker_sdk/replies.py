"""Replies: what a worker sends back to a caller, and on which channel.

Every answer of a worker (a result, an error document, a progress message) goes to the
request's `reply_to` with `x-status` and the request's correlation id; error bodies are the
one error document every sender uses (`wire.error_document`), naming this worker. Kept apart
from the consume loop (`worker`) because how a reply is published (a confirmed channel for
named reply queues, an unconfirmed one for direct reply-to) is a concern of its own.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

import aio_pika.abc
import aiormq

from osrdyne import wire
from osrdyne.wire import DIRECT_REPLY_TO, Header, reply_delivery_mode
from worker_sdk import tracing
from worker_sdk.settings import WorkerSettings


class Replier:
    """Builds a worker's error bodies and publishes its replies."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        confirmed: wire.RenewingChannel,
        fast: aio_pika.abc.AbstractChannel,
    ) -> None:
        self._settings = settings
        self._confirmed = confirmed
        self._fast = fast

    def error_body(
        self, status: str, message: str, *, path: str | None = None, details: Any = None
    ) -> bytes:
        """The error body every sender uses (`wire.error_document`), naming this worker."""
        s = self._settings
        return wire.error_body(
            status=status,
            error=message,
            pool=s.pool,
            key=s.key,
            path=path,
            worker_id=s.id,
            details=details,
        )

    async def send(
        self,
        message: aio_pika.abc.AbstractIncomingMessage,
        body: bytes,
        *,
        status: str,
        content_type: str | None = "application/json",
        interim: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish `body` to the request's `reply_to` (nothing when it has none); `interim`
        marks a progress message (`x-non-terminating`); `extra`: the handler's own headers
        (the protocol's win)."""
        if not message.reply_to:
            return
        headers: dict[str, Any] = {**extra} if extra else {}
        headers[Header.STATUS] = status
        if interim:
            headers[Header.NON_TERMINATING] = True
        tracing.inject(headers)  # the handler's span, when tracing is on
        properties = aiormq.spec.Basic.Properties(
            headers=headers,
            correlation_id=message.correlation_id,
            content_type=content_type,
            delivery_mode=reply_delivery_mode(message.reply_to),
        )
        # A confirm means nothing for a direct reply-to address (the broker hands the reply
        # to the caller's channel or drops it): those go on a channel without confirms;
        # replies to named queues are confirmed before the request is acked.
        reply_to = message.reply_to

        async def publish(on: aio_pika.abc.AbstractChannel) -> None:
            channel = await on.get_underlay_channel()
            # Published on the aiormq channel: aio-pika's Message costs ~30 µs and adds
            # nothing. mandatory=False: RabbitMQ 3.10 bounces mandatory replies to direct
            # reply-to.
            await channel.basic_publish(
                body, routing_key=reply_to, properties=properties, mandatory=False
            )

        if reply_to.startswith(DIRECT_REPLY_TO):
            await publish(self._fast)
        else:
            # Refused while the reply queue elects a leader: published again, the same reply
            # (its correlation id), until the caller's deadline.
            deadline = wire.deadline_from_header((message.headers or {}).get(Header.DEADLINE))
            await self._confirmed.publish(publish, deadline=deadline)


def traceback_tail(exc: BaseException) -> list[str]:
    """The last lines of `exc`'s traceback, for the `details` of an error body."""
    return [line.rstrip() for line in traceback.format_exception(exc)[-4:]]
