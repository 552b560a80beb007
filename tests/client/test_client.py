"""The client against a real controller and echo workers: concurrency on one connection,
timeouts and late replies, a missing pool, the blocking wrapper."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest

from osrdyne import Client, PoolNotFound, RequestTimeout, SyncClient
from tests.conftest import Running
from tests.waiting import eventually


async def test_many_concurrent_calls_share_one_connection(
    controller: Running, client: Client, pool: str
) -> None:
    await client.call(pool, "busy", b"warm-up", timeout=60)
    bodies = [f"call-{i}".encode() for i in range(300)]
    answers = await asyncio.gather(*(client.call(pool, "busy", b, timeout=60) for b in bodies))
    assert [a.body for a in answers] == bodies


async def test_timeout_raises_and_the_late_reply_is_dropped_and_counted(
    controller: Running, client: Client, pool: str
) -> None:
    await client.call(pool, "slow", b"warm-up", timeout=60)
    with pytest.raises(RequestTimeout):
        await client.call(pool, "slow", b"1.5", path="sleep", timeout=0.3)
    await eventually(lambda: client.late_replies == 1, what="late reply counted")
    assert (await client.call(pool, "slow", b"still fine", timeout=30)).ok


async def test_unknown_pool_is_a_clear_error_and_the_client_stays_usable(
    controller: Running, client: Client, pool: str
) -> None:
    with pytest.raises(PoolNotFound, match="is an osrdyne controller running"):
        await client.call(pool + "-missing", "k", timeout=5)
    assert (await client.call(pool, "k", b"ok", timeout=60)).body == b"ok"


async def test_sync_client(controller: Running, pool: str, amqp_url: str) -> None:
    def blocking() -> bytes:
        with SyncClient(amqp_url) as sync:
            return sync.call(pool, "sync", b"blocking", timeout=60).body

    assert await asyncio.to_thread(blocking) == b"blocking"


async def test_a_pool_that_routes_nowhere_is_a_clear_error_not_a_timeout(
    controller: Running, client: Client, pool: str, amqp_url: str
) -> None:
    """A request exchange whose orphan route is gone returns the request (`mandatory`): the
    call fails at once instead of waiting for its timeout."""
    broken = pool + "-broken"
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            f"{broken}-req-xchg", aio_pika.ExchangeType.DIRECT, auto_delete=False
        )
        try:
            with pytest.raises(PoolNotFound, match="orphan queue is missing"):
                await client.call(broken, "k", b"lost?", timeout=600)
        finally:
            await exchange.delete()
    assert (await client.call(pool, "k", b"still fine", timeout=60)).ok
