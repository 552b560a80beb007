"""One call of the client: its request as published, and its answers as they arrive.

`Call` is the client's hot path: a correlation id registered in the client's map of calls
(`_replies.Replies`), the responses the reply consumer hands it, and one future and one timer
per wait for them. `Request` is its message, built once: every publish of it (a retry, a
resend) is the same message.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, NamedTuple

import aio_pika.abc
import aiormq

from osrdyne import exceptions, wire
from osrdyne.client._response import Response
from osrdyne.ops import tracing

Body = bytes | str | dict[str, Any] | list[Any] | None


def encode(body: Body) -> tuple[bytes, str | None]:
    if body is None:
        return b"", None
    if isinstance(body, bytes):
        return body, None
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body).encode(), "application/json"


class Request(NamedTuple):
    """A request as published: its body and AMQP properties."""

    data: bytes
    properties: aiormq.spec.Basic.Properties


class Call:
    """One call in flight: its responses as they arrive, woken waits, its deadline and span.

    An async context manager: leaving it forgets the correlation id (a reply arriving later is
    late) and ends the span. One future and one timer per wait, no task and no generator: this
    is the client's hot path.
    """

    def __init__(
        self,
        calls: dict[str, Call],
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

    async def __aenter__(self) -> Call:
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
