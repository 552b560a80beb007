"""The client's answers: each reply handed to the call waiting for it, by correlation id.

Direct reply-to (the default) is consumed on each publishing channel, on the aiormq channel
under it (one task per reply: aio-pika's consumer would add a second task and an
`IncomingMessage` on the client's hot path); a named durable reply queue (`reply_queue`) is
consumed with aio-pika and acked. A reply for no call (or for one already answered) is late
and counted. A direct reply is at most once: a channel or a connection lost fails the calls
waiting on it (`ConnectionLost`), which the client may publish again (`resend`).
"""

from __future__ import annotations

from typing import Any

import aio_pika.abc
import aiormq.abc

from osrdyne import exceptions
from osrdyne.client._call import Call
from osrdyne.client._response import Response
from osrdyne.wire import DIRECT_REPLY_TO


class Replies:
    """The calls in flight by correlation id, and the consumers of their replies."""

    def __init__(self) -> None:
        #: The calls waiting for an answer (a `Call` adds and removes itself).
        self.calls: dict[str, Call] = {}
        #: Replies that arrived after their call had ended (timed out or cancelled).
        self.late = 0

    async def consume_direct(self, on: aio_pika.abc.AbstractChannel) -> None:
        """Consume the direct replies of the requests published on `on` (each channel
        consumes its own: they come back on the channel a request went out on)."""
        # On the underlying aiormq channel: one task per reply, where aio-pika's consumer adds
        # a second task and an IncomingMessage (the client's hot path).
        channel = await on.get_underlay_channel()
        await channel.basic_consume(DIRECT_REPLY_TO, self._on_direct_reply, no_ack=True)

    async def _on_direct_reply(self, message: aiormq.abc.DeliveredMessage) -> None:
        properties = message.header.properties
        self._deliver(message.body, properties.headers, properties.correlation_id)

    async def on_durable_reply(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        """A reply from the named reply queue (`reply_queue`), acked once handed over."""
        self._deliver(message.body, message.headers, message.correlation_id)
        await message.ack()

    def _deliver(
        self, body: bytes, headers: dict[str, Any] | None, correlation_id: str | None
    ) -> None:
        call = self.calls.get(correlation_id or "")
        if call is None or call.answered:
            self.late += 1
            return
        call.deliver(Response.from_message(body, headers, correlation_id, call.request_id))

    def connection_lost(self, *_: Any) -> None:
        """The connection was lost: the direct replies of every call will never come."""
        self.fail_all(exceptions.ConnectionLost("connection to the broker lost"))

    def fail_all(self, error: Exception) -> None:
        for call in self.calls.values():
            call.fail(error)

    def channel_lost(self, channel: aio_pika.abc.AbstractChannel) -> None:
        """The broker closed a channel (or its connection was lost): the direct replies of
        the calls waiting on it will never come."""
        for call in self.calls.values():
            if call.channel is channel:
                call.fail(exceptions.ConnectionLost("channel closed"))
