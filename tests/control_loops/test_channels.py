"""The control loops' channel pool on a real broker: a channel the broker closed, or one
abandoned in the middle of an operation, is never handed out again."""

from __future__ import annotations

import asyncio

import aio_pika
import aio_pika.exceptions
import pytest

from osrdyne.controller._effects.channels import ChannelPool


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


async def test_an_open_channel_is_reused_before_another_is_opened(amqp_url: str) -> None:
    """Operations one after another run on one channel, however large the pool; operations at
    once get channels of their own, and afterwards those stay the ones handed out."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        pool = ChannelPool(connection, size=8)
        used = []
        for _ in range(5):
            async with pool.channel() as channel:
                used.append(channel)
        assert all(channel is used[0] for channel in used)

        entered = asyncio.Event()
        together: list[aio_pika.abc.AbstractChannel] = []

        async def hold() -> None:
            async with pool.channel() as channel:
                together.append(channel)
                if len(together) == 3:
                    entered.set()
                await entered.wait()

        await asyncio.gather(hold(), hold(), hold())
        assert len({id(channel) for channel in together}) == 3
        assert used[0] in together
        after = []
        for _ in range(6):
            async with pool.channel() as channel:
                after.append(channel)
        assert {id(channel) for channel in after} <= {id(channel) for channel in together}
        await pool.close()
        assert all(channel.is_closed for channel in together)
