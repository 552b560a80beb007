"""The core promise end to end: a request for a key nobody serves yet is answered by a group
osrdyne starts for it; later requests take the fast path; idle groups go away in two stages.
Real broker, real controller, real worker processes (the echo worker)."""

from __future__ import annotations

import asyncio
import json
import uuid

import aio_pika
import pytest

from osrdyne import Client, PoolNames, Status
from osrdyne.controller._decisions.pool_state import GroupStatus
from tests import broker
from tests.conftest import Running, raw_connection
from tests.waiting import eventually


async def orphans_forwarded(running: Running, expected: int) -> float:
    """The controller's count of forwarded orphans once it has reached `expected`.

    A worker can answer a forwarded request before the controller has acked the orphan and
    counted it (the confirm and the worker's delivery race), so the count is awaited, then
    read once more: more than `expected` would mean a request forwarded twice.
    """
    counter = running.controller.metrics.orphans.labels("forwarded")
    await eventually(lambda: counter._value.get() >= expected, what=f"{expected} forwarded")
    return counter._value.get()


async def test_cold_key_starts_a_group_that_answers(
    controller: Running, client: Client, pool: str
) -> None:
    response = await client.call(pool, "cold", b"hello", timeout=60)
    assert response.ok, response
    assert response.body == b"hello"
    assert await orphans_forwarded(controller, 1) == 1
    assert await controller.controller.driver.list() == {"cold"}


async def test_later_requests_take_the_fast_path(
    controller: Running, client: Client, pool: str
) -> None:
    first = await client.call(pool, "warm", path="whoami", timeout=60)
    answers = await asyncio.gather(
        *(client.call(pool, "warm", path="whoami", timeout=30) for _ in range(20))
    )
    assert await orphans_forwarded(controller, 1) == 1
    assert {a.json()["worker_id"] for a in answers} == {first.json()["worker_id"]}


@pytest.mark.slow
async def test_fifty_new_keys_at_once_get_fifty_groups(
    controller: Running, client: Client, pool: str
) -> None:
    keys = [f"key-{i}" for i in range(50)]
    answers = await asyncio.gather(
        *(client.call(pool, key, key.encode(), timeout=150) for key in keys)
    )
    assert [a.status for a in answers] == [Status.OK] * 50
    assert [a.body for a in answers] == [k.encode() for k in keys]
    assert await controller.controller.driver.list() == set(keys)
    assert await orphans_forwarded(controller, 50) == 50


@pytest.mark.slow
async def test_idle_group_is_unbound_then_stopped_and_its_queue_deleted(
    make_controller: object, client: Client, pool: str
) -> None:
    running: Running = await make_controller(  # type: ignore[operator]
        # Long enough for each stage to be seen before the next on a loaded machine (1.5 s
        # each was not: once, in CI, the key was unbound before the first check).
        pool,
        groups={"unbind_delay": 6, "stop_delay": 6},
    )
    assert (await client.call(pool, "idle", b"x", timeout=60)).ok
    assert "idle" in await broker.bound_keys(pool)
    tracker = running.controller.session.tracker
    assert tracker is not None
    await eventually(
        lambda: tracker.state.value.groups.get("idle") is GroupStatus.UNBOUND, what="group unbound"
    )
    await eventually(lambda: _not_bound(pool, "idle"), what="queue unbound")
    assert await broker.request_queue(pool, "idle") is not None  # unbound, not yet deleted
    await eventually(lambda: "idle" not in tracker.state.value.groups, what="group gone")
    await eventually(lambda: _is_none(broker.request_queue(pool, "idle")), what="queue deleted")
    await eventually(lambda: _empty(running.controller.driver.list()), what="group stopped")


async def _not_bound(pool: str, key: str) -> bool:
    return key not in await broker.bound_keys(pool)


async def _is_none(awaitable: object) -> bool:
    return await awaitable is None  # type: ignore[misc]


async def _empty(awaitable: object) -> bool:
    return not await awaitable  # type: ignore[misc]


async def _contains(awaitable: object, item: str) -> bool:
    return item in await awaitable  # type: ignore[misc]


async def test_request_while_unbound_is_answered_and_rebinds(
    make_controller: object, client: Client, pool: str
) -> None:
    running: Running = await make_controller(  # type: ignore[operator]
        pool, groups={"unbind_delay": 3.0, "stop_delay": 60}
    )
    first = await client.call(pool, "nap", path="whoami", timeout=60)
    tracker = running.controller.session.tracker
    assert tracker is not None
    await eventually(lambda: _not_bound(pool, "nap"), what="queue unbound")
    again = await client.call(pool, "nap", path="whoami", timeout=60)
    assert again.ok
    assert again.json()["worker_id"] == first.json()["worker_id"]  # same group, never stopped
    assert tracker.state.value.groups["nap"] is GroupStatus.ACTIVE
    # Bound again by the queue loop's next pass (within the 3 s before it would unbind).
    await eventually(
        lambda: _contains(broker.bound_keys(pool), "nap"), what="queue bound again", timeout=30
    )


ODD_KEYS = [
    "with space",
    "a/b/c",
    "..",
    "../../etc/passwd",
    "emoji 🚂🚄",
    "ünïcödé=42,timetable=24",
    "é" * 110,  # 220 bytes, 660 once encoded: the queue has the hashed name
    "k" * 200,
    "x" * 250,
]


async def test_odd_keys_get_their_own_groups(
    controller: Running, client: Client, pool: str
) -> None:
    answers = await asyncio.gather(
        *(client.call(pool, key, path="whoami", timeout=120) for key in ODD_KEYS)
    )
    assert [a.status for a in answers] == [Status.OK] * len(ODD_KEYS)
    assert [a.json()["key"] for a in answers] == ODD_KEYS
    assert await controller.controller.driver.list() == set(ODD_KEYS)


@pytest.mark.parametrize("key", ["", "tab\tseparated"], ids=["empty", "control-character"])
async def test_keys_that_cannot_have_a_queue_are_answered_invalid_key(
    controller: Running, client: Client, pool: str, key: str
) -> None:
    response = await client.call(pool, key, b"x", timeout=30)
    assert response.status == Status.INVALID_KEY
    assert response.json()["key"] == key
    assert await controller.controller.driver.list() == set()


async def test_a_plain_amqp_client_gets_an_answer(controller: Running, pool: str) -> None:
    """Protocol interop: no osrdyne code on the client side, a named reply queue."""
    async with raw_connection(broker.AMQP_URL) as connection:
        channel = await connection.channel()
        replies = await channel.declare_queue(exclusive=True)
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange)
        correlation_id = str(uuid.uuid4())
        await exchange.publish(
            aio_pika.Message(b"raw", correlation_id=correlation_id, reply_to=replies.name),
            routing_key="interop",
            mandatory=True,
        )
        async with replies.iterator(timeout=60) as messages:
            async for message in messages:
                async with message.process():
                    assert message.correlation_id == correlation_id
                    assert message.headers["x-status"] == "ok"
                    assert message.body == b"raw"
                    break


async def test_fire_and_forget_request_without_reply_to_is_processed(
    controller: Running, client: Client, pool: str
) -> None:
    async with raw_connection(broker.AMQP_URL) as connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange)
        await exchange.publish(aio_pika.Message(b"nobody listens"), routing_key="ff")
    await eventually(
        lambda: _contains(controller.controller.driver.list(), "ff"),
        what="group started for a request without reply_to",
    )
    # the group serves a normal call afterwards: the reply-less request did not wedge it
    assert (await client.call(pool, "ff", b"x", timeout=60)).ok


async def _contains(awaitable: object, item: str) -> bool:
    return item in await awaitable  # type: ignore[misc]


async def test_progress_messages_reach_the_caller(
    controller: Running, client: Client, pool: str
) -> None:
    seen: list[dict[str, int]] = []
    response = await client.call(
        pool,
        "progress",
        path="progress",
        timeout=60,
        on_progress=lambda interim: seen.append(interim.json()),
    )
    assert response.ok and response.body == b"done"
    assert seen == [{"step": 1, "of": 3}, {"step": 2, "of": 3}, {"step": 3, "of": 3}]


async def test_a_worker_error_is_told_apart_from_a_protocol_error(
    controller: Running, client: Client, pool: str
) -> None:
    response = await client.call(pool, "failing", b"boom", path="fail", timeout=60)
    assert response.status == Status.WORKER_ERROR
    assert response.json()["error"] == "asked to fail"
    with pytest.raises(Exception) as raised:
        response.raise_for_status()
    assert type(raised.value).__name__ == "WorkerFailed"
    assert json.loads(response.body)["key"] == "failing"
