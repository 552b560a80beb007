"""A worker written with plain aio-pika, as a team that does not use `worker_sdk` writes one.

It imports nothing of osrdyne, so pamqp's own queue-name check applies: it can only consume
its queue because the name it is given (`WORKER_REQUESTS_QUEUE`) is one every client accepts.
It follows the worker side of docs/protocol.md: reports `started`, consumes its queue,
reports `ready`; answers each request `plain: <body>` with `x-status: ok`, acks after
replying; stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal

import aio_pika
import aio_pika.abc
import aio_pika.exceptions


async def main() -> None:
    env = os.environ
    key, worker_id = env["WORKER_KEY"], env["WORKER_ID"]
    connection = await aio_pika.connect_robust(env["WORKER_AMQP_URI"])
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=4)
    activity = await channel.get_exchange(env["WORKER_ACTIVITY_EXCHANGE"], ensure=False)

    async def report(event: str) -> None:
        headers = {"x-event": event, "x-worker-id": worker_id}
        await activity.publish(aio_pika.Message(b"", headers=headers), routing_key=key)

    async def on_request(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        if message.reply_to:
            reply = aio_pika.Message(
                b"plain: " + message.body,
                headers={"x-status": "ok"},
                correlation_id=message.correlation_id,
            )
            await channel.default_exchange.publish(reply, routing_key=message.reply_to)
        await message.ack()
        await report("request-received")

    await report("started")
    name = env["WORKER_REQUESTS_QUEUE"]
    while True:  # the controller creates the queue: wait for it (a miss closes the channel)
        try:
            async with connection.channel() as probe:
                await probe.declare_queue(name, passive=True)
            break
        except aio_pika.exceptions.ChannelNotFoundEntity:
            await asyncio.sleep(0.2)
    queue = await channel.declare_queue(name, passive=True)
    await queue.consume(on_request)
    await report("ready")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await connection.close()


if __name__ == "__main__":
    asyncio.run(main())
