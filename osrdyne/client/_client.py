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
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import functools
import json
import time
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Any, NamedTuple

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import aiormq
import aiormq.abc
import aiormq.exceptions

from osrdyne import exceptions, wire
from osrdyne.client._response import Response
from osrdyne.ops import tracing
from osrdyne.wire import DIRECT_REPLY_TO, Header, PoolNames

Body = bytes | str | dict[str, Any] | list[Any] | None

#: Pause before a request whose publish met a lost connection is published again, seconds.
_RESEND_PAUSE = 0.1
#: What a publish meets when its connection is down (or going).
_CONNECTION_ERRORS = (
    aio_pika.exceptions.ChannelInvalidStateError,
    aio_pika.exceptions.AMQPConnectionError,
    ConnectionError,
)


def encode(body: Body) -> tuple[bytes, str | None]:
    if body is None:
        return b"", None
    if isinstance(body, bytes):
        return body, None
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body).encode(), "application/json"


class _Request(NamedTuple):
    """A request as published: its body and AMQP properties."""

    data: bytes
    properties: aiormq.spec.Basic.Properties


class _Call:
    """One call in flight: its responses as they arrive, woken waits, its deadline and span.

    An async context manager: leaving it forgets the correlation id (a reply arriving later is
    late) and ends the span. One future and one timer per wait, no task and no generator: this
    is the client's hot path.
    """

    def __init__(
        self,
        calls: dict[str, _Call],
        pool: str,
        key: str,
        timeout: float,
        path: str | None,
        release: Callable[[aio_pika.abc.AbstractChannel], None],
    ) -> None:
        self.pool, self.key, self.path, self.timeout = pool, key, path, timeout
        #: Sorts by time across clients (UUIDv7), in the request's `message_id`; also its
        #: `correlation_id` (unique among the client's calls: one id per call, not two).
        self.request_id = self.correlation_id = wire.new_request_id()
        #: The channel the request went out on (its direct replies come back there).
        self.channel: aio_pika.abc.AbstractChannel | None = None
        self.span = tracing.start_call_span(pool, key, path)
        self.inbox: collections.deque[Response] = collections.deque()
        self.error: BaseException | None = None
        #: The final response has arrived (anything later is a late reply).
        self.answered = False
        #: The last refusal of its publish (a negative confirm...): what the call ends with
        #: when its deadline comes while it is published again.
        self.refused: exceptions.RequestRefused | None = None
        self._calls = calls
        self._release = release
        self._deadline = time.monotonic() + timeout
        self._waiter: asyncio.Future[None] | None = None
        self._status: str | None = None

    async def __aenter__(self) -> _Call:
        self._calls[self.correlation_id] = self
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._calls.pop(self.correlation_id, None)
        if self.channel is not None:
            self._release(self.channel)
            self.channel = None
        self.span.finish(self._status, exc if isinstance(exc, Exception) else None)

    def deliver(self, response: Response) -> None:
        self.inbox.append(response)
        self.answered = self.answered or not response.interim
        self._wake()

    @property
    def deadline(self) -> float:
        """When the caller gives up (`time.monotonic()`)."""
        return self._deadline

    @property
    def time_left(self) -> float:
        return self._deadline - time.monotonic()

    def fail(self, error: BaseException) -> None:
        if not self.answered:
            self.error = error
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self) -> Response:
        """The next response (interim or final); `RequestTimeout` once the deadline passed."""
        while not self.inbox and self.error is None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise exceptions.RequestTimeout(
                    f"no answer from pool {self.pool!r} key {self.key!r} within {self.timeout}s"
                )
            loop = asyncio.get_running_loop()
            self._waiter = loop.create_future()
            timer = loop.call_later(left, self._wake)
            try:
                await self._waiter
            finally:
                timer.cancel()
                self._waiter = None
        if self.inbox:
            response = self.inbox.popleft()
            if not response.interim:
                self._status = response.status
            return response
        assert self.error is not None
        raise self.error


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
        #: Replies that arrived after their call had ended (timed out or cancelled).
        self.late_replies = 0
        self._closing = False
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        #: The channel requests are published on (and direct replies consumed on).
        self._channel: wire.RenewingChannel | None = None
        #: With `reply_queue`: the channel consuming it.
        self._reply_channel: aio_pika.abc.AbstractChannel | None = None
        self._calls: dict[str, _Call] = {}
        #: Request exchanges known to exist.
        self._exchanges: set[str] = set()
        #: The request exchange of each pool whose exchange is known to exist.
        self._exchange_names: dict[str, str] = {}

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
        self._connection.close_callbacks.add(self._on_close)
        self._connection.reconnect_callbacks.add(self._on_reconnect)
        direct = self.reply_queue is None
        self._channel = wire.RenewingChannel(
            connection,
            name=self.name,
            publisher_confirms=self.confirm,
            # Direct replies come back on the channel a request went out on: each channel
            # consumes them, and its calls fail if it is lost.
            on_open=self._consume_direct_replies if direct else None,
            on_lost=self._channel_lost if direct else None,
        )
        await self._channel.channel()
        if not direct:
            self._reply_channel = await connection.channel()
            durable = await self._reply_channel.declare_queue(
                self.reply_queue,
                durable=True,
                arguments={"x-expires": int(self.reply_queue_expires * 1000)},
            )
            await durable.consume(self._on_durable_reply)

    async def close(self) -> None:
        self._closing = True
        self._fail_all(exceptions.ConnectionLost("client closed"))
        if self._channel is not None:
            await self._channel.close()
        if self._connection is not None:
            await self._connection.close()
        self._connection = self._channel = self._reply_channel = None

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
                    # once the connection is back (`_publish` waits for it), within the
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
            await self._send_in_time(call, request)
            while True:
                response = await call.next()
                yield response
                if not response.interim:
                    return

    def _may_resend(self, call: _Call) -> bool:
        return self.resend and not self._closing and call.time_left > 0 and not call.answered

    async def _send_resending(self, call: _Call, request: _Request) -> None:
        """`_send_in_time`, published again when the connection is lost under the publish
        (`resend`), after a short pause, within the deadline."""
        while True:
            try:
                await self._send_in_time(call, request)
                return
            except exceptions.ConnectionLost:
                if not self._may_resend(call):
                    raise
                call.error = None
                await asyncio.sleep(min(_RESEND_PAUSE, max(0.0, call.time_left)))

    def _new_call(self, pool: str, key: str, timeout: float, path: str | None) -> _Call:
        if self._channel is None:
            raise exceptions.ClientError("client is not connected: use `async with Client()`")
        return _Call(self._calls, pool, key, timeout, path, self._channel.release)

    async def _send_in_time(self, call: _Call, request: _Request) -> None:
        """Publish the request of `call` (confirmed when `confirm`) within its deadline: a
        publish waiting for a connection, a channel or a confirm (a node lost under it) ends
        the call with `RequestTimeout` at its deadline, like a call whose answer never comes.

        The fast path (the channel open and ready, the pool's exchange known): one publish,
        bounded by aiormq's own timeout (the confirm's bound or the deadline, whichever is
        first), without a timer, a retry loop or a task of ours. Anything else, and a first
        publish refused, takes `_publish` in a timeout of the call's deadline."""
        after: BaseException | None = None
        if call.channel is None and self._channel is not None:
            exchange = self._exchange_names.get(call.pool)
            held = self._channel.try_acquire() if exchange is not None else None
            if held is not None:
                assert exchange is not None
                call.channel, underlay = held
                try:
                    await self._publish_on(underlay, call, exchange, request, fast=True)
                    return
                except exceptions.RequestRefused as exc:
                    if isinstance(exc.__cause__, wire.Unconfirmed) and call.time_left <= 0:
                        raise self._deadline_error(call) from None  # no confirm by then
                    call.refused = exc
                    await self._channel.renew(call.channel)
                    if not wire.is_transient(exc) or call.time_left <= 0:
                        raise
                    after = exc
                except exceptions.ConnectionLost as exc:
                    if not wire.is_transient(exc):
                        raise
                    after = exc
        try:
            async with asyncio.timeout(max(0.0, call.time_left)):
                await self._publish(call, request, after=after)
        except TimeoutError:
            raise self._deadline_error(call) from None

    @staticmethod
    def _deadline_error(call: _Call) -> exceptions.RequestTimeout | exceptions.RequestRefused:
        """What a call ends with when its deadline comes before its request is published."""
        if call.refused is not None:
            # Refused until its deadline, which came while it was published again (a pause,
            # or a try still waiting for its confirm): the refusal is the answer.
            error = exceptions.RequestRefused(
                f"{call.refused} (published again until the call's deadline, {call.timeout}s)"
            )
            error.__cause__ = call.refused
            return error
        return exceptions.RequestTimeout(
            f"request to pool {call.pool!r} key {call.key!r} not published within {call.timeout}s"
        )

    def _request(self, call: _Call, body: Body, headers: dict[str, Any] | None) -> _Request:
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
        return _Request(data, properties)

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def _expiration(timeout: float) -> str:
        return str(max(0, int(timeout * 1000)))

    async def _publish(
        self, call: _Call, request: _Request, *, after: BaseException | None = None
    ) -> None:
        """Publish on the current channel, held by `call` until it ends. A refusal that
        passes (a negative confirm, the channel closed by the broker) is published again,
        the same message, on a fresh channel after a growing pause, until the call's deadline
        (`wire.RenewingChannel.retrying`); then the last refusal is raised. `after`: the
        refusal of a first publish (the fast path's): the loop starts with its pause."""
        assert self._connection is not None and self._channel is not None
        if not self._connection.connected.is_set():
            # Reconnecting (its node was lost): the call waits for it, within its deadline.
            try:
                async with asyncio.timeout(max(0.0, call.time_left)):
                    await self._connection.connected.wait()
            except TimeoutError:
                raise exceptions.RequestTimeout(
                    f"request to pool {call.pool!r} key {call.key!r} not published within "
                    f"{call.timeout}s: the connection to the broker was down until the call's "
                    "deadline (reconnecting)"
                ) from None
        async for attempt in self._channel.retrying(call.deadline, after=after):
            with attempt:
                if call.answered:
                    return  # a refused try was taken after all, and answered
                if call.channel is not None:
                    # The last try's channel: refused, or closed by the broker (which failed
                    # the call: it is sent again, so it waits again).
                    self._channel.release(call.channel)
                    call.channel = None
                    call.error = None
                call.channel = await self._channel.acquire()
                try:
                    with wire.lost_not_cancelled(f"request to pool {call.pool!r}"):
                        exchange = await self._exchange(call.pool)
                        underlay = await call.channel.get_underlay_channel()
                except _CONNECTION_ERRORS as exc:
                    raise exceptions.ConnectionLost(
                        f"cannot publish to pool {call.pool!r} while the connection is down: {exc}"
                    ) from exc
                try:
                    await self._publish_on(underlay, call, exchange, request)
                except exceptions.RequestRefused as exc:
                    call.refused = exc
                    await self._channel.renew(call.channel)
                    raise

    async def _publish_on(
        self,
        channel: aiormq.abc.AbstractChannel,
        call: _Call,
        exchange: str,
        request: _Request,
        *,
        fast: bool = False,
    ) -> None:
        """One publish of `request`, answered (confirmed or refused) within the confirm's
        bound (`wire.CONFIRM_TIMEOUT`; `fast`: or the call's deadline if sooner), else
        refused as `wire.Unconfirmed`."""
        pool, key = call.pool, call.key
        bound = wire.CONFIRM_TIMEOUT
        if fast:
            bound = min(bound, max(0.0, call.time_left))
        try:
            result = await channel.basic_publish(
                request.data,
                exchange=exchange,
                routing_key=key,
                properties=request.properties,
                mandatory=True,
                timeout=bound,
            )
        except asyncio.CancelledError as exc:
            # aiormq ends the futures of a connection found stuck with CancelledError; a
            # real cancellation of this task goes through (`wire.lost_not_cancelled`).
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            raise exceptions.ConnectionLost(
                f"request to pool {pool!r}: the connection was lost under it (found stuck)"
            ) from exc
        except TimeoutError:
            # No answer in time, from a channel that may have lost track of the queue: a
            # refusal, published again on a fresh channel (`wire.Unconfirmed`).
            unconfirmed = wire.Unconfirmed(
                f"pool {pool!r}: the broker neither confirmed nor refused a publish within "
                f"{bound:.3g} s"
            )
            raise exceptions.RequestRefused(
                f"the broker did not take the request for pool {pool!r} key {key!r}: {unconfirmed}"
            ) from unconfirmed
        except _CONNECTION_ERRORS as exc:
            raise exceptions.ConnectionLost(
                f"cannot publish to pool {pool!r} while the connection is down: {exc}"
            ) from exc
        except aiormq.exceptions.DeliveryError as exc:
            # A negative confirm: e.g. the key's quorum queue has no leader for a moment
            # after a cluster node was lost. Published again on a fresh channel.
            raise exceptions.RequestRefused(
                f"the broker did not take the request for pool {pool!r} key {key!r}: {exc}"
            ) from exc
        except aio_pika.exceptions.ChannelPreconditionFailed as exc:
            # A broker whose max_message_size is below `max_body` refuses the message (and
            # closes the channel): say so in our terms.
            if "max size" not in str(exc):
                raise
            raise exceptions.RequestTooLarge(
                f"the broker refused a body of {len(request.data)} bytes (set max_body to "
                f"the broker's max_message_size): {exc}"
            ) from exc
        except aiormq.exceptions.ChannelClosed as exc:
            if not wire.is_transient(exc):
                raise
            # Closed by the broker for a reason that is not the message's (a queue leader
            # lost under the publish): tried again while the deadline allows.
            raise exceptions.ConnectionLost(
                f"the broker closed the channel of a request for pool {pool!r}: {exc}"
            ) from exc
        if isinstance(result, aiormq.abc.DeliveredMessage):
            # Returned unroutable: the request exchange routes everything unbound to the
            # orphan queue, so that queue is gone. Waiting would only end in a timeout.
            raise exceptions.PoolNotFound(
                f"pool {pool!r} could not route the request for key {key!r}: its orphan "
                "queue is missing (is an osrdyne controller running for it?)"
            )

    async def _exchange(self, pool: str) -> str:
        """The pool's request exchange, checked once on a spare channel: publishing to a
        missing exchange would close the channel every pending call waits on."""
        known = self._exchange_names.get(pool)
        if known is not None:
            return known
        name = PoolNames(pool).request_exchange
        if name not in self._exchanges:
            assert self._connection is not None
            try:
                async with self._connection.channel() as spare:
                    await spare.declare_exchange(name, passive=True)
            except aio_pika.exceptions.ChannelNotFoundEntity as exc:
                raise exceptions.PoolNotFound(
                    f"pool {pool!r} has no exchange {name!r}: is an osrdyne controller "
                    "running for it?"
                ) from exc
            self._exchanges.add(name)
        self._exchange_names[pool] = name
        return name

    # -- replies --------------------------------------------------------------------------

    async def _consume_direct_replies(self, on: aio_pika.abc.AbstractChannel) -> None:
        # On the underlying aiormq channel: one task per reply, where aio-pika's consumer adds
        # a second task and an IncomingMessage (the client's hot path).
        channel = await on.get_underlay_channel()
        await channel.basic_consume(DIRECT_REPLY_TO, self._on_direct_reply, no_ack=True)

    async def _on_direct_reply(self, message: aiormq.abc.DeliveredMessage) -> None:
        properties = message.header.properties
        self._on_reply(message.body, properties.headers, properties.correlation_id)

    async def _on_durable_reply(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        self._on_reply(message.body, message.headers, message.correlation_id)
        await message.ack()

    def _on_reply(
        self, body: bytes, headers: dict[str, Any] | None, correlation_id: str | None
    ) -> None:
        call = self._calls.get(correlation_id or "")
        if call is None or call.answered:
            self.late_replies += 1
            return
        call.deliver(Response.from_message(body, headers, correlation_id, call.request_id))

    def _on_close(self, *_: Any) -> None:
        if self.reply_queue is not None:
            return  # answers wait in the durable queue; calls go on waiting for them
        self._fail_all(exceptions.ConnectionLost("connection to the broker lost"))

    async def _on_reconnect(self, *_: Any) -> None:
        self._exchanges.clear()
        self._exchange_names.clear()

    def _fail_all(self, error: Exception) -> None:
        for call in self._calls.values():
            call.fail(error)

    def _channel_lost(self, channel: aio_pika.abc.AbstractChannel) -> None:
        """The broker closed a channel (or its connection was lost): the direct replies of
        the calls waiting on it will never come."""
        for call in self._calls.values():
            if call.channel is channel:
                call.fail(exceptions.ConnectionLost("channel closed"))
