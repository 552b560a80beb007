"""Standby workers of the subprocess driver, end to end: real broker, real controller, real
echo worker processes. Standby workers run before any request, a new key is answered by one
of them (its pid existed before the request), a replacement is started, the caps count them,
they never take a request before their key, one that dies is replaced, and they stop with the
pool. A command that does not support standby (the protocol-only worker of tests/interop)
keeps being started per key."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika

from drivers.subprocess import SubprocessDriver
from osrdyne import Client, PoolNames, Status, wire
from tests import broker
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

MakeController = Callable[..., Awaitable[Running]]


def _standby(*, standby: int = 2, **subprocess: Any) -> dict[str, Any]:
    return {"driver": {"subprocess": {"standby": standby, **subprocess}}}


def _driver(running: Running) -> SubprocessDriver:
    driver = running.controller.driver
    assert isinstance(driver, SubprocessDriver)
    return driver


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _queue_exists(name: str) -> bool:
    async with broker.management() as http:
        response = await http.get(f"/queues/{broker._vhost()}/{urllib.parse.quote(name, safe='')}")
    return response.status_code == 200


async def _waiting(running: Running, count: int) -> dict[str, int]:
    """The standby workers (worker id -> pid) once `count` of them wait for a key (each
    has declared its standby queue)."""

    async def ready() -> dict[str, int] | None:
        workers = _driver(running).standby_workers()
        if len(workers) != count or any(w.pid is None for w in workers):
            return None
        names = PoolNames(running.controller.settings.pool)
        for w in workers:
            if not await _queue_exists(names.standby_queue(w.worker_id)):
                return None
        return {w.worker_id: w.pid for w in workers if w.pid is not None}

    found: dict[str, int] = await eventually(ready, timeout=60, what=f"{count} standby workers")
    return found


async def test_a_new_key_is_answered_by_a_standby_worker_and_it_is_replaced(
    make_controller: MakeController, client: Client, pool: str
) -> None:
    running = await make_controller(pool, **_standby(standby=2))
    before = await _waiting(running, 2)
    assert await broker.request_queues(pool) == []  # no request yet, no key
    status = running.controller.status()
    assert status.admission is not None and status.admission.standby == 2
    assert {w.worker_id for w in status.standby_workers or ()} == set(before)

    answer = await client.call(pool, "k1", path="whoami", timeout=60)
    assert answer.ok, answer
    served = answer.json()
    assert served["key"] == "k1"
    assert served["pid"] in before.values()  # started before the request was made
    assert served["worker_id"] in before
    assert [w.pid for w in _driver(running).describe()["k1"]] == [served["pid"]]
    assert await _driver(running).list() == {"k1"}

    after = await _waiting(running, 2)  # a replacement took its place
    assert served["worker_id"] not in after
    # Its standby queue went with the key (closed off the key's path): no second
    # assignment can reach it.
    names = PoolNames(pool)
    standby_queue = names.standby_queue(served["worker_id"])

    async def gone() -> bool:
        return not await _queue_exists(standby_queue)

    await eventually(gone, what="the served standby worker's standby queue gone")
    assert len(set(after) - set(before)) == 1
    gauge = running.controller.metrics.standby_workers
    await eventually(lambda: gauge._value.get() == 2, what="the standby gauge")

    second = await client.call(pool, "k2", path="whoami", timeout=60)
    assert second.ok and second.json()["pid"] in after.values()


async def test_a_standby_worker_takes_no_request_before_its_key(
    make_controller: MakeController, client: Client, pool: str, amqp_url: str
) -> None:
    running = await make_controller(pool, **_standby(standby=1))
    first = await _waiting(running, 1)
    answer = await client.call(pool, "busy", path="whoami", timeout=60)
    assert answer.ok and answer.json()["pid"] in first.values()
    spare = await _waiting(running, 1)  # the replacement, waiting
    answers = await asyncio.gather(
        *(client.call(pool, "busy", path="whoami", timeout=30) for _ in range(30))
    )
    assert {a.json()["pid"] for a in answers} == {answer.json()["pid"]}
    queue = await broker.request_queue(pool, "busy")
    assert queue is not None
    # Only the keyed worker consumes the key's queue; the spare waits on its own queue.
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(PoolNames(pool).request_queue("busy"), passive=True)
        assert declared.declaration_result.consumer_count == 1
    assert all(_alive(pid) for pid in spare.values())
    assert set(_driver(running).describe()) == {"busy"}


async def test_a_malformed_assignment_is_refused_and_the_worker_stays_standby(
    make_controller: MakeController, client: Client, pool: str, amqp_url: str
) -> None:
    running = await make_controller(pool, **_standby(standby=1))
    ((worker_id, pid),) = (await _waiting(running, 1)).items()
    names = PoolNames(pool)
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        for body in (b"not json", b'{"pool": "another", "key": "x"}', b"[1]"):
            await channel.default_exchange.publish(
                aio_pika.Message(body), routing_key=names.standby_queue(worker_id)
            )
    await asyncio.sleep(0.5)  # let it read them (nothing to wait on: it must do nothing)
    assert await _waiting(running, 1) == {worker_id: pid}
    answer = await client.call(pool, "after", path="whoami", timeout=60)
    assert answer.ok and answer.json()["pid"] == pid


async def test_standby_workers_count_against_the_caps(
    make_controller: MakeController, client: Client, pool: str
) -> None:
    running = await make_controller(pool, **_standby(standby=2, max_processes=3))
    await _waiting(running, 2)
    assert _driver(running).capacity() == 1
    assert (await client.call(pool, "one", timeout=60)).ok
    refused = await client.call(pool, "two", timeout=60)
    assert refused.status == Status.OVERLOADED
    assert refused.json()["details"]["reason"] == "driver_capacity"


async def test_a_standby_worker_that_dies_is_replaced(
    make_controller: MakeController, client: Client, pool: str
) -> None:
    running = await make_controller(pool, **_standby(standby=1))
    ((worker_id, pid),) = (await _waiting(running, 1)).items()
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: not _alive(pid), what="standby killed")

    async def replaced() -> bool:
        waiting = await _waiting(running, 1)
        return next(iter(waiting.values())) != pid

    await eventually(replaced, timeout=60, what="standby replaced")
    answer = await client.call(pool, "later", path="whoami", timeout=60)
    assert answer.ok and answer.json()["pid"] != pid


async def test_stopping_the_pool_stops_its_standby_workers(
    make_controller: MakeController, pool: str
) -> None:
    running = await make_controller(pool, **_standby(standby=2))
    pids = list((await _waiting(running, 2)).values())
    await running.stop()
    assert not any(_alive(pid) for pid in pids)


async def test_a_command_without_standby_support_is_started_per_key(
    make_controller: MakeController, client: Client, pool: str
) -> None:
    plain = Path(__file__).resolve().parents[1] / "interop" / "plain_worker.py"
    running = await make_controller(
        pool, driver={"subprocess": {"command": [sys.executable, str(plain)], "standby": 0}}
    )
    assert _driver(running).standby_workers() == ()
    answer = await client.call(pool, "plain", b"x", timeout=60)
    assert answer.ok and answer.body == b"plain: x"
    status = running.controller.status()
    assert status.admission is not None and status.admission.standby == 0


def test_an_assignment_is_read_back_only_when_it_is_the_protocol_s() -> None:
    names = PoolNames("p")
    assert wire.read_assignment(wire.assignment(names, "gare é"), pool="p") == (
        "gare é",
        names.request_queue("gare é"),
    )
    for body in (
        b"\xff",
        b"[]",
        wire.assignment(PoolNames("q"), "k"),
        b'{"pool": "p", "key": "", "requests_queue": "p-req-"}',
        b'{"pool": "p", "key": "k", "requests_queue": "p-req-other"}',
        b'{"pool": "p", "key": "k", "requests_queue": "p-req-k"}' + b" " * 5000,
    ):
        assert isinstance(wire.read_assignment(body, pool="p"), str), body


async def test_a_keyed_standby_worker_that_dies_comes_back_as_a_worker_of_its_key(
    make_controller: MakeController, client: Client, pool: str
) -> None:
    running = await make_controller(pool, **_standby(standby=1))
    (pid,) = (await _waiting(running, 1)).values()
    answer = await client.call(pool, "kept", path="whoami", timeout=60)
    assert answer.ok and answer.json()["pid"] == pid
    os.kill(pid, signal.SIGKILL)
    again = await client.call(pool, "kept", path="whoami", timeout=60)
    assert again.ok and again.json()["key"] == "kept" and again.json()["pid"] != pid
    assert [w.pid for w in _driver(running).describe()["kept"]] == [again.json()["pid"]]


async def test_a_growing_group_takes_the_standby_workers_that_wait(
    make_controller: MakeController, client: Client, pool: str
) -> None:
    """Scale-out through the standby workers: `resize` gives the key to the two that wait
    (their pids ran before the resize), new standby workers replace them, all three serve
    the key; one of them killed comes back as a worker of the key, and the group shrinks
    back to one worker, the others ended."""
    running = await make_controller(
        pool, **_standby(standby=2, env={"WORKER_CONCURRENCY": "1"}, max_processes=8)
    )
    driver = _driver(running)
    await _waiting(running, 2)
    first = (await client.call(pool, "hot", path="whoami", timeout=60)).json()
    waiting = await _waiting(running, 2)

    await driver.resize("hot", 3)
    grown = {w.pid for w in driver.describe()["hot"]}
    assert grown == {first["pid"], *waiting.values()}  # no process started for the group
    replacements = await _waiting(running, 2)
    assert not set(replacements.values()) & grown

    async def every_worker_answers() -> bool:
        answers = await asyncio.gather(
            *(client.call(pool, "hot", path="whoami", timeout=60) for _ in range(6))
        )
        seen.update(a.json()["pid"] for a in answers if a.ok and a.json()["key"] == "hot")
        return seen == grown

    seen: set[int] = set()
    await eventually(every_worker_answers, what="the three workers of the key answering")

    taken_pid = next(iter(waiting.values()))
    os.kill(taken_pid, signal.SIGKILL)

    async def restarted() -> bool:
        workers = driver.describe()["hot"]
        return len(workers) == 3 and all(w.pid not in (None, taken_pid) for w in workers)

    await eventually(restarted, what="the killed worker restarted as a worker of the key")
    (restarted_worker,) = [w for w in driver.describe()["hot"] if w.pid not in grown]
    assert "standby" not in restarted_worker.worker_id  # a worker of the key's slot now
    seen.clear()
    grown = {w.pid for w in driver.describe()["hot"] if w.pid is not None}
    await eventually(every_worker_answers, what="the restarted worker answering its key")

    await driver.resize("hot", 1)
    left = grown - {w.pid for w in driver.describe()["hot"]}
    assert len(left) == 2

    async def drained() -> bool:
        return not any(_alive(pid) for pid in left)

    await eventually(drained, what="the two workers taken away ended")
    assert (await client.call(pool, "hot", path="whoami", timeout=60)).ok
    assert len(await _waiting(running, 2)) == 2  # the standby workers untouched
