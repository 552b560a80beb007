"""A worker whose broker is gone still stops on SIGTERM (its shutdown does not wait for a
reconnection that never comes). Real worker process, the private broker node stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import aio_pika

from tests.faults.rabbit_node import RabbitNode
from tests.waiting import eventually


async def test_worker_stops_on_sigterm_while_the_broker_is_down(
    rabbit_node: RabbitNode, pool: str
) -> None:
    node = rabbit_node
    queue, exchange = f"{pool}-req-k", f"{pool}-activity-xchg"
    connection = await aio_pika.connect(node.amqp_url)
    channel = await connection.channel()
    await channel.declare_exchange(exchange, aio_pika.ExchangeType.FANOUT)
    activity = await channel.declare_queue(exclusive=True)
    await activity.bind(exchange)
    await channel.declare_queue(queue, durable=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker_sdk.examples.echo"],
        env={
            **os.environ,
            "WORKER_ID": "w",
            "WORKER_KEY": "k",
            "WORKER_POOL": pool,
            "WORKER_REQUESTS_QUEUE": queue,
            "WORKER_ACTIVITY_EXCHANGE": exchange,
            "WORKER_AMQP_URI": node.amqp_url,
        },
    )
    try:

        async def ready() -> bool:
            message = await activity.get(no_ack=True, fail=False)
            return message is not None and (message.headers or {}).get("x-event") == "ready"

        await eventually(ready, timeout=60, what="worker ready")
        await connection.close()
        await asyncio.to_thread(node.stop)
        worker.send_signal(signal.SIGTERM)
        await eventually(
            lambda: worker.poll() is not None,
            timeout=45,
            what="worker exited after SIGTERM with the broker down",
        )
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        await asyncio.to_thread(node.start)
