"""Standby containers of the docker driver, end to end: a real Docker engine (our own
dockerd), the real broker and controller, containers of the real echo worker (the host's
interpreter mounted into a busybox image). Standby containers run before any request; a new
key is answered by one (the container existed before the request), renamed as the key's
first container, and replaced; the caps count them; one that dies is replaced; closing the
driver removes them; a restarted driver stops an assigned standby it has no record of."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from drivers import names
from drivers.docker import LABEL_STANDBY, DockerDriver
from osrdyne import Client, PoolNames, Status
from osrdyne.controller import Controller
from tests import broker
from tests.docker_engine import pool_containers
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)


async def _queue_exists(name: str) -> bool:
    async with broker.management() as http:
        quoted = urllib.parse.quote(name, safe="")
        response = await http.get(f"/queues/{broker._vhost()}/{quoted}")
    return response.status_code == 200


async def _waiting(driver: DockerDriver, pool: str, count: int) -> set[str]:
    """Names of the standby containers once `count` of them wait for a key."""

    async def ready() -> set[str] | None:
        workers = driver.standby_workers()
        if len(workers) != count:
            return None
        for w in workers:
            if not await _queue_exists(PoolNames(pool).standby_queue(w.worker_id)):
                return None
        return {w.worker_id for w in workers}

    found: set[str] = await eventually(ready, timeout=120, what=f"{count} standby containers")
    return found


def _standby_containers(docker_client: Any, pool: str) -> list[Any]:
    return pool_containers(docker_client, pool, all=False, label=LABEL_STANDBY)


@pytest.fixture
def start(echo_docker_driver: Callable[..., DockerDriver], run_controller: Any) -> Any:
    """Runs a controller of the test's pool on a new echo docker driver with `settings`."""

    async def start(**settings: Any) -> tuple[DockerDriver, Controller, asyncio.Task[None]]:
        driver = echo_docker_driver(**settings)
        controller, task = await run_controller(driver)
        return driver, controller, task

    return start


async def test_a_new_key_is_answered_by_a_standby_container_that_is_replaced(
    start: Any,
    echo_docker_driver: Callable[..., DockerDriver],
    client: Client,
    pool: str,
    docker_client: Any,
) -> None:
    driver, controller, task = await start(standby=2)
    before = await _waiting(driver, pool, 2)
    ids_before = {c.name: c.id for c in _standby_containers(docker_client, pool)}
    assert set(ids_before) == before
    status = controller.status()
    assert status.admission is not None and status.admission.standby == 2

    answer = await client.call(pool, "k é", path="whoami", timeout=90)
    assert answer.ok, answer
    served = answer.json()
    assert served["key"] == "k é" and served["worker_id"] in before
    assert await driver.list() == {"k é"}
    # The container that answered existed before the request; it is now the key's first
    # container, under that name.
    renamed = names.object_name(pool, "k é", suffix=f"0-{driver.version}")
    assert docker_client.containers.get(renamed).id == ids_before[served["worker_id"]]
    after = await _waiting(driver, pool, 2)
    assert served["worker_id"] not in after and len(after - before) == 1

    # Later requests of the key go to it only; the waiting ones take none.
    answers = await asyncio.gather(
        *(client.call(pool, "k é", path="whoami", timeout=60) for _ in range(10))
    )
    assert {a.json()["worker_id"] for a in answers} == {served["worker_id"]}

    # The controller stops: its driver removes the waiting standbys, keeps the keyed one.
    controller.stop()
    await asyncio.wait_for(task, 60)
    left = {c.name for c in pool_containers(docker_client, pool, all=False)}
    assert left == {renamed}
    # A restarted controller's driver has no record of the assignment: it stops the renamed
    # standby (its key unknown to it) and starts standbys anew.
    restarted = echo_docker_driver(standby=2)
    assert await restarted.list() == set()
    assert renamed not in {c.name for c in pool_containers(docker_client, pool)}
    assert len(restarted.standby_workers()) == 2


async def test_standby_containers_count_are_replaced_and_go_with_the_controller(
    start: Any, client: Client, pool: str, docker_client: Any
) -> None:
    driver, controller, task = await start(standby=1, max_containers=2)
    assert driver.capacity() == 1
    (first,) = await _waiting(driver, pool, 1)
    docker_client.containers.get(first).kill()

    async def replaced() -> bool:
        return first not in await _waiting(driver, pool, 1)

    await eventually(replaced, timeout=120, what="the dead standby replaced")
    assert (await client.call(pool, "one", timeout=90)).ok
    refused = await client.call(pool, "two", timeout=60)
    assert refused.status == Status.OVERLOADED
    assert refused.json()["details"]["reason"] == "driver_capacity"
    await _waiting(driver, pool, 1)
    controller.stop()  # and its driver is closed
    await asyncio.wait_for(task, 60)
    # The waiting standby is gone; the one that took "one" serves it, kept as keyed ones are.
    serving = names.object_name(pool, "one", suffix=f"0-{driver.version}")
    assert [c.name for c in _standby_containers(docker_client, pool)] == [serving]


async def test_a_growing_group_takes_the_standby_containers_that_wait(
    start: Any, client: Client, pool: str, docker_client: Any
) -> None:
    """Scale-out through the standby containers: `resize` gives the key to the two that
    wait (they existed before the resize), renames them as the group's indexes 1 and 2,
    replaces them, and all three serve the key; shrinking back removes them."""
    driver, _, _ = await start(standby=2, max_containers=8)
    await _waiting(driver, pool, 2)
    first = (await client.call(pool, "grown", path="whoami", timeout=90)).json()
    waiting = await _waiting(driver, pool, 2)
    ids = {c.name: c.id for c in _standby_containers(docker_client, pool)}
    await driver.list()

    await driver.resize("grown", 3)
    renamed = [names.object_name(pool, "grown", suffix=f"{i}-{driver.version}") for i in (1, 2)]
    assert {docker_client.containers.get(n).id for n in renamed} == {ids[n] for n in waiting}
    replacements = await _waiting(driver, pool, 2)
    assert not replacements & waiting

    seen: set[str] = set()

    async def every_worker_answers() -> bool:
        answers = await asyncio.gather(
            *(client.call(pool, "grown", path="whoami", timeout=60) for _ in range(9))
        )
        seen.update(a.json()["worker_id"] for a in answers if a.json()["key"] == "grown")
        return seen == {first["worker_id"], *waiting}

    await eventually(every_worker_answers, what="the three containers answering the key")
    await driver.resize("grown", 1)
    await driver.list()
    assert len(driver.describe()["grown"]) == 1
    taken = {ids[n] for n in waiting}
    assert not taken & {c.id for c in pool_containers(docker_client, pool)}
