"""A worker cut off from its broker still stops on SIGTERM, within its driver's `stop_timeout`
(its shutdown does not wait for a broker that does not answer), and what it held is
redelivered. Real worker processes; the private broker node stopped, or paused (SIGSTOP: its
sockets open and silent, as a cut link looks until the heartbeats pass)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest

from drivers.subprocess import SubprocessSettings
from osrdyne.wire import Header
from tests.faults.rabbit_node import RabbitNode
from tests.waiting import eventually

#: What the subprocess driver gives a worker between SIGTERM and SIGKILL by default.
STOP_TIMEOUT = float(SubprocessSettings.model_fields["stop_timeout"].default)


class Setup:
    """The queues of one worker of key `k` on the private node, and its activity."""

    def __init__(self, node: RabbitNode, pool: str, channel: aio_pika.abc.AbstractChannel):
        self.node, self.pool, self.channel = node, pool, channel
        self.queue, self.exchange = f"{pool}-req-k", f"{pool}-activity-xchg"
        self.activity: aio_pika.abc.AbstractQueue | None = None

    async def declare(self) -> None:
        await self.channel.declare_exchange(self.exchange, aio_pika.ExchangeType.FANOUT)
        self.activity = await self.channel.declare_queue(exclusive=True)
        await self.activity.bind(self.exchange)
        await self.channel.declare_queue(self.queue, durable=True)

    def start_worker(self, worker_id: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "worker_sdk.examples.echo"],
            env={
                **os.environ,
                "WORKER_ID": worker_id,
                "WORKER_KEY": "k",
                "WORKER_POOL": self.pool,
                "WORKER_REQUESTS_QUEUE": self.queue,
                "WORKER_ACTIVITY_EXCHANGE": self.exchange,
                "WORKER_AMQP_URI": self.node.amqp_url,
            },
        )

    async def ready(self) -> None:
        assert self.activity is not None
        activity = self.activity

        async def said_ready() -> bool:
            message = await activity.get(no_ack=True, fail=False)
            return message is not None and (message.headers or {}).get("x-event") == "ready"

        await eventually(said_ready, timeout=60, what="worker ready")


@pytest.fixture
async def setup(rabbit_node: RabbitNode, pool: str) -> AsyncIterator[Setup]:
    connection = await aio_pika.connect(rabbit_node.amqp_url)
    try:
        made = Setup(rabbit_node, pool, await connection.channel())
        await made.declare()
        yield made
    finally:
        rabbit_node.resume()
        await connection.close()


def ended_by_itself(worker: subprocess.Popen[bytes]) -> int | None:
    """What the subprocess driver does on a stop: SIGTERM, then SIGKILL after its
    `stop_timeout`. The worker's exit status, or None when it had to be SIGKILLed."""
    worker.send_signal(signal.SIGTERM)
    try:
        return worker.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
        return None


async def test_worker_stops_on_sigterm_while_the_broker_is_down(setup: Setup) -> None:
    worker = setup.start_worker("w")
    try:
        await setup.ready()
        await setup.channel.close()
        await asyncio.to_thread(setup.node.stop)
        assert await asyncio.to_thread(ended_by_itself, worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        await asyncio.to_thread(setup.node.start)


async def test_a_worker_cut_off_while_handling_stops_on_sigterm_and_its_request_is_redelivered(
    setup: Setup,
) -> None:
    """The node goes silent (paused) while the worker handles a 15 s request; the worker's
    connection still looks alive (no heartbeat has failed yet), so its consumer's cancel is
    never answered. It stops within the driver's `stop_timeout` anyway, abandoning the
    request (it can neither reply nor ack), which the broker requeues once it sees the
    connection gone, and the next worker answers. Before: the cancel waited 5 s, the drain
    `drain_timeout` (30 s), and the driver SIGKILLed the worker."""
    replies = await setup.channel.declare_queue(exclusive=True)
    worker = setup.start_worker("w-cut")
    after: subprocess.Popen[bytes] | None = None
    try:
        await setup.ready()
        cid = uuid.uuid4().hex
        await setup.channel.default_exchange.publish(
            aio_pika.Message(
                b"15", headers={Header.RPC_PATH: "sleep"}, correlation_id=cid, reply_to=replies.name
            ),
            routing_key=setup.queue,
        )

        async def taken() -> bool:
            declared = await setup.channel.declare_queue(setup.queue, passive=True)
            return declared.declaration_result.message_count == 0

        await eventually(taken, what="the request taken by the worker")
        setup.node.pause()
        try:
            assert await asyncio.to_thread(ended_by_itself, worker) == 0
        finally:
            setup.node.resume()
        after = setup.start_worker("w-after")

        async def answered() -> aio_pika.abc.AbstractIncomingMessage | None:
            return await replies.get(no_ack=True, fail=False)

        reply = await eventually(answered, timeout=90, what="the held request answered")
        assert reply.correlation_id == cid
        assert (reply.headers or {}).get(Header.STATUS) == "ok"
    finally:
        for process in (worker, after):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
