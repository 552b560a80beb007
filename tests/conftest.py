"""Fixtures shared by every test: a real broker, unique pools, controllers, clients.

The broker is the local RabbitMQ (or RABBITMQ_URL), found once per session; `scripts/test.sh`
makes sure it runs. Each test gets pools with unique names whose broker objects are deleted
afterwards, and fails if it leaves asyncio tasks behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from osrdyne import Client
from osrdyne.controller import Controller
from osrdyne.settings import Settings
from tests import broker


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long soak tests too")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
async def amqp_url() -> str:
    """The broker's URL, once it answers (it must: `scripts/test.sh` starts it)."""
    connection = await aio_pika.connect(broker.AMQP_URL, timeout=10)
    await connection.close()
    return broker.AMQP_URL


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks of its own running."""
    before = asyncio.all_tasks()
    yield
    for _ in range(50):
        leaked = {t for t in asyncio.all_tasks() - before if not t.done()}
        leaked.discard(asyncio.current_task())  # type: ignore[arg-type]
        if not leaked:
            return
        await asyncio.sleep(0.05)
    names = sorted(t.get_name() for t in leaked)
    for task in leaked:
        task.cancel()
    pytest.fail(f"test left {len(leaked)} task(s) running: {names}")


@pytest.fixture
async def make_pool(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], str]]:
    """Unique pool names; every object of those pools is deleted after the test."""
    pools: list[str] = []
    test = request.node.name.split("[")[0].replace("_", "")[:12]

    def make() -> str:
        pools.append(f"t-{test}-{uuid.uuid4().hex[:6]}")
        return pools[-1]

    yield make
    for pool in pools:
        await broker.delete_pool_objects(pool)


@pytest.fixture
def pool(make_pool: Callable[[], str]) -> str:
    return make_pool()


def controller_settings(pool: str, tmp_path: Path, **overrides: Any) -> Settings:
    """Settings for a controller under test: short delays, echo workers, quick reports."""
    settings: dict[str, Any] = {
        "pool": pool,
        "amqp": {"url": broker.AMQP_URL, "management_url": broker.MANAGEMENT_URL},
        "groups": {
            "unbind_delay": 30,
            "stop_delay": 30,
            "loop_interval": 1.0,
            "activity_fold": 0.2,
        },
        "api": {"enabled": False},
        "driver": {
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
                "env": {"WORKER_ACTIVITY_INTERVAL": "0.5", "WORKER_DRAIN_TIMEOUT": "5"},
                "owner": str(tmp_path / "workers"),
                "stop_timeout": 5,
                "restart_backoff": 0.2,
            },
        },
    }
    for section, values in overrides.items():
        if isinstance(values, dict):
            settings.setdefault(section, {}).update(values)
        else:
            settings[section] = values
    return Settings(**settings)


class Running:
    """A controller running in the test's event loop."""

    def __init__(self, controller: Controller, task: asyncio.Task[None]) -> None:
        self.controller = controller
        self.task = task

    async def stop(self) -> None:
        self.controller.stop()
        await asyncio.wait_for(self.task, 30)


@pytest.fixture
async def make_controller(
    tmp_path: Path, amqp_url: str
) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """Start controllers (leader awaited unless `wait=False`); all stopped after the test."""
    running: list[Running] = []

    async def make(pool: str, *, wait: bool = True, **overrides: Any) -> Running:
        settings = controller_settings(pool, tmp_path, **overrides)
        controller = Controller(settings)
        task = asyncio.create_task(controller.run(), name=f"controller {pool}")
        handle = Running(controller, task)
        running.append(handle)
        if wait:
            await asyncio.wait_for(controller.wait_leader(), 30)
        return handle

    yield make
    for handle in running:
        if not handle.task.done():
            await handle.stop()


@pytest.fixture
async def client(amqp_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    async with Client(amqp_url, name=f"test {request.node.name}") as c:
        yield c


@pytest.fixture
async def controller(pool: str, make_controller: Callable[..., Awaitable[Running]]) -> Running:
    return await make_controller(pool)


@contextlib.asynccontextmanager
async def raw_connection(url: str) -> AsyncIterator[aio_pika.abc.AbstractConnection]:
    connection = await aio_pika.connect(url)
    try:
        yield connection
    finally:
        await connection.close()
