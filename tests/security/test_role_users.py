"""One RabbitMQ user per role with the narrowest permissions (`osrdyne.ops.roles`, as
docs/security.md and `osrdyne roles` give them), created on the real broker: a pool runs end
to end under them, and each role is refused what it has no business doing."""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aio_pika
import aio_pika.exceptions
import aiormq.exceptions
import pytest

from osrdyne import Client, PoolNames, wire
from osrdyne.ops import roles
from tests import broker
from tests.conftest import Running

pytestmark = pytest.mark.timeout(120)


@dataclass
class Users:
    """The role users of one pool; `url(role)` connects as one of them."""

    pool: str
    password: str

    def name(self, role: str) -> str:
        return f"{self.pool}-{role}"

    def url(self, role: str, vhost: str = "%2F") -> str:
        return f"amqp://{self.name(role)}:{self.password}@127.0.0.1:5672/{vhost}"


@pytest.fixture
async def make_users() -> AsyncIterator[Callable[[str], Awaitable[Users]]]:
    created: list[str] = []

    async def make(pool: str) -> Users:
        users = Users(pool, secrets.token_hex(8))
        async with broker.management() as http:
            for role in roles.roles(pool):
                name = users.name(role.name)
                response = await http.put(
                    f"/users/{name}", json={"password": users.password, "tags": role.tags}
                )
                response.raise_for_status()
                created.append(name)
                grants = {"configure": role.configure, "write": role.write, "read": role.read}
                response = await http.put(f"/permissions/%2F/{name}", json=grants)
                response.raise_for_status()
        return users

    yield make
    async with broker.management() as http:
        for name in created:
            await http.delete(f"/users/{name}")


async def refused(url: str, exchange: str, routing_key: str = "k") -> bool:
    """True when publishing to `exchange` as the user of `url` is refused."""
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        target = await channel.get_exchange(exchange, ensure=False)
        await target.publish(aio_pika.Message(b"forged"), routing_key=routing_key)
    except aiormq.exceptions.ChannelAccessRefused:
        return True
    finally:
        await connection.close()
    return False


async def test_a_pool_runs_under_its_role_users_and_each_is_fenced(
    make_pool: Callable[[], str],
    make_users: Callable[[str], Awaitable[Users]],
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    pool, other = make_pool(), make_pool()
    users, others = await make_users(pool), await make_users(other)
    running = await make_controller(
        pool,
        amqp={"url": users.url("controller"), "worker_url": users.url("worker")},
        driver={"subprocess": {"command": [sys.executable, "-m", "worker_sdk.examples.echo"]}},
    )
    # Its role lets it hear the broker's events (queues deleted behind its back).
    session = running.controller.session
    assert session is not None and session.events.available
    await make_controller(other, amqp={"url": others.url("controller")}, driver={"kind": "noop"})
    async with Client(users.url("client"), name="role client") as client:
        assert (await client.call(pool, "k", b"as a client", timeout=60)).body == b"as a client"
        progress = await client.call(pool, "k", path="progress", timeout=60)
        assert progress.text == "done"

    mine, theirs = PoolNames(pool), PoolNames(other)
    # A worker cannot send requests to another pool, nor forge its activity.
    assert await refused(users.url("worker"), theirs.request_exchange)
    assert await refused(users.url("worker"), theirs.activity_exchange)
    # A client cannot touch the activity exchange, nor call another pool.
    assert await refused(users.url("client"), mine.activity_exchange)
    assert await refused(users.url("client"), theirs.request_exchange)
    # A controller cannot act on another pool.
    assert await refused(users.url("controller"), theirs.orphan_exchange)
    # A worker cannot consume another pool's requests.
    connection = await aio_pika.connect(users.url("worker"))
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(theirs.orphan_queue, passive=True)
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await queue.get(fail=False)
    finally:
        await connection.close()


async def test_the_default_exchange_is_the_limit_of_one_vhost(
    make_pool: Callable[[], str], make_users: Callable[[str], Awaitable[Users]]
) -> None:
    """Documents the limit stated in docs/security.md: a worker must publish its answers
    through the default exchange, and RabbitMQ checks that permission on the exchange, not on
    the queue it routes to; so within one vhost a worker can drop a message into any queue
    it can name. Pools that do not trust each other's workers get a vhost each."""
    pool = make_pool()
    users = await make_users(pool)
    victim = f"{pool}-victim"
    async with broker.management() as http:
        await http.put(f"/queues/%2F/{victim}", json={"durable": False, "auto_delete": False})
    assert not await refused(users.url("worker"), "", routing_key=victim)
    # Another vhost is out of reach altogether: the connection itself is refused (aiormq
    # reports the refused Connection.Open as a cancellation caused by the broker's Close).
    with pytest.raises((aiormq.exceptions.AMQPError, asyncio.CancelledError)) as refusal:
        # wire.connect closes a connection that failed to open (aio_pika.connect leaves it to
        # the garbage collector, which warns from whatever thread collects it).
        await wire.connect(users.url("worker", vhost="osrdyne-no-access"), name="no access")
    assert "Connection.Close" in str(refusal.value)
