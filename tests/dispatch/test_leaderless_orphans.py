"""A request that reaches the orphans while its key's queue is unbound under an Active group
(deleted as leaderless, or unbound by someone else) is held until the queue is bound again,
then forwarded once.

The request-queue loop deletes a queue the broker never elected a leader for in two steps:
it unbinds the queue, then waits for the broker's delete (5 s for such a queue). The key's
group stays Active all along, so the orphan processor, going by the loop's published state,
used to forward what reached the orphans meanwhile into the unbound queue, which the
alternate exchange sent straight back to the orphans: one request forwarded 674 times in a
SIGKILL run (docs/reliability.md). The loop now publishes the key as unbound before it
unbinds the queue.

Real broker, real controller (the in-memory driver: no worker consumes the queue, as none
can consume a leaderless one). Only the leaderlessness is played: the management API's view
of the queue shows no leader, and the broker's delete is held (instead of its 5 s) until the
orphan processor has either held the request or forwarded it, so the count does not depend
on timing. Someone else's unbinding is real: the loop hears it as a broker event and binds
the queue again after a grace, during which it used to say the queue was bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aio_pika
import aio_pika.exceptions
import pytest

from drivers.memory import MemoryDriver
from osrdyne.controller import Controller
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.wire import PoolNames
from tests import broker
from tests.conftest import raw_connection, running_controller
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


async def _warm(session: Any, key: str) -> None:
    """Start `key`'s group and wait until the loop publishes its queue as bound."""
    generation = session.warm(key, by="test")
    await asyncio.wait_for(
        session.queue_loop.reached.wait_for(
            lambda r: r.generation >= generation and r.actual.get(key) is GroupStatus.ACTIVE
        ),
        60,
    )


async def test_an_orphan_during_a_leaderless_delete_is_held_then_forwarded_once(
    pool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, names = "leaderless", PoolNames(pool)
    name = names.request_queue(key)
    async with running_controller(
        pool,
        tmp_path,
        MemoryDriver(),
        queues={"leaderless_after": 0.5},
        groups={"unbind_delay": 300, "stop_delay": 300},
    ) as controller:
        session = controller.session
        assert session is not None
        loop, reached = session.queue_loop, session.queue_loop.reached
        await _warm(session, key)

        # The management API shows the key's queue without a leader until it is deleted, and
        # the broker's delete waits for the test.
        api = loop._api
        real_queue, real_delete = api.queue, api.delete_queue
        leaderless, deleting, release = True, asyncio.Event(), asyncio.Event()

        async def queue(queried: str) -> dict[str, Any] | None:
            info = await real_queue(queried)
            if queried != name or not leaderless or info is None:
                return info
            info = {k: v for k, v in info.items() if k != "messages"}
            return {**info, "members": ["node"], "online": ["node"]}

        async def delete_queue(deleted: str) -> None:
            nonlocal leaderless
            if deleted == name:
                deleting.set()
                await release.wait()
                leaderless = False
            await real_delete(deleted)

        monkeypatch.setattr(api, "queue", queue)
        monkeypatch.setattr(api, "delete_queue", delete_queue)

        # The orphan processor waits on the loop's state for a queue not bound (yet).
        held = asyncio.Event()
        real_wait_for = reached.wait_for

        async def wait_for(predicate: Callable[[Any], bool]) -> Any:
            if "OrphanProcessor" in predicate.__qualname__ and not predicate(reached.value):
                held.set()
            return await real_wait_for(predicate)

        monkeypatch.setattr(reached, "wait_for", wait_for)

        loop.suspect(key)
        await asyncio.wait_for(deleting.wait(), 60)  # unbound; its deletion under way
        async with raw_connection(broker.AMQP_URL) as connection:
            channel = await connection.channel()
            exchange = await channel.get_exchange(names.request_exchange)
            await exchange.publish(aio_pika.Message(b"held"), routing_key=key, mandatory=True)
        forwarded = controller.metrics.orphans.labels("forwarded")
        await eventually(
            lambda: held.is_set() or forwarded._value.get() >= 1,
            what="the orphan held or forwarded",
        )
        release.set()

        await _arrived(controller, names, key)
        assert held.is_set()
        assert forwarded._value.get() == 1
        assert controller.metrics.registry.get_sample_value(
            "osrdyne_queue_operations_total", {"op": "leaderless_delete"}
        )


async def test_an_orphan_after_someone_else_unbinds_the_queue_is_forwarded_once(
    pool: str, tmp_path: Path
) -> None:
    key, names = "unbound", PoolNames(pool)
    name = names.request_queue(key)
    async with running_controller(
        pool, tmp_path, MemoryDriver(), groups={"unbind_delay": 300, "stop_delay": 300}
    ) as controller:
        session = controller.session
        assert session is not None
        loop = session.queue_loop
        if not loop.events_heard:
            pytest.skip("the broker's event exchange (rabbitmq_event_exchange) is not enabled")
        await _warm(session, key)
        heard = loop.pokes
        async with raw_connection(broker.AMQP_URL) as connection:
            channel = await connection.channel()
            queue = await channel.get_queue(name, ensure=False)
            await queue.unbind(names.request_exchange, routing_key=key)
            # Published once the loop heard of it, within the grace before its repair.
            await eventually(lambda: loop.pokes > heard, what="the unbinding heard")
            exchange = await channel.get_exchange(names.request_exchange)
            await exchange.publish(aio_pika.Message(b"held"), routing_key=key, mandatory=True)
        await _arrived(controller, names, key)
        assert controller.metrics.orphans.labels("forwarded")._value.get() == 1


async def _arrived(controller: Controller, names: PoolNames, key: str) -> None:
    """Until the request is in `key`'s queue and no orphan is under way (an orphan is counted
    as forwarded once its handler ends)."""
    session = controller.session
    assert session is not None
    orphans = next(c for c in session.consumers if c.queue_name == names.orphan_queue)
    name = names.request_queue(key)

    async def arrived() -> bool:
        ready = await broker.ready_messages(name)
        return bool(ready.get(name)) and not orphans._in_flight

    await eventually(arrived, what=f"the request in the queue of {key!r}", timeout=60)
