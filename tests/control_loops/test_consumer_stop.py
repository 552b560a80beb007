"""A consumer's stop finishes the publish-then-ack steps already under way.

At stop, in-flight handlers get a grace, then are cancelled: their messages stay unacked and
the next leader handles them. A handler cancelled between its publish and its ack would leave
a message published and unacked: the next leader would publish it again (a request forwarded
twice). `QueueConsumer.commit` runs those steps to their end, with a grace of their own.
The steps here stand for the broker's publish and ack (the shutdown order is what is tested);
tests/bounds/test_bursts.py stops a real controller mid-burst and counts every request.
"""

from __future__ import annotations

import asyncio

from osrdyne import wire
from osrdyne.controller._effects.consumer import QueueConsumer
from osrdyne.ops.metrics import ControllerMetrics
from tests.waiting import eventually


def consumer() -> QueueConsumer:
    return QueueConsumer(
        None,  # type: ignore[arg-type]  # never started: no queue to cancel
        prefetch=1,
        names=wire.PoolNames("p"),
        metrics=ControllerMetrics(),
    )


async def test_a_publish_under_way_reaches_its_ack_when_its_handler_is_cancelled() -> None:
    queue_consumer = consumer()
    steps: list[str] = []
    acked = asyncio.Event()

    async def publish_then_ack() -> None:
        steps.append("published")
        await acked.wait()
        steps.append("acked")

    async def handle() -> None:
        await queue_consumer.commit(publish_then_ack())
        steps.append("handler went on")

    handler = asyncio.create_task(handle())
    queue_consumer._in_flight.add(handler)
    await eventually(lambda: steps == ["published"], what="published")
    stopping = asyncio.create_task(queue_consumer.stop(grace=2.0))
    await eventually(handler.done, what="handler cancelled after the in-flight grace")
    assert handler.cancelled()
    acked.set()  # the ack comes during the commits' own grace
    await asyncio.wait_for(stopping, 10)
    assert steps == ["published", "acked"]


async def test_a_commit_that_never_ends_is_cancelled_after_its_grace() -> None:
    queue_consumer = consumer()
    never = asyncio.Event()

    async def handle() -> None:
        await queue_consumer.commit(never.wait())

    handler = asyncio.create_task(handle())
    queue_consumer._in_flight.add(handler)
    await eventually(lambda: queue_consumer._committing, what="committing")
    await asyncio.wait_for(queue_consumer.stop(grace=0.2), 10)  # bounded, not a pace
    assert handler.cancelled()
    await eventually(lambda: not queue_consumer._committing, what="the commit cancelled")
