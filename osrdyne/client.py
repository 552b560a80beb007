"""The client: call a keyed worker of a pool and wait for its answer.

    async with Client("amqp://guest:guest@127.0.0.1/") as client:
        response = await client.call("core", "infra=42", b"...", timeout=30)

Many calls share one connection and one channel consuming RabbitMQ's direct reply-to: each
call has a correlation id mapped to a future, removed when the call ends. Requests are
published with `mandatory` and publisher confirms; each carries its deadline (`x-deadline`)
and an `expiration`, so a request nobody picks up in time dies as `expired` and is answered,
and a worker that picks up a request whose caller gave up skips it. A reply arriving after
its call timed out is dropped and counted (`late_replies`). Direct reply-to is at most once:
if the connection drops, every pending call fails with `ConnectionLost`. With `reply_queue`,
answers go to a named durable queue instead: they wait there while the connection is down
and reach their calls once it is back (docs/protocol.md says when to use which).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import json
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Any

import aio_pika
import aio_pika.abc
import aio_pika.exceptions

from osrdyne import exceptions, tracing
from osrdyne.protocol import DIRECT_REPLY_TO, Header, PoolNames
from osrdyne.response import Response

Body = bytes | str | dict[str, Any] | list[Any] | None


def encode(body: Body) -> tuple[bytes, str | None]:
    if body is None:
        return b"", None
    if isinstance(body, bytes):
        return body, None
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body).encode(), "application/json"


class _Call:
    """The responses of one call as they arrive; a waiting `next` is woken by each.

    One future and one timer per wait: cheaper than racing a queue getter against a future
    (this is the client's hot path).
    """

    def __init__(self) -> None:
        self.inbox: collections.deque[Response] = collections.deque()
        self.error: BaseException | None = None
        #: The final response has arrived (anything later is a late reply).
        self.answered = False
        self._waiter: asyncio.Future[None] | None = None

    def deliver(self, response: Response) -> None:
        self.inbox.append(response)
        self.answered = self.answered or not response.interim
        self._wake()

    def fail(self, error: BaseException) -> None:
        if not self.answered:
            self.error = error
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self, timeout: float) -> Response | None:
        """The next response, or None if none came within `timeout` seconds."""
        if not self.inbox and self.error is None:
            loop = asyncio.get_running_loop()
            self._waiter = loop.create_future()
            timer = loop.call_later(timeout, self._wake)
            try:
                await self._waiter
            finally:
                timer.cancel()
                self._waiter = None
        if self.inbox:
            return self.inbox.popleft()
        if self.error is not None:
            raise self.error
        return None


class Client:
    def __init__(
        self,
        url: str = "amqp://guest:guest@127.0.0.1:5672/%2F",
        *,
        confirm: bool = True,
        expire: bool = True,
        name: str | None = None,
        reply_queue: str | None = None,
        reply_queue_expires: float = 86400.0,
        max_body: int = 128 * 1024 * 1024,
    ) -> None:
        self.url = url
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
        #: Replies that arrived after their call had ended (timed out or cancelled).
        self.late_replies = 0
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        self._channel: aio_pika.abc.AbstractChannel | None = None
        self._calls: dict[str, _Call] = {}
        self._exchanges: dict[str, aio_pika.abc.AbstractExchange] = {}

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
        connection = aio_pika.RobustConnection(
            aio_pika.connection.make_url(self.url, reconnect_interval=1),
            client_properties={"connection_name": self.name},
        )
        try:
            await connection.connect()
        except BaseException:
            # Closed here, in its loop: aio-pika's __del__ would otherwise create a close()
            # coroutine wherever the failed connection is collected, and never await it.
            await connection.close()
            raise
        self._connection = connection
        self._connection.close_callbacks.add(self._on_close)
        self._connection.reconnect_callbacks.add(self._on_reconnect)
        await self._open_channel()

    async def _open_channel(self) -> None:
        assert self._connection is not None
        self._channel = await self._connection.channel(publisher_confirms=self.confirm)
        if self.reply_queue is None:
            self._channel.close_callbacks.add(self._on_close)
            # Declared (not just named) so the robust channel restores the consumer after a
            # reconnect; RabbitMQ accepts declaring this pseudo-queue.
            replies = await self._channel.declare_queue(DIRECT_REPLY_TO)
            await replies.consume(self._on_reply, no_ack=True)
        else:
            durable = await self._channel.declare_queue(
                self.reply_queue,
                durable=True,
                arguments={"x-expires": int(self.reply_queue_expires * 1000)},
            )
            await durable.consume(self._on_durable_reply)

    async def close(self) -> None:
        self._fail_all(exceptions.ConnectionLost("client closed"))
        if self._connection is not None:
            await self._connection.close()
        self._connection = self._channel = None

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
        # aclosing: the stream (its span, its correlation id) ends with the call, not at GC.
        async with contextlib.aclosing(
            self.stream(pool, key, body, timeout=timeout, path=path, headers=headers)
        ) as responses:
            async for response in responses:
                if not response.interim:
                    return response
                if on_progress is not None:
                    on_progress(response)
        raise AssertionError("stream ended without a final response")  # pragma: no cover

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
        if self._channel is None:
            raise exceptions.ClientError("client is not connected: use `async with Client()`")
        correlation_id = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        call = _Call()
        self._calls[correlation_id] = call
        status: str | None = None
        error: BaseException | None = None
        with tracing.call_span(pool, key, path) as span:
            headers = dict(headers or {})
            span.inject(headers)
            try:
                await self._publish(pool, key, body, correlation_id, timeout, path, headers)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise exceptions.RequestTimeout(
                            f"no answer from pool {pool!r} key {key!r} within {timeout}s"
                        )
                    response = await call.next(left)
                    if response is None:
                        continue
                    if not response.interim:
                        status = response.status
                    yield response
                    if not response.interim:
                        return
            except Exception as exc:
                error = exc
                raise
            finally:
                self._calls.pop(correlation_id, None)
                span.finish(status, error)

    async def _publish(
        self,
        pool: str,
        key: str,
        body: Body,
        correlation_id: str,
        timeout: float,
        path: str | None,
        headers: dict[str, Any] | None,
    ) -> None:
        data, content_type = encode(body)
        if len(data) > self.max_body:
            raise exceptions.RequestTooLarge(
                f"request body of {len(data)} bytes exceeds max_body={self.max_body}"
            )
        all_headers: dict[str, Any] = dict(headers or {})
        all_headers[Header.DEADLINE] = int((time.time() + timeout) * 1000)
        if path is not None:
            all_headers[Header.RPC_PATH] = path
        message = aio_pika.Message(
            data,
            headers=all_headers,
            content_type=content_type,
            correlation_id=correlation_id,
            reply_to=self.reply_queue or DIRECT_REPLY_TO,
            expiration=timeout if self.expire else None,
            timestamp=datetime.datetime.now(datetime.UTC),
        )
        try:
            exchange = await self._exchange(pool)
            await exchange.publish(message, routing_key=key, mandatory=True)
        except (
            aio_pika.exceptions.ChannelInvalidStateError,
            aio_pika.exceptions.AMQPConnectionError,
            ConnectionError,
        ) as exc:
            raise exceptions.ConnectionLost(
                f"cannot publish to pool {pool!r} while the connection is down: {exc}"
            ) from exc
        except aio_pika.exceptions.ChannelPreconditionFailed as exc:
            # A broker whose max_message_size is below `max_body` refuses the message (and
            # closes the channel): say so in our terms.
            if "max size" not in str(exc):
                raise
            raise exceptions.RequestTooLarge(
                f"the broker refused a body of {len(data)} bytes (set max_body to the "
                f"broker's max_message_size): {exc}"
            ) from exc

    async def _exchange(self, pool: str) -> aio_pika.abc.AbstractExchange:
        """The pool's request exchange, checked once on a spare channel: publishing to a
        missing exchange would close the channel every pending call waits on."""
        assert self._channel is not None and self._connection is not None
        exchange = self._exchanges.get(pool)
        if exchange is None:
            name = PoolNames(pool).request_exchange
            try:
                async with self._connection.channel() as spare:
                    await spare.declare_exchange(name, passive=True)
            except aio_pika.exceptions.ChannelNotFoundEntity as exc:
                raise exceptions.PoolNotFound(
                    f"pool {pool!r} has no exchange {name!r}: is an osrdyne controller "
                    "running for it?"
                ) from exc
            exchange = await self._channel.get_exchange(name, ensure=False)
            self._exchanges[pool] = exchange
        return exchange

    # -- replies --------------------------------------------------------------------------

    async def _on_reply(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        call = self._calls.get(message.correlation_id or "")
        if call is None or call.answered:
            self.late_replies += 1
            return
        response = Response.from_message(message.body, message.headers, message.correlation_id)
        call.deliver(response)

    async def _on_durable_reply(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await self._on_reply(message)
        await message.ack()

    def _on_close(self, *_: Any) -> None:
        if self.reply_queue is not None:
            return  # answers wait in the durable queue; calls go on waiting for them
        self._fail_all(exceptions.ConnectionLost("connection to the broker lost"))

    async def _on_reconnect(self, *_: Any) -> None:
        self._exchanges.clear()

    def _fail_all(self, error: Exception) -> None:
        for call in self._calls.values():
            call.fail(error)
