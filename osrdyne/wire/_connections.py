"""Opening AMQP connections without leaving a failed one to the garbage collector.

`aio_pika.connect()` drops a connection that failed to connect without closing it; its
`__del__` then creates a `close()` coroutine wherever the object happens to be collected. In a
thread without a running event loop that coroutine is never awaited ("coroutine
'Connection.close' was never awaited"). A controller retrying while the broker is down leaves
one such object per attempt. Here a failed connection is closed at once, in its own loop.
"""

from __future__ import annotations

from typing import TypeVar

import aio_pika
import aio_pika.abc
import aio_pika.connection

#: The broker a client, a worker or a controller talks to when told nothing else.
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"

C = TypeVar("C", bound=aio_pika.abc.AbstractConnection)


async def connect(
    url: str, *, name: str, timeout: float | None = None
) -> aio_pika.abc.AbstractConnection:
    """A plain connection to `url`, shown as `name` by the broker."""
    connection = aio_pika.Connection(
        aio_pika.connection.make_url(url), client_properties={"connection_name": name}
    )
    return await _open(connection, timeout)


async def connect_robust(
    url: str, *, name: str, timeout: float | None = None, reconnect_interval: float = 1.0
) -> aio_pika.abc.AbstractRobustConnection:
    """A connection that reconnects by itself (and restores its declared channels)."""
    connection = aio_pika.RobustConnection(
        aio_pika.connection.make_url(url, reconnect_interval=reconnect_interval),
        client_properties={"connection_name": name},
    )
    return await _open(connection, timeout)


async def _open(connection: C, timeout: float | None) -> C:
    try:
        await connection.connect(timeout=timeout)
    except BaseException:
        await connection.close()
        raise
    return connection
