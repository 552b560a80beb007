"""A connection that fails to connect is closed at once, in its own loop.

aio-pika leaves a failed connection to its `__del__`, which creates a `close()` coroutine where
the object is collected: in a thread without a running loop (a CLI call, `asyncio.to_thread`)
that coroutine is never awaited. Failed attempts end up in reference cycles whenever their
exception is kept (a log record with its traceback is enough), so such objects are collected
late and anywhere. Checked here on the objects themselves, with the cycle collector paused.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable

import aio_pika
import aio_pika.exceptions
import pytest

from osrdyne import wire

UNREACHABLE = "amqp://guest:guest@127.0.0.1:1/%2F"


async def _fail_and_keep_the_error(connect: Callable[[], Awaitable[object]]) -> None:
    try:
        await connect()
    except (ConnectionError, aio_pika.exceptions.AMQPConnectionError) as exc:
        kept = exc  # a cycle, as a kept log record makes: frame -> error -> traceback -> frame
        assert kept is not None
    else:
        pytest.fail("connected to a closed port")


@pytest.mark.parametrize("robust", [False, True], ids=["plain", "robust"])
async def test_a_connection_that_fails_to_connect_is_closed(robust: bool) -> None:
    def connect() -> Awaitable[object]:
        if robust:
            return wire.connect_robust(UNREACHABLE, name="test", timeout=5)
        return wire.connect(UNREACHABLE, name="test", timeout=5)

    gc.collect()
    gc.disable()
    try:
        await _fail_and_keep_the_error(connect)
        failed = [
            o
            for o in gc.get_objects()
            if isinstance(o, aio_pika.abc.AbstractConnection) and o.url.port == 1
        ]
        assert failed, "the failed connection should still be in its reference cycle"
        assert all(o.is_closed for o in failed)
    finally:
        gc.enable()
        gc.collect()
