"""End to end: a controller whose worker groups are containers of the docker driver.

A client calls a key through osrdyne; the controller makes the group, the docker driver runs
it as containers of the real echo worker (the host's interpreter, mounted read-only into a
busybox image), and the answer comes back through the broker.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from osrdyne import Client
from osrdyne.controller import Controller
from tests.conftest import controller_settings

pytestmark = pytest.mark.timeout(300)


async def test_calls_are_answered_by_worker_containers(
    pool: str,
    tmp_path: Path,
    client: Client,
    docker_driver: Any,
    docker_client: Any,
    amqp_uri: str,
    host_python: tuple[str, list[dict[str, Any]]],
    repo: Path,
) -> None:
    key = "Infra/42 é — spaces & ünïcode"
    python, mounts = host_python
    driver = docker_driver(
        pool=pool,
        amqp_uri=amqp_uri,
        workers=2,
        command=[python, "-m", "worker_sdk.examples.echo"],
        environment={
            "PYTHONPATH": str(repo),
            "PYTHONDONTWRITEBYTECODE": "1",
            "WORKER_ACTIVITY_INTERVAL": "0.5",
            "WORKER_DRAIN_TIMEOUT": "2",
        },
        volumes=mounts,
    )
    controller = Controller(controller_settings(pool, tmp_path), driver=driver)
    task = asyncio.create_task(controller.run(), name=f"controller {pool}")
    try:
        await asyncio.wait_for(controller.wait_leader(), 30)
        answer = await client.call(pool, key, b"hi", timeout=90)
        assert answer.ok, answer
        assert answer.body == b"hi"
        who = json.loads((await client.call(pool, key, path="whoami", timeout=60)).body)
        containers = docker_client.containers.list(filters={"label": [f"osrdyne.pool={pool}"]})
        assert who["key"] == key
        assert who["worker_id"] in {c.name for c in containers}
        assert {c.labels["osrdyne.key"] for c in containers} == {key}
        assert len(containers) == 2
    finally:
        controller.stop()
        await asyncio.wait_for(task, 30)
        for container in docker_client.containers.list(
            all=True, filters={"label": [f"osrdyne.pool={pool}"]}
        ):
            container.remove(force=True)
