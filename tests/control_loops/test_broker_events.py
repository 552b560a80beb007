"""Broker events (`rabbitmq_event_exchange`, enabled by scripts/ensure_broker.sh): a request
queue deleted behind the controller's back is made again at once, not at the next listing.

The listing interval is set far beyond the test's bounds, so only the event can explain the
queue coming back, bound with its key.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable

import pytest

from osrdyne import Client, wire
from tests import broker
from tests.conftest import Running
from tests.waiting import eventually

#: The loggers of the request-queue loop and its parts: a pass that failed logs there.
LOOP = {
    f"osrdyne.controller._effects.{name}"
    for name in (
        "queue_loop",
        "queue_operations",
        "queue_repairs",
        "leaderless_queues",
        "migration",
    )
}


async def queue_exists(name: str) -> bool:
    async with broker.management() as http:
        response = await http.get(f"/queues/%2F/{urllib.parse.quote(name, safe='')}")
        return response.status_code == 200


async def test_a_queue_deleted_by_hand_is_made_again_from_the_event(
    make_controller: Callable[..., Awaitable[Running]],
    pool: str,
    client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    running = await make_controller(pool, groups={"loop_interval": 3600, "listing_interval": 3600})
    session = running.controller.session
    assert session is not None and session.events.available, "the event exchange is missing"
    # A readable name, and a key too long for one (its queue's name is hashed).
    keys = ["k", "lang/" + "é" * 100]
    assert wire.PoolNames(pool).key_of_queue(wire.PoolNames(pool).request_queue(keys[1])) is None
    for key in keys:
        assert (await client.call(pool, key, b"before", timeout=60)).ok
    listings = session.queue_loop.listings
    for key in keys:
        name = wire.PoolNames(pool).request_queue(key)
        received = session.events.received
        async with broker.management() as http:
            deleted = await http.delete(f"/queues/%2F/{urllib.parse.quote(name, safe='')}")
            assert deleted.status_code in (200, 204)
        await eventually(
            lambda received=received: session.events.received > received,  # type: ignore[misc]
            what="the event heard",
        )
        # Well within the listing interval: the event made the loop create it again, bound
        # to the request exchange with its key...
        await eventually(
            lambda name=name, key=key: bound(name, pool, key),  # type: ignore[misc]
            what="the queue made again",
            timeout=30,
        )
        # ...and its worker consumes it again (its consumer was cancelled by the deletion:
        # the queue is made again only after a grace, see queue_repairs.DELETED_GRACE).
        assert (await client.call(pool, key, b"after", timeout=60)).ok
    assert session.queue_loop.pokes >= 2  # the deletions, and their bindings'
    # ...without listing every queue of the pool: only the named queue was repaired.
    assert session.queue_loop.listings == listings
    assert session.queue_loop.repairs == 0
    # The bindings' events came first, and their repair waited for the queues' own: no
    # pass tried to bind a queue that was gone (a failed pass lists every queue).
    failed = [r.getMessage() for r in caplog.records if r.name in LOOP and r.levelname != "INFO"]
    assert failed == []


async def test_a_binding_repair_waits_for_its_queue_s_deletion_heard_after_it(
    make_controller: Callable[..., Awaitable[Running]],
    pool: str,
    client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The order RabbitMQ reports a queue deleted by hand in, made wide: the binding's removal
    is handed to the loop (as its event would) 0.3 s before the queue is deleted for real.
    Its repair comes due first, while the queue is gone: it must leave the queue to the
    deletion's own repair, not bind a queue that is gone (a failed pass lists every queue)."""
    running = await make_controller(pool, groups={"loop_interval": 3600, "listing_interval": 3600})
    session = running.controller.session
    assert session is not None and session.events.available
    assert (await client.call(pool, "k", b"before", timeout=60)).ok
    name = wire.PoolNames(pool).request_queue("k")
    listings = session.queue_loop.listings
    session.queue_loop.queue_changed(name, deleted=False)
    await asyncio.sleep(0.3)
    async with broker.management() as http:
        deleted = await http.delete(f"/queues/%2F/{urllib.parse.quote(name, safe='')}")
        assert deleted.status_code in (200, 204)
    await eventually(lambda: bound(name, pool, "k"), what="the queue made again", timeout=30)
    assert (await client.call(pool, "k", b"after", timeout=60)).ok
    failed = [r.getMessage() for r in caplog.records if r.name in LOOP and r.levelname != "INFO"]
    assert failed == []
    assert session.queue_loop.listings == listings


async def test_a_binding_removed_by_hand_is_bound_again_from_the_event(
    make_controller: Callable[..., Awaitable[Running]], pool: str, client: Client
) -> None:
    running = await make_controller(pool, groups={"loop_interval": 3600, "listing_interval": 3600})
    session = running.controller.session
    assert session is not None and session.events.available
    assert (await client.call(pool, "k", b"before", timeout=60)).ok
    names = wire.PoolNames(pool)
    name = names.request_queue("k")
    listings = session.queue_loop.listings
    async with broker.management() as http:
        path = (
            f"/bindings/%2F/e/{urllib.parse.quote(names.request_exchange, safe='')}"
            f"/q/{urllib.parse.quote(name, safe='')}/k"
        )
        removed = await http.delete(path)
        assert removed.status_code in (200, 204), removed.text
    await eventually(lambda: bound(name, pool, "k"), what="the queue bound again", timeout=30)
    assert session.queue_loop.listings == listings


@pytest.mark.slow
async def test_the_loops_own_deletions_do_not_make_it_list_again(
    make_controller: Callable[..., Awaitable[Running]], pool: str, client: Client
) -> None:
    """A group stopped by the controller: the events of its own unbinding and deletion are
    heard, and ask for no new listing."""
    running = await make_controller(
        pool,
        groups={
            "loop_interval": 3600,
            "listing_interval": 3600,
            "unbind_delay": 0.5,
            "stop_delay": 0.5,
        },
    )
    session = running.controller.session
    assert session is not None and session.events.available
    assert (await client.call(pool, "brief", b"x", timeout=60)).ok
    name = wire.PoolNames(pool).request_queue("brief")
    pokes, received = session.queue_loop.pokes, session.events.received
    await eventually(lambda: _gone(name), what="the group's queue deleted", timeout=60)
    # Its unbinding and deletion were both heard...
    await eventually(lambda: session.events.received >= received + 2, what="the events")
    # ...and neither asked the loop for a listing (a deletion by hand does: the test above).
    assert session.queue_loop.pokes == pokes


async def bound(name: str, pool: str, key: str) -> bool:
    async with broker.management() as http:
        response = await http.get(f"/queues/%2F/{urllib.parse.quote(name, safe='')}/bindings")
        if response.status_code != 200:
            return False
        return any(
            b["source"] == wire.PoolNames(pool).request_exchange and b["routing_key"] == key
            for b in response.json()
        )


async def _gone(name: str) -> bool:
    return not await queue_exists(name)


async def test_while_events_are_heard_the_queues_are_listed_rarely(
    make_controller: Callable[..., Awaitable[Running]], pool: str, client: Client
) -> None:
    """The full listing's cost grows with the pool's keys: while events say what others
    change, it runs every `listing_interval`, not at each pass; once the events' channel is
    gone, every `loop_interval` again."""
    running = await make_controller(pool, groups={"loop_interval": 0.2, "listing_interval": 3600})
    session = running.controller.session
    assert session is not None and session.events.available
    loop = session.queue_loop
    assert loop.events_heard and loop.listing_interval == 3600
    listings = loop.listings
    passes = _passes(running)
    # Passes go on (a new key is served, and the loop waits `loop_interval` between them)...
    assert (await client.call(pool, "k", b"x", timeout=60)).ok
    await eventually(lambda: _passes(running) >= passes + 10, what="ten passes")
    # ...without a listing.
    assert loop.listings == listings
    assert session.events.channel is not None
    await session.events.channel.close()
    assert not loop.events_heard and loop.listing_interval == 0.2
    await eventually(lambda: loop.listings >= listings + 3, what="listings again")


def _passes(running: Running) -> float:
    """The request-queue loop's passes so far (its pass-time histogram's count)."""
    metrics = running.controller.metrics
    return next(
        sample.value
        for family in metrics.loop_seconds.collect()
        for sample in family.samples
        if sample.name.endswith("_count") and sample.labels.get("loop") == "queues"
    )
