"""A request as a handler sees it: body, headers, endpoint, and a way to report progress."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aio_pika.abc

from osrdyne.wire import Header, request_id, text

#: Publishes an interim (non-terminating) message for a request.
ProgressSender = Callable[[bytes, str | None], Awaitable[None]]


def encode_body(value: Any) -> tuple[bytes, str | None]:
    """A handler's return value as (body, content type): bytes as-is, str as UTF-8, else JSON."""
    if value is None:
        return b"", None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value), "application/octet-stream"
    if isinstance(value, str):
        return value.encode(), "text/plain; charset=utf-8"
    return json.dumps(value, default=str).encode(), "application/json"


@dataclasses.dataclass(frozen=True)
class Reply:
    """What a handler may return to put headers of its own on its answer: `body` is encoded
    as any return value is (`encode_body`), or sent as-is with `content_type` when that is
    given; the protocol's headers (`x-status`, tracing) are the worker's and win over
    `headers`."""

    body: Any
    headers: Mapping[str, str | int | bool] = dataclasses.field(default_factory=dict)
    content_type: str | None = None

    def encoded(self) -> tuple[bytes, str | None]:
        if self.content_type is not None and isinstance(self.body, bytes):
            return self.body, self.content_type
        return encode_body(self.body)


class Request:
    """One incoming request. Handlers read it and may send progress before returning."""

    def __init__(
        self,
        message: aio_pika.abc.AbstractIncomingMessage,
        *,
        key: str,
        progress_sender: ProgressSender,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.message = message
        #: The worker key of the group (the routing key the client used).
        self.key = key
        self._send_progress = progress_sender
        self._loop = loop

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def headers(self) -> dict[str, Any]:
        return dict(self.message.headers or {})

    @property
    def path(self) -> str | None:
        """The endpoint named by `x-rpc-path`, if any."""
        return text(self.headers.get(Header.RPC_PATH))

    @property
    def correlation_id(self) -> str | None:
        return self.message.correlation_id

    @property
    def id(self) -> str | None:
        """The request's id (`message_id`: a UUIDv7 from osrdyne's client, sorting by time),
        None when the sender gave none or one that is not short printable ASCII."""
        return request_id(self.message.message_id)

    @property
    def reply_to(self) -> str | None:
        return self.message.reply_to

    @property
    def redelivered(self) -> bool:
        return bool(self.message.redelivered)

    @property
    def deadline(self) -> float | None:
        """When the caller gives up (epoch seconds), from the `x-deadline` header (ms)."""
        value = self.headers.get(Header.DEADLINE)
        try:
            return float(value) / 1000 if value is not None else None
        except (TypeError, ValueError):
            return None

    def time_left(self) -> float | None:
        """Seconds until the caller's deadline, or None when it set none."""
        deadline = self.deadline
        return None if deadline is None else deadline - time.time()

    def json(self) -> Any:
        """The body decoded as JSON (raises ValueError on malformed input)."""
        return json.loads(self.body)

    async def progress(self, value: Any) -> None:
        """Send an interim message to the caller (`x-status: progress`,
        `x-non-terminating-response: true`): never taken for the answer."""
        body, content_type = encode_body(value)
        await self._send_progress(body, content_type)

    def progress_threadsafe(self, value: Any) -> None:
        """`progress` for synchronous handlers, which run in a worker thread."""
        asyncio.run_coroutine_threadsafe(self.progress(value), self._loop).result()
