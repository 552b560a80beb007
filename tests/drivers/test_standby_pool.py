"""The standby hand-off shared by the drivers (`drivers.standby.StandbyPool`), without I/O.

The assignment is a plain function here, standing in for the controller's (which publishes on
the broker) so that each of its outcomes can be made on demand: taken, not waiting yet, an
unknown outcome, a slow one while another key asks. The real one is exercised end to end in
tests/dispatch/test_standby.py (subprocess) and tests/drivers/test_docker_standby.py (docker).
"""

from __future__ import annotations

import asyncio

import pytest

from drivers import standby

pytestmark = pytest.mark.timeout(60)


class Workers:
    """Standby workers named by strings, and what became of them."""

    def __init__(self) -> None:
        self.discarded: list[str] = []
        self.pool: standby.StandbyPool[str] = standby.StandbyPool(
            queue=lambda w: f"queue-{w}", name=lambda w: w, discard=self.discard
        )

    async def discard(self, worker: str) -> None:
        self.discarded.append(worker)


async def test_no_assignment_attached_takes_none() -> None:
    workers = Workers()
    workers.pool.add("a")
    assert await workers.pool.take("k") is None
    assert workers.pool.waiting == ("a",)


async def test_the_oldest_waiting_worker_takes_the_key() -> None:
    workers = Workers()
    told: list[tuple[str, str]] = []

    async def assign(queue: str, key: str) -> bool:
        told.append((queue, key))
        return True

    workers.pool.attach(assign)
    for name in ("a", "b", "c"):
        workers.pool.add(name)
    assert await workers.pool.take("k1") == "a"
    assert await workers.pool.take("k2") == "b"
    assert told == [("queue-a", "k1"), ("queue-b", "k2")]
    assert workers.pool.waiting == ("c",) and len(workers.pool) == 1


async def test_one_not_waiting_yet_stays_for_a_later_key_and_the_next_is_tried() -> None:
    workers = Workers()
    ready = {"b"}

    async def assign(queue: str, key: str) -> bool:
        return queue.removeprefix("queue-") in ready

    workers.pool.attach(assign)
    workers.pool.add("a")
    workers.pool.add("b")
    assert await workers.pool.take("k") == "b"
    assert workers.pool.waiting == ("a",)
    assert await workers.pool.take("k2") is None  # none ready: none taken, none lost
    assert workers.pool.waiting == ("a",) and workers.discarded == []


async def test_an_unknown_outcome_discards_the_worker_it_must_never_serve_two_keys() -> None:
    workers = Workers()

    async def assign(queue: str, key: str) -> bool:
        if queue == "queue-a":
            raise ConnectionError("the channel closed before the confirm")
        return True

    workers.pool.attach(assign)
    workers.pool.add("a")
    workers.pool.add("b")
    assert await workers.pool.take("k") == "b"
    assert workers.discarded == ["a"]
    assert workers.pool.waiting == () and workers.pool.taking == ()


async def test_a_worker_being_given_a_key_is_not_given_another_nor_read_back() -> None:
    workers = Workers()
    release = asyncio.Event()

    async def assign(queue: str, key: str) -> bool:
        if key == "slow":
            await release.wait()
        return True

    workers.pool.attach(assign)
    workers.pool.add("a")
    workers.pool.add("b")
    slow = asyncio.create_task(workers.pool.take("slow"))
    await asyncio.sleep(0)
    assert workers.pool.taking == ("a",)
    # A driver reading its standby workers again meanwhile does not put it back.
    workers.pool.replace(["a", "b"])
    assert workers.pool.waiting == ("b",)
    assert await workers.pool.take("fast") == "b"
    release.set()
    assert await slow == "a"
    assert workers.pool.waiting == () and workers.pool.taking == ()


async def test_detached_meanwhile_stops_taking() -> None:
    workers = Workers()

    async def assign(queue: str, key: str) -> bool:
        workers.pool.attach(None)  # the session ended while this one was told
        return False

    workers.pool.attach(assign)
    workers.pool.add("a")
    workers.pool.add("b")
    assert await workers.pool.take("k") is None
    assert sorted(workers.pool.waiting) == ["a", "b"]


def test_clear_hands_back_every_waiting_worker() -> None:
    workers = Workers()
    workers.pool.add("a")
    workers.pool.add("b")
    assert workers.pool.clear() == ["a", "b"]
    assert len(workers.pool) == 0
