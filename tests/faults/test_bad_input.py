"""Bad input never stops a pool: a routing key that is not UTF-8, malformed activity reports,
and a body larger than the broker accepts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aio_pika
import pamqp.encode
import pytest

from osrdyne import Client, PoolNames, Status
from osrdyne.exceptions import ClientError, RequestTooLarge
from tests.broker import RawText
from tests.conftest import Running, raw_connection
from tests.faults.conftest import Caller
from tests.faults.rabbit_node import RabbitNode
from tests.faults.report import Tally
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


def test_pamqp_refuses_to_send_a_non_utf8_routing_key() -> None:
    with pytest.raises(TypeError):
        pamqp.encode.short_string(b"\xff\xfe")  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        pamqp.encode.short_string(b"\xff\xfe".decode(errors="surrogateescape"))


async def test_non_utf8_routing_key_is_answered_invalid_key(
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    tally = make_tally(
        "routing key not UTF-8 (raw bytes from a non-Python client)",
        "answered invalid_key; the controller keeps serving",
    )
    running = await make_controller(pool)
    caller = await make_caller(tally)
    bad = [await caller.send(pool, RawText(b"bad-\xff\xfe-key")) for _ in range(2)]
    assert not await caller.settle(30, grace=0)
    good = await caller.send(pool, "fine", b"still here")
    assert not await caller.settle(60)
    assert caller.statuses(bad) == {Status.INVALID_KEY: 2}
    assert tally.status_of(good) == Status.OK
    assert running.controller.sessions == 1  # the bad key did not cost a session


async def test_malformed_activity_reports_are_skipped(
    pool: str,
    amqp_url: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    tally = make_tally(
        "malformed activity reports (5 kinds)", "skipped and counted; the controller keeps serving"
    )
    running = await make_controller(pool)
    exchange_name = PoolNames(pool).activity_exchange
    reports = [
        ("k1", None, b"\x00\xffgarbage"),  # no x-event header at all
        ("k2", {"x-event": 42}, b""),  # not a string
        ("k3", {"x-event": RawText(b"\xff\xfe")}, b""),  # not UTF-8
        ("k4", {"x-event": "exploded"}, b""),  # unknown event
        ("", {"x-event": "started"}, b""),  # empty key
    ]
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(exchange_name)
        for key, headers, body in reports:
            await exchange.publish(aio_pika.Message(body, headers=headers), routing_key=key)
    metric = running.controller.metrics.activity_malformed
    for _ in range(100):
        if metric._value.get() >= len(reports):
            break
        await asyncio.sleep(0.1)
    assert metric._value.get() == len(reports)
    tally.extra["reports skipped"] = int(metric._value.get())
    caller = await make_caller(tally)
    sent = await caller.send(pool, "after-garbage", b"ok?")
    assert not await caller.settle(60)
    assert tally.status_of(sent) == Status.OK
    assert running.controller.sessions == 1
    tracker = running.controller.session.tracker
    assert tracker is not None
    assert not {"k1", "k2", "k3", "k4", ""} & set(tracker.state.value.groups)


async def test_oversized_body_gets_a_clear_error_and_the_client_goes_on(
    rabbit_node: RabbitNode,
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_tally: Callable[..., Tally],
) -> None:
    node = rabbit_node
    limit_mb = node.max_message_bytes // 2**20
    tally = make_tally(
        f"64 MiB body, broker max_message_size {limit_mb} MiB (private node)",
        "the call fails at once (RequestTooLarge with the broker's reason); the "
        "refusal closes the client's channel: calls in flight fail, the client "
        "goes on",
    )
    await make_controller(pool, amqp={"url": node.amqp_url, "management_url": node.management_url})
    async with Client(node.amqp_url, name="fault test oversized") as client:
        assert (await client.call(pool, "big", b"small first", timeout=60)).ok
        pending = asyncio.create_task(client.call(pool, "big", b"1", path="sleep", timeout=30))
        await asyncio.sleep(0.2)
        with pytest.raises(RequestTooLarge) as failure:
            await client.call(pool, "big", b"x" * (64 * 2**20), timeout=30)
        tally.sent_one("oversized")
        tally.replied("oversized", f"refused by the broker: {type(failure.value).__name__}")
        print("oversized:", repr(failure.value))
        other = await asyncio.gather(pending, return_exceptions=True)
        tally.sent_one("in flight")
        tally.replied("in flight", getattr(other[0], "status", type(other[0]).__name__))
        print("in flight:", repr(other[0]))
        attempts = 0

        async def call_ok() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                return (await client.call(pool, "big", b"after", timeout=10)).ok
            except ClientError:
                await asyncio.sleep(0.5)
                return False

        await eventually(call_ok, what="a call succeeds after the refusal", timeout=30)
        tally.extra["calls until ok"] = attempts
        tally.sent_one("after")
        tally.replied("after", "ok")
        assert "max size" in str(failure.value)
