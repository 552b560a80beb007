"""Opening AMQP connections to one broker node of several, and moving to another when it is lost.

Every connection of osrdyne (controller, client, worker, CLI) takes a list of broker addresses:
the nodes of a RabbitMQ cluster. A list may also be written as one comma-separated string (in
environment variables such as `OSRDYNE_AMQP__URL` and `WORKER_AMQP_URI`; a comma inside a
password is written `%2C`). The addresses are tried in order, or shuffled (to spread many
clients over the nodes), each once per round, with tenacity's exponential back-off between
attempts. A robust connection (`connect_robust`) that loses its node, or cannot reach the one it
tries, moves on to the next address by itself and restores its channels there.

`aio_pika.connect()` drops a connection that failed to connect without closing it; its
`__del__` then creates a `close()` coroutine wherever the object happens to be collected. In a
thread without a running event loop that coroutine is never awaited ("coroutine
'Connection.close' was never awaited"). A controller retrying while the broker is down leaves
one such object per attempt. Here a failed connection is closed at once, in its own loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
import urllib.parse
from collections.abc import Sequence
from typing import Any, TypeVar

import aio_pika
import aio_pika.abc
import aio_pika.connection
import aio_pika.exceptions
import tenacity
import yarl

logger = logging.getLogger(__name__)

#: The broker a client, a worker or a controller talks to when told nothing else.
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"

#: One address, several, or several in one comma-separated string.
Urls = str | Sequence[str]

#: Failures to reach a node that make the next address worth a try.
CONNECT_ERRORS = (aio_pika.exceptions.AMQPError, OSError, asyncio.TimeoutError)

#: Seconds between two attempts within a round are short; rounds back off up to this.
MAX_BACKOFF = 5.0

C = TypeVar("C", bound=aio_pika.abc.AbstractConnection)


def split_urls(urls: Urls) -> list[str]:
    """The addresses in `urls` (a list, or one string of comma-separated addresses).

    Raises ValueError when there is none, or one is not an `amqp://` / `amqps://` URI."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    found = [item.strip() for item in items if item.strip()]
    if not found:
        raise ValueError("no broker address given")
    for url in found:
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme not in ("amqp", "amqps"):
            raise ValueError(f"not an AMQP URI (amqp:// or amqps://): scheme {scheme!r}")
    return found


def join_urls(urls: Urls) -> str:
    """The comma-separated form of `urls` (as `WORKER_AMQP_URI` carries them)."""
    return ",".join(split_urls(urls))


def _order(urls: Urls, shuffle: bool) -> list[str]:
    found = split_urls(urls)
    if shuffle:
        random.shuffle(found)
    return found


def _retrying(attempts: int) -> tenacity.AsyncRetrying:
    """Each address once, a short and growing pause between attempts."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(CONNECT_ERRORS),
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=0.05, max=1.0),
        before_sleep=_say_next,
        reraise=True,
    )


def _say_next(state: tenacity.RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    pause = state.next_action.sleep if state.next_action is not None else 0.0
    logger.info("broker node unreachable (%s); next address in %.2f s", error, pause)


def with_heartbeat(url: str, heartbeat: int | None) -> yarl.URL:
    """`url` with `heartbeat` seconds in its query, unless it names its own (`?heartbeat=`).

    The client's value is the one used: aiormq answers the broker's proposal with its own
    (60 s when none is given), and declares a silent node dead after 3 x (heartbeat + 1) s."""
    parsed = yarl.URL(url)
    if heartbeat is None or "heartbeat" in parsed.query:
        return parsed
    return parsed.update_query(heartbeat=heartbeat)


async def connect(
    urls: Urls,
    *,
    name: str,
    timeout: float | None = None,
    shuffle: bool = False,
    heartbeat: int | None = None,
) -> aio_pika.abc.AbstractConnection:
    """A plain connection to the first of `urls` that answers, shown as `name` by the broker.

    Raises the last node's error when none answers."""
    order = _order(urls, shuffle)
    async for attempt in _retrying(len(order)):
        with attempt:
            url = with_heartbeat(order[attempt.retry_state.attempt_number - 1], heartbeat)
            connection = aio_pika.Connection(url, client_properties={"connection_name": name})
            return await _open(connection, timeout)
    raise AssertionError("unreachable")  # pragma: no cover


async def connect_robust(
    urls: Urls,
    *,
    name: str,
    timeout: float | None = None,
    reconnect_interval: float = 1.0,
    shuffle: bool = False,
    heartbeat: int | None = None,
) -> aio_pika.abc.AbstractRobustConnection:
    """A connection that reconnects by itself, to the next of `urls` when its node is lost, and
    restores its declared channels there. The first connection is made like `connect`'s."""
    order = [with_heartbeat(url, heartbeat) for url in _order(urls, shuffle)]
    async for attempt in _retrying(len(order)):
        with attempt:
            connection = FailoverConnection(
                order,
                start=attempt.retry_state.attempt_number - 1,
                reconnect_interval=reconnect_interval,
                client_properties={"connection_name": name},
            )
            return await _open(connection, timeout)
    raise AssertionError("unreachable")  # pragma: no cover


async def _open(connection: C, timeout: float | None) -> C:
    try:
        await connection.connect(timeout=timeout)
    except BaseException:
        await connection.close()
        raise
    return connection


# aio-pika's robust connection reconnects to its one URL. The attempt is the private method
# below (name-mangled); it is wrapped to move to the next address. Checked at import, so an
# aio-pika without it fails loudly here instead of silently never failing over.
_ATTEMPT = "_RobustConnection__connect_transport"
if not hasattr(aio_pika.RobustConnection, _ATTEMPT):  # pragma: no cover
    raise ImportError(f"aio-pika {aio_pika.__version__} has no RobustConnection.{_ATTEMPT}")


class FailoverConnection(aio_pika.RobustConnection):
    """A robust connection over several addresses.

    It moves to the next address when its connection is lost or an attempt fails: the next
    attempt is soon (another node is likely up); after a whole round of failures the pause
    doubles, up to `MAX_BACKOFF` seconds, and is reset by a successful connection."""

    def __init__(
        self,
        urls: Sequence[yarl.URL],
        *,
        start: int = 0,
        reconnect_interval: float = 1.0,
        **kwargs: Any,
    ) -> None:
        self.urls = list(urls)
        self._index = start % len(self.urls)
        self._base_interval = reconnect_interval
        self._failed_in_a_row = 0
        #: Moved to the next address since the last attempt (its connection was lost).
        self._moved = False
        super().__init__(self.urls[self._index], reconnect_interval=reconnect_interval, **kwargs)

    @property
    def node_url(self) -> yarl.URL:
        """The address this connection is on (or tries next)."""
        return self.urls[self._index]

    def _advance(self) -> None:
        self._index = (self._index + 1) % len(self.urls)
        self.url = self.urls[self._index]

    def _pause_after_failure(self) -> float:
        """Soon while a round has addresses left to try; after a whole round, doubling.
        One address: aio-pika's fixed interval, as before."""
        if len(self.urls) == 1:
            return self._base_interval
        rounds, within = divmod(self._failed_in_a_row, len(self.urls))
        if within or rounds == 0:
            return min(0.1, self._base_interval)
        return float(min(MAX_BACKOFF, self._base_interval * 2 ** min(rounds - 1, 6)))

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        if not self._close_called and not self.is_closed and len(self.urls) > 1:
            # Move before the reconnection task wakes up: it tries `self.url` at once.
            self._advance()
            self._moved = True
            logger.info("connection lost; next attempt on %s", _redacted(self.url))
        await super()._on_connection_close(closing)

    async def _RobustConnection__connect_transport(self) -> None:  # noqa: N802
        if self._failed_in_a_row and not self._moved and len(self.urls) > 1:
            # The last attempt failed (aio-pika has logged it, with its address) before it had
            # a connection to lose (else `_on_connection_close` moved on already): next one.
            self._advance()
        self._moved = False
        try:
            await getattr(super(), _ATTEMPT)()
        except BaseException:
            self._failed_in_a_row += 1
            self.reconnect_interval = self._pause_after_failure()
            raise
        self._failed_in_a_row = 0
        self.reconnect_interval = self._base_interval


async def move_on(connection: aio_pika.abc.AbstractConnection, reason: str) -> bool:
    """Make a robust connection over several addresses leave its node for the next one (its
    channels are restored there): for a node that answers but serves an old view (its
    metadata partitioned from the others after a freeze). False, and nothing done, when the
    connection has one address or is not connected."""
    if not isinstance(connection, FailoverConnection) or len(connection.urls) < 2:
        return False
    transport = connection.transport
    if transport is None or transport.connection.is_closed:
        return False
    logger.warning("leaving broker node %s: %s", _redacted(connection.node_url), reason)
    await transport.connection.close(ConnectionError(reason))
    return True


def _redacted(url: yarl.URL) -> str:
    return str(url.with_password("******") if url.password else url)
