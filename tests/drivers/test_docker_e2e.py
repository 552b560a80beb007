"""End to end: a controller whose worker groups are containers of the docker driver.

A client calls a key through osrdyne; the controller makes the group, the docker driver runs
it as containers of the real echo worker (the host's interpreter, mounted read-only into a
busybox image), and the answer comes back through the broker.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from osrdyne import Client
from tests.docker_engine import pool_containers
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)


async def test_calls_are_answered_by_worker_containers(
    pool: str,
    client: Client,
    echo_docker_driver: Any,
    run_controller: Any,
    docker_client: Any,
) -> None:
    key = "Infra/42 é — spaces & ünïcode"
    await run_controller(echo_docker_driver(workers=2))
    answer = await client.call(pool, key, b"hi", timeout=90)
    assert answer.ok, answer
    assert answer.body == b"hi"
    who = json.loads((await client.call(pool, key, path="whoami", timeout=60)).body)
    # Both workers of the group run (the second may still be starting: a bound, waited).
    containers = await eventually(
        lambda: _running(docker_client, pool, 2), what="two worker containers", timeout=60
    )
    assert who["key"] == key
    assert who["worker_id"] in {c.name for c in containers}
    assert {c.labels["osrdyne.key"] for c in containers} == {key}


def _running(docker_client: Any, pool: str, count: int) -> list[Any] | None:
    """The running containers of `pool` once there are `count` of them."""
    found = pool_containers(docker_client, pool, all=False)
    return found if len(found) == count else None
