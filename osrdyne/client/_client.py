"""The client: call a keyed worker of a pool and wait for its answer.

    async with Client("amqp://guest:guest@127.0.0.1/") as client:
        response = await client.call("core", "infra=42", b"...", timeout=30)

The URL may be a list of a cluster's nodes (or one comma-separated string): the client uses
the first that answers and moves to the next when its node is lost.

Many calls share one connection and one channel consuming RabbitMQ's direct reply-to: each
call has a correlation id mapped to a future, removed when the call ends. A request the broker
refuses (a negative confirm, its channel closed by the broker) is published again, the same
message, on a fresh channel, which takes every new call from then on (`wire.RenewingChannel`:
after a queue leader moved, a channel can go on refusing what a fresh one takes), and again
after a growing pause until the call's deadline (a queue electing its leader refuses for a
second or so); calls waiting on the old channel get their replies there, and it is closed when
the last of them ends. Requests are
published with `mandatory` and publisher confirms; each carries its deadline (`x-deadline`)
and an `expiration`, so a request nobody picks up in time dies as `expired` and is answered,
and a worker that picks up a request whose caller gave up skips it. A reply arriving after
its call timed out is dropped and counted (`late_replies`). Direct reply-to is at most once:
if the connection drops, the answers of the calls waiting on it are gone. Such a call is
published again (`resend`, on by default), the same message (same request and correlation
ids), once the connection is back and while its deadline allows, and waits for the answer to
that one: a node lost under a call costs time, not the call, and its request may be handled
twice (at least once, as a redelivery; docs/protocol.md). A call that already had an interim
answer, a `stream()`, and every call with `resend=False` fail with `ConnectionLost` instead.
With `reply_queue`, answers go to a named durable queue: they wait there while the connection
is down and reach their calls once it is back (docs/protocol.md says when to use which).

`Client` wires the pieces: a call and its message (`_call`), publishing with confirms and
retries (`_publisher`), the answers handed to their calls by correlation id (`_replies`).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import time
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Any

import aio_pika.abc

from osrdyne import exceptions, wire
from osrdyne.client._call import Body, Call, Request, encode
from osrdyne.client._publisher import Publisher
from osrdyne.client._replies import Replies
from osrdyne.client._response import Response
from osrdyne.wire import DIRECT_REPLY_TO, Header

#: Pause before a request whose publish met a lost connection is published again, seconds.
_RESEND_PAUSE = 0.1


class Client:
    def __init__(
        self,
        url: wire.Urls = wire.DEFAULT_URL,
        *,
        confirm: bool = True,
        expire: bool = True,
        name: str | None = None,
        reply_queue: str | None = None,
        reply_queue_expires: float = 86400.0,
        max_body: int = 128 * 1024 * 1024,
        resend: bool = True,
    ) -> None:
        #: The broker's nodes: the first that answers is used; a lost node, the next one.
        self.urls = wire.split_urls(url)
        #: Wait for the broker's confirm of each request (off: faster, may lose requests).
        self.confirm = confirm
        #: Give each request an `expiration` equal to its timeout (queued time bounded).
        self.expire = expire
        self.name = name or "osrdyne client"
        #: A named durable queue for answers (survives reconnects); None: direct reply-to.
        self.reply_queue = reply_queue
        #: Seconds an unused reply queue lives on after its client is gone.
        self.reply_queue_expires = reply_queue_expires
        #: Largest request body accepted (RabbitMQ refuses messages over its max_message_size).
        self.max_body = max_body
        #: Publish again, within its deadline, a call whose direct reply was lost with its
        #: connection (the module's docstring).
        self.resend = resend
        #: Calls published again after their connection was lost under them.
        self.resends = 0
        self._closing = False
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        #: The channel requests are published on (and direct replies consumed on).
        self._channel: wire.RenewingChannel | None = None
        #: With `reply_queue`: the channel consuming it.
        self._reply_channel: aio_pika.abc.AbstractChannel | None = None
        #: The calls in flight, and the consumers of their replies.
        self._replies = Replies()
        #: Publishes the requests on `_channel`.
        self._publisher = Publisher()

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        self._closing = False  # a client closed and connected again resends again
        connection = await wire.connect_robust(self.urls, name=self.name)
        self._connection = connection
        direct = self.reply_queue is None
        if direct:
            # With `reply_queue`, answers wait in the durable queue: calls go on waiting.
            connection.close_callbacks.add(self._replies.connection_lost)
        connection.reconnect_callbacks.add(self._publisher.forget_exchanges)
        self._channel = wire.RenewingChannel(
            connection,
            name=self.name,
            publisher_confirms=self.confirm,
            # Direct replies come back on the channel a request went out on: each channel
            # consumes them, and its calls fail if it is lost.
            on_open=self._replies.consume_direct if direct else None,
            on_lost=self._replies.channel_lost if direct else None,
        )
        self._publisher.attach(connection, self._channel)
        await self._channel.channel()
        if not direct:
            self._reply_channel = await connection.channel()
            durable = await self._reply_channel.declare_queue(
                self.reply_queue,
                durable=True,
                arguments={"x-expires": int(self.reply_queue_expires * 1000)},
            )
            await durable.consume(self._replies.on_durable_reply)

    async def close(self) -> None:
        self._closing = True
        self._replies.fail_all(exceptions.ConnectionLost("client closed"))
        if self._channel is not None:
            await self._channel.close()
        if self._connection is not None:
            await self._connection.close()
        self._connection = self._channel = self._reply_channel = None
        self._publisher.detach()

    @property
    def late_replies(self) -> int:
        """Replies that arrived after their call had ended (timed out or cancelled)."""
        return self._replies.late

    @property
    def channel_renewals(self) -> int:
        """Channels replaced after the broker refused a request on them."""
        return self._channel.renewals if self._channel is not None else 0

    @property
    def publish_retries(self) -> int:
        """Requests published again after the broker refused them for a reason that passes."""
        return self._channel.retries if self._channel is not None else 0

    # -- calls ----------------------------------------------------------------------------

    async def call(
        self,
        pool: str,
        key: str,
        body: Body = None,
        *,
        timeout: float = 30.0,
        path: str | None = None,
        headers: dict[str, Any] | None = None,
        on_progress: Callable[[Response], Any] | None = None,
    ) -> Response:
        """Send a request to the worker group of `key` in `pool`; return its final answer.

        Interim messages (progress) go to `on_progress` when given. Raises `RequestTimeout`
        when no final answer arrives within `timeout` seconds.
        """
        async with self._new_call(pool, key, timeout, path) as call:
            request = self._request(call, body, headers)
            await self._send_resending(call, request)
            interims = 0
            while True:
                try:
                    response = await call.next()
                except exceptions.ConnectionLost:
                    if not self._may_resend(call) or interims:
                        raise
                    # Its direct reply was lost with the connection: the same request again,
                    # once the connection is back (the publisher waits for it), within the
                    # deadline.
                    call.error = None
                    self.resends += 1
                    await self._send_resending(call, request)
                    continue
                if not response.interim:
                    return response
                interims += 1
                if on_progress is not None:
                    on_progress(response)

    async def stream(
        self,
        pool: str,
        key: str,
        body: Body = None,
        *,
        timeout: float = 30.0,
        path: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> AsyncGenerator[Response, None]:
        """Send a request; yield its interim messages, then its final response."""
        async with self._new_call(pool, key, timeout, path) as call:
            request = self._request(call, body, headers)
            await self._publisher.send_in_time(call, request)
            while True:
                response = await call.next()
                yield response
                if not response.interim:
                    return

    def _may_resend(self, call: Call) -> bool:
        return self.resend and not self._closing and call.time_left > 0 and not call.answered

    async def _send_resending(self, call: Call, request: Request) -> None:
        """`Publisher.send_in_time`, published again when the connection is lost under the publish
        (`resend`), after a short pause, within the deadline."""
        while True:
            try:
                await self._publisher.send_in_time(call, request)
                return
            except exceptions.ConnectionLost:
                if not self._may_resend(call):
                    raise
                call.error = None
                await asyncio.sleep(min(_RESEND_PAUSE, max(0.0, call.time_left)))

    def _new_call(self, pool: str, key: str, timeout: float, path: str | None) -> Call:
        if self._channel is None:
            raise exceptions.ClientError("client is not connected: use `async with Client()`")
        return Call(self._replies.calls, pool, key, timeout, path, self._channel.release)

    def _request(self, call: Call, body: Body, headers: dict[str, Any] | None) -> Request:
        """The request of `call` as published, built once: every publish of it (a retry, a
        resend) is the same message."""
        data, content_type = encode(body)
        if len(data) > self.max_body:
            raise exceptions.RequestTooLarge(
                f"request body of {len(data)} bytes exceeds max_body={self.max_body}"
            )
        all_headers: dict[str, Any] = dict(headers) if headers else {}
        call.span.inject(all_headers)
        all_headers[Header.DEADLINE] = int((time.time() + call.timeout) * 1000)
        if call.path is not None:
            all_headers[Header.RPC_PATH] = call.path
        # Properties built here and published on the underlying aiormq channel: aio-pika's
        # Message costs ~30 µs a request and adds nothing a client call needs; encoded in
        # one pass (`wire.Properties`).
        properties = wire.Properties(
            content_type=content_type,
            # Persistent: a classic queue (the orphan queue) keeps it across a broker restart.
            delivery_mode=2,
            headers=all_headers,
            correlation_id=call.correlation_id,
            message_id=call.request_id,
            reply_to=self.reply_queue or DIRECT_REPLY_TO,
            expiration=self._expiration(call.timeout) if self.expire else None,
            timestamp=datetime.datetime.now(datetime.UTC),
        )
        return Request(data, properties)

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def _expiration(timeout: float) -> str:
        return str(max(0, int(timeout * 1000)))
