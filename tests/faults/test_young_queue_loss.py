"""The broker's own loss that the controller's young-queue hold covers, shown on the broker
alone (no osrdyne): quorum queues declared, a persistent message published to each and
confirmed, the node SIGKILLed 0.2 s later. At least one comes back without its confirmed
message: a new member with an empty log (rabbitmq-server#15725). On RabbitMQ 4.0.5 the node
logs "configured member of queue ... was not found on this node. Starting member as a new
one. Context: name_not_registered" and elects it, empty; on 3.10.8 it is never elected
(follower, term 0, log index 0: the controller's leaderless repair deletes and declares it
again). The likely mechanism is Ra's directory, a DETS table saved 0.5 s after its last change,
on both (docs/reliability.md). Seen in every round on both versions here (2026-12-02).

The test asserts that the loss still happens: when it fails, the broker no longer loses a
young queue's messages, and `queues.young_queue_hold` (the controller acks an orphan forwarded
into a queue younger than 1 s only once the queue is that old) can be reconsidered.
`tests/faults/test_broker_restart.py::test_broker_restart_under_load[sigkill]` asserts that
no request is lost with the hold on.
"""

from __future__ import annotations

import asyncio
import re

import aio_pika
import aio_pika.exceptions
import pytest

from tests.faults.rabbit_node import RabbitNode
from tests.waiting import eventually

#: A SIGKILL and a start of the private node: minutes on a loaded machine.
pytestmark = pytest.mark.timeout(600)

QUEUES = 5
#: Seconds from the last confirm to the SIGKILL: under Ra's 0.5 s directory save.
KILL_AFTER = 0.2


def _started_as_new(node: RabbitNode, prefix: str) -> set[str]:
    """The queues named `prefix...` that the node's recovery started as new members: its log
    says so, in these words on 3.10 and 4.0 alike (`rabbit_quorum_queue`'s recovery)."""
    found: set[str] = set()
    for path in (node.base / "log").glob("*.log"):
        text = path.read_text(errors="replace")
        found |= set(
            re.findall(
                rf"configured member of queue '({re.escape(prefix)}[^']*)'"
                r"[^\n]*Starting member as a new one",
                text,
            )
        )
    return found


def _never_elected(node: RabbitNode, prefix: str) -> set[str]:
    """The queues named `prefix...` whose only member is a follower at term 0 with an empty
    log, as the node itself tells (`rabbit_quorum_queue:status`, in one call): how 3.10 brings
    such a queue back (it logs nothing about it)."""
    found = node.ctl(
        "eval",
        f"""[N || Q <- rabbit_amqqueue:list(<<"/">>),
                 {{resource, _, queue, N}} <- [amqqueue:get_name(Q)],
                 binary:longest_common_prefix([N, <<"{prefix}">>]) =:= {len(prefix.encode())},
                 [M] <- [rabbit_quorum_queue:status(<<"/">>, N)],
                 proplists:get_value(<<"Term">>, M) =:= 0,
                 proplists:get_value(<<"Log Index">>, M) =:= 0].""",
        timeout=300,
    )
    return set(re.findall(r'<<"([^"]+)">>', found))


def _lost(node: RabbitNode, prefix: str) -> set[str]:
    """The young queues the restart brought back as new members (4.0 logs it and elects
    them; 3.10 leaves them never elected)."""
    return _started_as_new(node, prefix) or _never_elected(node, prefix)


async def _message_counts(node: RabbitNode, names: list[str]) -> dict[str, int | None]:
    """Each queue's message count by passive declaration (its leader answers), None when it
    gives none within 30 s."""
    counts: dict[str, int | None] = {}
    connection = await aio_pika.connect(node.amqp_url)
    async with connection:
        channel = await connection.channel()
        for name in names:
            try:
                async with asyncio.timeout(30):
                    queue = await channel.declare_queue(name, passive=True)
                counts[name] = queue.declaration_result.message_count
            except (TimeoutError, aio_pika.exceptions.AMQPError):
                counts[name] = None
                channel = await connection.channel()
    return counts


async def test_a_quorum_queue_killed_young_comes_back_empty(
    rabbit_node: RabbitNode, pool: str
) -> None:
    node = rabbit_node
    prefix = f"{pool}-young-"
    names = [f"{prefix}{i}" for i in range(QUEUES)]
    connection = await aio_pika.connect(node.amqp_url)
    try:
        channel = await connection.channel()  # publisher confirms
        for name in names:
            await channel.declare_queue(name, durable=True, arguments={"x-queue-type": "quorum"})
            await channel.default_exchange.publish(
                aio_pika.Message(b"confirmed", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=name,
            )
        await asyncio.sleep(KILL_AFTER)
        await asyncio.to_thread(node.crash)
    finally:
        await asyncio.gather(connection.close(), return_exceptions=True)
    await asyncio.to_thread(node.start)
    try:
        lost = await eventually(
            lambda: asyncio.to_thread(_lost, node, prefix),
            what="a young queue started again as a new member (rabbitmq-server#15725)",
            timeout=60,
        )
        # What the others hold (3.10 leaves a queue started as new without a leader: not
        # asked, its declaration would wait).
        counts = await _message_counts(node, [n for n in names if n not in lost])
        print(
            f"YOUNG QUEUES started again as new members (their message gone): {len(lost)} of "
            f"{QUEUES}: {sorted(lost)}; the others' counts: {counts}"
        )
        assert lost, "every young queue kept its confirmed message: rabbitmq-server#15725 fixed?"
        assert lost <= set(names)
    finally:
        connection = await aio_pika.connect(node.amqp_url)
        async with connection:
            channel = await connection.channel()
            for name in names:
                # A never-elected member answers no delete for 5 s: bounded, and the node is
                # removed at the end of the session anyway.
                try:
                    async with asyncio.timeout(10):
                        await channel.queue_delete(name)
                except (TimeoutError, aio_pika.exceptions.AMQPError):
                    channel = await connection.channel()
