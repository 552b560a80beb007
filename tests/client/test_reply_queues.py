"""Replies and reconnects, for real: the broker force-closes the client's connection
(management API) while a call waits. With a named durable reply queue the answer waits for the
client and reaches its call after the reconnect; with direct reply-to (at most once) the call
fails fast with ConnectionLost instead of hanging."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid

import pytest

from osrdyne import Client, ConnectionLost, RequestTooLarge
from tests import broker
from tests.conftest import Running
from tests.waiting import eventually


async def find_connection(name: str) -> str:
    """The broker's name of the connection whose client called itself `name`."""
    async with broker.management() as http:

        async def find() -> str | None:
            for conn in (await http.get("/connections")).json():
                if conn.get("client_properties", {}).get("connection_name") == name:
                    return str(conn["name"])
            return None

        found: str = await eventually(find, what=f"connection {name!r} listed")
        return found


async def close_connection(found: str) -> None:
    async with broker.management() as http:
        response = await http.delete(f"/connections/{urllib.parse.quote(found, safe='')}")
    assert response.status_code in (200, 204)


@pytest.mark.slow
async def test_durable_reply_queue_answer_survives_a_dropped_connection(
    controller: Running, pool: str, amqp_url: str
) -> None:
    name = f"test-durable-{uuid.uuid4().hex[:6]}"
    async with Client(amqp_url, name=name, reply_queue=f"{pool}-replies") as client:
        await client.call(pool, "slow", b"warm-up", timeout=60)
        connection = await find_connection(name)
        call = asyncio.create_task(client.call(pool, "slow", b"3", path="sleep", timeout=60))
        await asyncio.sleep(0.5)  # the request is with the worker
        await close_connection(connection)
        assert not call.done()
        response = await call
    assert response.ok and response.text == "slept"


@pytest.mark.slow
async def test_a_direct_reply_to_call_in_flight_is_sent_again_when_the_connection_drops(
    controller: Running, pool: str, amqp_url: str
) -> None:
    """Its answer was lost with the connection (direct reply-to): the same request is
    published again once the client has reconnected, and its answer comes (issue 32: no call
    failed that its deadline could wait for)."""
    name = f"test-resend-{uuid.uuid4().hex[:6]}"
    async with Client(amqp_url, name=name) as client:
        await client.call(pool, "slow", b"warm-up", timeout=60)
        connection = await find_connection(name)
        call = asyncio.create_task(client.call(pool, "slow", b"3", path="sleep", timeout=60))
        await asyncio.sleep(0.5)
        await close_connection(connection)
        response = await call
        assert response.ok, response.text
        assert client.resends == 1


@pytest.mark.slow
async def test_without_resend_a_direct_reply_to_call_in_flight_fails_fast_when_the_connection_drops(
    controller: Running, pool: str, amqp_url: str
) -> None:
    name = f"test-direct-{uuid.uuid4().hex[:6]}"
    async with Client(amqp_url, name=name, resend=False) as client:
        await client.call(pool, "slow", b"warm-up", timeout=60)
        connection = await find_connection(name)
        call = asyncio.create_task(client.call(pool, "slow", b"3", path="sleep", timeout=60))
        await asyncio.sleep(0.5)
        await close_connection(connection)
        with pytest.raises(ConnectionLost):
            await call
        # A call made while the connection comes back waits for it, within its deadline
        # (issue 32: no call refused that its deadline could wait for).
        assert (await client.call(pool, "slow", b"while down", timeout=60)).ok


async def test_an_oversized_body_is_refused_before_it_is_sent(
    controller: Running, pool: str, amqp_url: str
) -> None:
    async with Client(amqp_url, max_body=1024) as client:
        with pytest.raises(RequestTooLarge, match="exceeds max_body"):
            await client.call(pool, "big", b"x" * 2048, timeout=10)
        assert (await client.call(pool, "big", b"x" * 1024, timeout=60)).ok
