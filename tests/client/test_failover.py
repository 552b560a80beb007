"""Several broker addresses: parsed and checked, tried in order, and a lost node left for the next.

On the shared broker, with a TCP proxy in front of it standing for a first node that dies
(`tests/tcp_proxy.py`: its connections cut, new ones refused) and closed ports for nodes that
are down. The same moves on a real three-node cluster are in `tests/cluster/`.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse

import aio_pika
import pytest

from osrdyne import Client, PoolNames, RequestRefused, wire
from osrdyne.controller import Settings
from osrdyne.controller._effects import topology
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.exceptions import ClientError
from tests import broker
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

DOWN = "amqp://guest:guest@127.0.0.1:1/%2F"
BROKER_PORT = urllib.parse.urlsplit(broker.AMQP_URL).port or 5672


def test_addresses_are_a_list_or_comma_separated() -> None:
    assert wire.split_urls(" amqp://a/%2F , amqps://b/ ,") == ["amqp://a/%2F", "amqps://b/"]
    assert wire.split_urls(["amqp://a/"]) == ["amqp://a/"]
    assert wire.join_urls(["amqp://a/", "amqp://b/"]) == "amqp://a/,amqp://b/"
    with pytest.raises(ValueError, match="no broker address"):
        wire.split_urls(" , ")
    with pytest.raises(ValueError, match="not an AMQP URI"):
        wire.split_urls("amqp://a/,http://b/")


def test_settings_read_several_addresses_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OSRDYNE_AMQP__URL", "amqp://u:p@n1:5681/v,amqp://u:p@n2:5682/v")
    monkeypatch.setenv("OSRDYNE_AMQP__MANAGEMENT_URL", "http://n1:15681,http://n2:15682")
    settings = Settings.load()
    assert settings.amqp.url == ["amqp://u:p@n1:5681/v", "amqp://u:p@n2:5682/v"]
    assert settings.amqp.management_url == ["http://n1:15681", "http://n2:15682"]
    assert settings.amqp.vhost == "v" and settings.amqp.credentials == ("u", "p")
    # A cluster: replicated request and pool queues, leaders spread.
    assert settings.queues.initial_group_size == 3
    assert settings.queues.leader_locator == "balanced"
    assert settings.queues.replicate_pool_queues is True


def test_one_address_keeps_the_brokers_defaults_and_explicit_choices_win() -> None:
    single = Settings(amqp={"url": broker.AMQP_URL})
    assert single.queues.initial_group_size is None
    assert single.queues.leader_locator is None
    assert single.queues.replicate_pool_queues is False
    chosen = Settings(
        amqp={"url": ["amqp://a/", "amqp://b/"]},
        queues={"initial_group_size": 5, "replicate_pool_queues": False},
    )
    assert chosen.queues.initial_group_size == 5
    assert chosen.queues.replicate_pool_queues is False


def test_addresses_of_different_virtual_hosts_are_refused() -> None:
    with pytest.raises(ValueError, match="different virtual hosts"):
        Settings(amqp={"url": "amqp://a/one,amqp://b/two"})
    with pytest.raises(ValueError, match="http"):
        Settings(amqp={"management_url": "ftp://a"})


async def test_a_connection_goes_to_the_first_node_that_answers() -> None:
    connection = await wire.connect([DOWN, broker.AMQP_URL], name="test failover plain")
    try:
        assert connection.url.port == BROKER_PORT
    finally:
        await connection.close()
    with pytest.raises(OSError):
        await wire.connect([DOWN, DOWN], name="test failover nobody", timeout=5)


async def test_a_robust_connection_moves_to_the_next_node_when_its_node_is_lost() -> None:
    """Connected through proxy A; A dies; B refuses (a node down, its attempt fails); the
    connection ends up on the broker itself, its channel and queue restored there."""
    first = await TcpProxy("127.0.0.1", BROKER_PORT).start()
    down = await TcpProxy("127.0.0.1", BROKER_PORT).start()
    down.refusing = True
    urls = [
        DOWN,
        f"amqp://guest:guest@127.0.0.1:{first.port}/%2F",
        f"amqp://guest:guest@127.0.0.1:{down.port}/%2F",
        broker.AMQP_URL,
    ]
    connection = await wire.connect_robust(
        urls, name="test failover robust", reconnect_interval=0.2
    )
    try:
        assert connection.url.port == first.port  # the closed port skipped
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True)
        reconnected = []
        connection.reconnect_callbacks.add(lambda *_: reconnected.append(True))
        first.refusing = True  # the node dies, and stays down
        first.cut()
        await eventually(lambda: reconnected, what="a reconnection", timeout=30)
        assert connection.url.port == BROKER_PORT
        # The channel and its queue were restored on the next node.
        await channel.declare_queue(queue.name, passive=True)
    finally:
        await connection.close()
        await first.close()
        await down.close()


async def test_the_client_calls_through_the_addresses_it_is_given() -> None:
    async with Client(f"{DOWN},{broker.AMQP_URL}", name="test failover client") as client:
        assert client.urls == [DOWN, broker.AMQP_URL]
        assert client._connection is not None
        assert client._connection.url.port == BROKER_PORT


async def test_management_calls_fall_over_to_a_node_that_answers() -> None:
    api = ManagementApi(
        ["http://127.0.0.1:1", broker.MANAGEMENT_URL],
        vhost="/",
        credentials=("guest", "guest"),
        retry_for=20,
    )
    try:
        overview = await api.overview()
        assert "rabbitmq_version" in overview
        assert api.node == broker.MANAGEMENT_URL.rstrip("/")
    finally:
        await api.close()


async def test_a_request_the_broker_nacks_until_its_deadline_raises_request_refused(
    pool: str,
) -> None:
    """A negative publisher confirm (as a quorum queue electing a leader gives) is published
    again until the call's deadline, then raised as our error, not aiormq's. Caused for real:
    a queue that rejects every publish (`reject-publish`)."""
    connection = await wire.connect(broker.AMQP_URL, name="test refused setup")
    try:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            PoolNames(pool).request_exchange, aio_pika.ExchangeType.DIRECT, auto_delete=True
        )
        queue = await channel.declare_queue(
            f"{pool}-full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
        )
        await queue.bind(exchange, routing_key="full")
        async with Client(broker.AMQP_URL, name="test refused") as client:
            with pytest.raises(RequestRefused, match="did not take the request"):
                # 5 s: the call's deadline also covers opening the client's channel (its
                # direct reply-to consumer), which took over 1.5 s once in a loaded CI run.
                await client.call(pool, "full", b"x", timeout=5)
            assert client.publish_retries >= 1
            assert not client._replies.calls  # the call is forgotten
    finally:
        await connection.close()


async def test_a_request_refused_for_a_moment_is_answered(pool: str) -> None:
    """A refusal that passes within the deadline is not the caller's: the key's queue is
    full (`x-max-length` 1, `reject-publish`: real nacks) until a consumer takes a message;
    the call, published again meanwhile with the same request id, then reaches the queue and
    its answer reaches the caller."""
    connection = await wire.connect(broker.AMQP_URL, name="test refused for a moment")
    try:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            PoolNames(pool).request_exchange, aio_pika.ExchangeType.DIRECT, auto_delete=True
        )
        queue = await channel.declare_queue(
            f"{pool}-one", arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        )
        await queue.bind(exchange, routing_key="one")
        await exchange.publish(aio_pika.Message(b"before", message_id="before"), "one")
        async with Client(broker.AMQP_URL, name="test refused for a moment") as client:
            call = asyncio.create_task(client.call(pool, "one", b"x", timeout=30))
            await eventually(lambda: client.publish_retries >= 2, what="the request refused")
            assert not call.done()
            before = await queue.get(no_ack=True)
            assert before is not None and before.message_id == "before"
            request = await eventually(
                lambda: queue.get(no_ack=True, fail=False), what="the request in the queue"
            )
            assert request.reply_to and request.correlation_id
            await channel.default_exchange.publish(
                aio_pika.Message(
                    b"pong",
                    correlation_id=request.correlation_id,
                    headers={wire.Header.STATUS: "ok"},
                ),
                routing_key=request.reply_to,
            )
            response = await call
            assert response.status == "ok" and response.body == b"pong"
            assert response.request_id == request.message_id
            assert await queue.get(fail=False) is None  # published again, taken once
    finally:
        await connection.close()


async def test_a_pool_of_classic_queues_keeps_them_when_it_moves_to_a_cluster(
    pool: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker cannot change a queue's type: a pool declared on one node (classic queues)
    and then run with several addresses (quorum wanted) keeps its queues, with a warning,
    instead of failing every session on PRECONDITION_FAILED."""
    names = PoolNames(pool)
    connection = await wire.connect(broker.AMQP_URL, name="test pool queue types")
    try:
        await topology.declare_pool(connection, names, replicated=False)
        with caplog.at_level(logging.WARNING, logger="osrdyne.controller._effects.topology"):
            await topology.declare_pool(connection, names, replicated=True)
        kept = [r.getMessage() for r in caplog.records if "keeping queue" in r.getMessage()]
        assert len(kept) == 4, kept
        async with broker.management() as http:
            name = urllib.parse.quote(names.orphan_queue, safe="")
            info = (await http.get(f"/queues/%2F/{name}")).json()
        assert info["type"] == "classic"
        assert not connection.is_closed
    finally:
        await connection.close()


async def test_a_pool_s_request_exchange_appears_only_once_its_orphans_are_routed(
    pool: str,
) -> None:
    """A client that sees the request exchange publishes at once; were the orphan queue not
    yet bound behind it, the broker would return the request unroutable and the client would
    fail with `PoolNotFound` (a CI run did, right after a controller started). The broker's
    own events give the order: the request exchange is created after the orphan binding."""
    names = PoolNames(pool)
    connection = await wire.connect(broker.AMQP_URL, name="test pool declaration order")
    try:
        channel = await connection.channel()
        events = await channel.declare_queue(exclusive=True, auto_delete=True)
        for event in ("exchange.created", "binding.created"):
            await events.bind("amq.rabbitmq.event", routing_key=event)
        await topology.declare_pool(connection, names, replicated=False)

        seen: list[str] = []

        async def heard_the_request_exchange() -> bool:
            while (message := await events.get(fail=False, no_ack=True)) is not None:
                headers = message.headers
                if message.routing_key == "exchange.created":
                    seen.append(f"exchange {wire.text(headers.get('name'))}")
                else:
                    source = wire.text(headers.get("source_name"))
                    seen.append(f"binding {source} {wire.text(headers.get('destination_name'))}")
            return f"exchange {names.request_exchange}" in seen

        await eventually(heard_the_request_exchange, what="the request exchange's event")
        orphans = f"binding {names.orphan_exchange} {names.orphan_queue}"
        assert orphans in seen, seen
        assert seen.index(orphans) < seen.index(f"exchange {names.request_exchange}"), seen
    finally:
        await connection.close()


def test_a_workers_addresses_are_checked_when_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`WORKER_AMQP_URI` may carry several addresses; a wrong one fails at start, not at the
    first reconnection."""
    from worker_sdk import WorkerSettings

    env = {
        "WORKER_ID": "w",
        "WORKER_KEY": "k",
        "WORKER_POOL": "p",
        "WORKER_REQUESTS_QUEUE": "p-req-k",
        "WORKER_ACTIVITY_EXCHANGE": "p-activity-xchg",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WORKER_AMQP_URI", "amqp://a:5681/%2F, amqp://b:5682/%2F")
    assert WorkerSettings.from_environment().amqp_uri == "amqp://a:5681/%2F,amqp://b:5682/%2F"
    monkeypatch.setenv("WORKER_AMQP_URI", "amqp://a:5681/%2F,a:5682")
    with pytest.raises(ValueError, match="not an AMQP URI"):
        WorkerSettings.from_environment()


async def test_a_publish_on_a_connection_found_stuck_fails_as_lost_not_as_cancelled(
    pool: str,
) -> None:
    """A link that goes silent under a publish waiting for its confirm (the proxy forwards
    nothing either way): aiormq finds the connection stuck after three heartbeats and ends
    its pending futures with `CancelledError`, though nobody cancelled the caller. The call
    must end as a client error (the connection lost, or the deadline), and the task that made
    it must not look cancelled. Before the fix the call raised `CancelledError`."""
    connection = await wire.connect(broker.AMQP_URL, name="test stuck setup")
    proxy = await TcpProxy("127.0.0.1", BROKER_PORT).start()
    try:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            PoolNames(pool).request_exchange, aio_pika.ExchangeType.DIRECT, auto_delete=True
        )
        queue = await channel.declare_queue(f"{pool}-stuck", auto_delete=True)
        await queue.bind(exchange, routing_key="stuck")
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F?heartbeat=1"
        async with Client(url, name="test stuck") as client:
            proxy.stall()
            call = asyncio.create_task(client.call(pool, "stuck", b"x", timeout=20))
            done, _ = await asyncio.wait({call}, timeout=40)
            assert call in done, "the call did not end by its deadline"
            assert not call.cancelled()
            error = call.exception()
            assert isinstance(error, ClientError), repr(error)
    finally:
        proxy.resume()
        await proxy.close()
        await connection.close()
