"""Channels the broker closes, many at once on one connection: every `close-ok` reaches it.

Unpatched aiormq (7.2.4) dropped the `close-ok` when its write queue was full and freed the
channel number before answering, so this very load left channels open on the broker and ended
the connection with "second 'channel.open' seen" or "number of channels opened (2047) has
reached the negotiated channel_max" (osrdyne/wire/_aiormq.py tells the story). Importing
`osrdyne.wire` orders aiormq's answer; this test causes the load on the real broker.
"""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import aiormq.channel
import pytest

from osrdyne import wire
from tests import broker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)

TASKS = 32
TRIES = 40


@pytest.mark.slow
async def test_broker_closed_channels_are_all_answered_under_load(amqp_url: str) -> None:
    assert getattr(aiormq.channel.Channel, "_osrdyne_close_ok_ordered", False), wire.__name__
    name = f"t-close-ok-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(amqp_url, client_properties={"connection_name": name})
    refused = 0

    async def fail_passive_declares() -> None:
        nonlocal refused
        for i in range(TRIES):
            channel = await connection.channel()
            with pytest.raises(aio_pika.exceptions.ChannelClosed):
                await channel.declare_queue(f"{name}-missing-{i}", passive=True)
            refused += 1

    try:
        await asyncio.gather(*(fail_passive_declares() for _ in range(TASKS)))
        assert refused == TASKS * TRIES
        assert not connection.is_closed
        # The broker holds none of them open (its figure lags by its statistics interval).
        await eventually(lambda: _broker_channels(name), what="no channel left on the broker")
        # The connection still works.
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True)
        assert queue.name
    finally:
        await connection.close()


async def _broker_channels(name: str) -> bool:
    async with broker.management() as http:
        listing = (
            await http.get("/connections", params={"columns": "channels,client_properties"})
        ).json()
    # A connection's figures appear with the broker's next statistics emission: absent
    # (None) until then, which is not yet an answer.
    mine = [
        c.get("channels")
        for c in listing
        if (c.get("client_properties") or {}).get("connection_name") == name
    ]
    return mine == [0]
