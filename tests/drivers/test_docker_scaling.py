"""The group scaler on the real docker driver (osrdyne's own dockerd): a hot key's group grows
from one container to `max_workers` and back to one, every call answered once, `ok`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from osrdyne import Client
from osrdyne.controller import Controller
from tests.conftest import controller_settings
from tests.docker_engine import pool_containers, remove_pool_containers
from tests.scaling.hot_key import SCALING, WORKER_ENV, grow_and_shrink

pytestmark = pytest.mark.timeout(300)

MAX = 3


async def test_a_hot_key_grows_to_its_maximum_containers_and_back_to_one(
    pool: str,
    tmp_path: Path,
    client: Client,
    docker_driver: Any,
    docker_client: Any,
    amqp_uri: str,
    host_python: tuple[str, list[dict[str, Any]]],
    repo: Path,
) -> None:
    python, mounts = host_python
    driver = docker_driver(
        pool=pool,
        amqp_uri=amqp_uri,
        workers=1,
        stop_timeout=10,
        command=[python, "-m", "worker_sdk.examples.echo"],
        environment={"PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1", **WORKER_ENV},
        volumes=mounts,
    )
    settings = controller_settings(pool, tmp_path, scaling={**SCALING, "max_workers": MAX})
    controller = Controller(settings, driver=driver)
    task = asyncio.create_task(controller.run(), name=f"controller {pool}")

    def running() -> int:
        return len(pool_containers(docker_client, pool, all=False))

    try:
        await asyncio.wait_for(controller.wait_leader(), 30)
        await grow_and_shrink(
            controller, client, pool, key="hot", most=MAX, drained=lambda: running() == 1,
            timeout=120,
        )  # fmt: skip
    finally:
        controller.stop()
        await asyncio.wait_for(task, 60)
        remove_pool_containers(docker_client, pool)
