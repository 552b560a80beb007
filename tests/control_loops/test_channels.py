"""The control loops' channel pool on a real broker: a channel the broker closed, or one
abandoned in the middle of an operation, is never handed out again."""

from __future__ import annotations

import asyncio

import aio_pika
import aio_pika.exceptions
import pytest

from osrdyne.controller._channels import ChannelPool


async def test_broken_and_abandoned_channels_are_replaced(amqp_url: str) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        pool = ChannelPool(connection, size=1)
        async with pool.channel() as first:
            pass
        async with pool.channel() as again:
            assert again is first  # a healthy channel is reused

        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            async with pool.channel() as channel:
                await channel.declare_queue("osrdyne-test-no-such-queue", passive=True)
        async with pool.channel() as after_error:
            assert after_error is not first and not after_error.is_closed

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01), pool.channel() as abandoned:
                await asyncio.sleep(1)  # stands for an RPC the broker never answers
        async with pool.channel() as after_timeout:
            assert after_timeout is not abandoned
            await after_timeout.declare_queue("", exclusive=True)  # usable
        await pool.close()  # waits for the abandoned channel's close
        assert abandoned.is_closed
