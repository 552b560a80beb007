"""The broker restarted under load, on a private node (never the shared one): the controller,
the workers and the clients reconnect and keep going, and no request is lost.

Two callers run at once. One uses direct reply-to, as `osrdyne.Client` does: a reply whose
caller's channel died with the broker has nowhere to go (RabbitMQ's direct reply-to is at most
once), so requests sent on the old connection and unanswered are counted apart, not as lost.
The other names a durable quorum queue as `reply_to`: every request of it must be answered.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable

import aio_pika
import pytest

from osrdyne import Client, PoolNames, Status
from osrdyne.exceptions import ClientError
from osrdyne.wire import Header
from tests.conftest import Running
from tests.faults.conftest import Caller, echo_driver
from tests.faults.rabbit_node import STOP_TIMEOUT, RabbitNode
from tests.faults.report import Tally
from tests.waiting import eventually

#: A hang guard: a restart alone took up to 160 s on a loaded machine.
pytestmark = pytest.mark.timeout(600)

BY_DESIGN = "reply lost by design (direct reply-to)"


#: How long one request of the load is published again while the node is away: longer than
#: a restart (up to 316 s at a load average of 40; a load that gave up after 60 s ended the
#: test's load, which then waited for requests after the restart that never came).
RETRY_FOR = 480.0


async def load(caller: Caller, pool: str, stop: asyncio.Event, sent: list[str]) -> None:
    """Requests every 50 ms until `stop`: mostly to a running group, some to new keys."""
    i = 0
    while not stop.is_set():
        if i % 10 == 9:
            key = f"fresh-{caller.reply_to[-6:]}-{i}"
            sent.append(await caller.send(pool, key, b"new", retry_for=RETRY_FOR))
        else:
            sent.append(
                await caller.send(pool, "steady", b"0.3", path="sleep", retry_for=RETRY_FOR)
            )
        i += 1
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    "hard",
    [
        # Once (2026-11-28) osrdyne.Client's calls failed for 60 s after this restart, every
        # caller's request answered: not reproduced since; two defects that match it are fixed
        # (docs/reliability.md, "No loss left unexplained"). A client not served again within
        # 60 s fails the test, with what it met.
        pytest.param(False, id="rabbitmqctl-stop"),
        # A request to a new key forwarded into its quorum queue less than 0.5 s before the
        # SIGKILL can be lost by the broker after its confirm (rabbitmq-server#15725:
        # tests/faults/test_young_queue_loss.py shows it); the controller's young-queue hold
        # keeps such an orphan unacked until the queue is 1 s old, so it is delivered again
        # and forwarded again: asserted below (the hold on, nothing lost).
        pytest.param(True, id="sigkill"),
    ],
)
async def test_broker_restart_under_load(
    hard: bool,
    rabbit_node: RabbitNode,
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    how = "SIGKILL + start" if hard else "rabbitmqctl stop + start"
    direct = make_tally(
        f"broker restarted under load ({how}), direct reply-to",
        "requests sent on the connection that died may lose their reply (not the request)",
    )
    named = make_tally(
        f"broker restarted under load ({how}), reply to a quorum queue",
        "the request and its reply both survive the restart",
    )
    node = rabbit_node
    amqp = {"url": node.amqp_url, "management_url": node.management_url}
    running = await make_controller(
        pool,
        amqp=amqp,
        queues={"message_ttl": 120, "leaderless_after": 8},
        groups={"unbind_delay": 300, "stop_delay": 300},
        # Workers starting while the broker is down exit and are restarted: keep that short.
        driver=echo_driver(),
    )
    callers = [
        await make_caller(direct, url=node.amqp_url),
        await make_caller(named, url=node.amqp_url, reply_queue=f"{pool}-replies"),
    ]
    for caller in callers:
        await caller.send(pool, "steady", b"warm-up")
        assert not await caller.settle(60, grace=0)

    t0 = time.monotonic()

    def mark(what: str) -> None:
        print(f"TIMING {time.monotonic() - t0:6.1f}s {what}")

    async with Client(node.amqp_url, name="fault test osrdyne.Client") as client:
        assert (await client.call(pool, "steady", b"before", timeout=30)).ok
        stop = asyncio.Event()
        sent: list[list[str]] = [[], []]
        loads = [
            asyncio.create_task(load(c, pool, stop, s), name="load")
            for c, s in zip(callers, sent, strict=True)
        ]
        try:
            await asyncio.sleep(2)
            mark("restart")
            await asyncio.to_thread(node.restart, hard=hard)
            mark("restarted")
            # A `rabbitmqctl stop` that does not end the node within the bound is followed by
            # a SIGKILL: that run is the SIGKILL case, not this one (seen at a load average of
            # 40: a request to a new key lost as in the SIGKILL case's broker loss).
            assert hard or node.stopped_gracefully, (
                f"the node did not stop within {STOP_TIMEOUT:.0f} s of `rabbitmqctl stop` and was "
                "SIGKILLed: not the graceful restart this test is about (an overloaded machine?)"
            )
            # Keep the load on until each caller has sent 20 requests on its new connection.
            await eventually(
                lambda: all(
                    sum(1 for c in s if caller.sent_epoch[c]) >= 20
                    for caller, s in zip(callers, sent, strict=True)
                ),
                what="load after the restart",
                timeout=180,
            )
        finally:
            stop.set()
            await asyncio.gather(*loads)
        # The direct reply-to requests sent before the connection was lost: excused if unanswered.
        mark("load stopped")
        direct.excuse([c for c in sent[0] if callers[0].sent_epoch[c] == 0], BY_DESIGN)
        # Wait for the answers. A new key's queue declared an instant before the SIGKILL can
        # come back without a leader (RabbitMQ never elects one): the controller deletes and
        # declares it again after `queues.leaderless_after` (8 s here), and its requests are
        # answered then (tests/faults/test_leaderless_queue.py).
        with contextlib.suppress(AssertionError):  # still unanswered: the asserts below say so
            await eventually(
                lambda: not any(caller.unanswered() for caller in callers),
                what="every request answered",
                timeout=90,
                interval=0.2,
            )
        await asyncio.sleep(2)  # for duplicates
        for tally, caller in zip((direct, named), callers, strict=True):
            tally.extra["publish retries"] = caller.publish_retries
            tally.extra["after restart"] = sum(1 for c in tally.sent if caller.sent_epoch.get(c))

        # osrdyne.Client reconnects by itself (calls pending at the loss fail: ConnectionLost).
        mark("settled")
        print("SLOWEST", [c.slowest() for c in callers])
        attempts = 0
        failures: collections.Counter[str] = collections.Counter()

        async def client_ok() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                return (await client.call(pool, "steady", b"after", timeout=10)).ok
            except ClientError as exc:
                failures[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1
                return False

        try:
            await eventually(
                client_ok, what="osrdyne.Client answered after the restart", timeout=60
            )
        except AssertionError:
            # What the client met, and where its requests wait: a stall says which it is (the
            # client's connection or channel, or the key's queue and its consumers).
            print("DIAG client failures", dict(failures))
            print("DIAG queues", await node_queues(node, pool))
            print("DIAG unanswered", [c.describe(c.unanswered()) for c in callers])
            raise
        direct.extra["osrdyne.Client calls until ok after restart"] = attempts
        mark("client ok")

    if named.pending() or direct.row()["lost"]:
        print("DIAG", await node_queues(node, pool))
        print("DIAG", running.controller.status())
        print("DIAG", running.controller.driver.describe())  # type: ignore[attr-defined]
    assert running.controller.sessions >= 2  # the controller lost its session and came back
    # The mitigation of the broker's own loss of young queues (rabbitmq-server#15725) is on.
    assert running.controller.settings.queues.young_queue_hold >= 1
    assert named.row()["lost"] == 0, (named.row(), callers[1].describe(named.pending()))
    assert direct.row()["lost"] == 0, direct.row()
    for tally in (direct, named):
        assert set(tally.row()["errors"]) <= {Status.EXPIRED}  # only if the outage was long
        assert tally.row()["extra"]["after restart"] > 0
    assert named.row()["ok"] == len(named.sent)


async def node_queues(node: RabbitNode, pool: str) -> list[tuple[str, int, int, int]]:
    """(name, ready, unacked, consumers) of the pool's queues on the node (diagnostics)."""
    import httpx

    async with httpx.AsyncClient(
        base_url=node.management_url + "/api", auth=("guest", "guest"), timeout=10
    ) as http:
        items = (
            await http.get(
                "/queues/%2F",
                params={"columns": "name,messages_ready,messages_unacknowledged,consumers"},
            )
        ).json()
    return [
        (
            q["name"],
            q.get("messages_ready", 0),
            q.get("messages_unacknowledged", 0),
            q.get("consumers", 0),
        )
        for q in items
        if q["name"].startswith(pool)
    ]


async def test_answers_waiting_in_a_durable_reply_queue_survive_a_restart(
    rabbit_node: RabbitNode,
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_tally: Callable[..., Tally],
) -> None:
    """The reply queue `osrdyne.Client(reply_queue=...)` declares is a durable classic queue: a
    worker's answer and a controller's error answer waiting in it (their caller is away) are
    persistent, so they are still there after the broker restarted."""
    node = rabbit_node
    tally = make_tally(
        "answers waiting in a durable classic reply queue, broker restarted",
        "a worker's answer and a controller's error answer are persistent and survive",
    )
    running = await make_controller(
        pool, amqp={"url": node.amqp_url, "management_url": node.management_url}
    )
    replies = f"{pool}-client-replies"
    async with Client(node.amqp_url, reply_queue=replies) as client:
        assert (await client.call(pool, "k", b"declares the reply queue", timeout=60)).ok
    async with await aio_pika.connect(node.amqp_url) as connection:
        channel = await connection.channel()  # publisher confirms
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange, ensure=False)
        for key, body in (("k", b"answered while away"), ("", b"an invalid key")):
            cid = uuid.uuid4().hex
            message = aio_pika.Message(body, correlation_id=cid, reply_to=replies)
            await exchange.publish(message, routing_key=key)
            tally.sent_one(cid)

    async def waiting() -> int:
        connection = await aio_pika.connect(node.amqp_url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(replies, passive=True)
            return int(queue.declaration_result.message_count or 0)

    await eventually(lambda: _at_least(waiting(), 2), what="both answers queued", timeout=60)
    await running.stop()
    await asyncio.to_thread(node.restart)
    connection = await aio_pika.connect(node.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(replies, passive=True)
        while (message := await queue.get(no_ack=True, fail=False)) is not None:
            tally.replied(message.correlation_id or "", str(message.headers[Header.STATUS]))
    assert tally.row()["lost"] == 0, tally.row()
    assert sorted(str(tally.status_of(c)) for c in tally.sent) == [Status.INVALID_KEY, Status.OK]


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n
