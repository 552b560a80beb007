"""Fixtures shared by every test: a real broker, unique pools, controllers, clients.

The broker is the local RabbitMQ (or RABBITMQ_URL), found once per session; `scripts/test.sh`
makes sure it runs. Each test gets pools with unique names whose broker objects are deleted
afterwards, and fails if it leaves asyncio tasks behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import hypothesis
import pytest

from osrdyne import Client
from osrdyne.controller import Controller
from osrdyne.controller._settings import Settings
from tests import broker

# Tests stay free of timing thresholds: Hypothesis' per-example deadline (200 ms) failed
# tests/interop/test_queue_names.py once on a loaded machine (276 ms for one key).
hypothesis.settings.register_profile("osrdyne", deadline=None)
hypothesis.settings.load_profile("osrdyne")

#: Seconds a test's own tasks get to end after it, before it fails for leaving them running.
LEAK_GRACE = 10.0

#: The Docker engine's fixtures (docker_host, docker_client, worker_image, host_python, repo).
pytest_plugins = ["tests.docker_engine", "tests.components"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long soak tests too")
    parser.addoption(
        "--chaos", action="store_true", help="run the long random-fault run on the cluster too"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests are opt-in: `--soak` runs them all, `--chaos` the one of random faults on
    the cluster (marked `chaos` too). The other `chaos` tests run in every full run."""
    soak, chaos = config.getoption("--soak"), config.getoption("--chaos")
    skip = pytest.mark.skip(reason="soak test: run with --soak (or --chaos for the cluster's)")
    for item in items:
        if "soak" in item.keywords and not (soak or (chaos and "chaos" in item.keywords)):
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection made (every module imported: pyspark, kubernetes, hypothesis,
    about 190,000 objects) out of the garbage collector's sight for good.

    `no_leaked_tasks` collects garbage after each test; over all those objects one collection
    took 0.2-0.3 s, 5 minutes of CPU in a full run. Frozen, it only scans what the tests made
    since, and still finalises what a test left behind."""
    gc.freeze()


@pytest.fixture(scope="session")
async def amqp_url() -> str:
    """The broker's URL, once it answers (it must: `scripts/test.sh` starts it)."""
    connection = await aio_pika.connect(broker.AMQP_URL, timeout=10)
    await connection.close()
    return broker.AMQP_URL


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks of its own running.

    Garbage is collected here, in the test's event loop: an aio-pika connection the test left
    unclosed (one that failed to connect, typically) is finalised now, with a loop to close
    it, instead of later in whatever test happens to collect it, maybe in a thread without a
    loop ("coroutine 'Connection.close' was never awaited", failing an unrelated test)."""
    before = asyncio.all_tasks()
    yield
    gc.collect()
    # A bound, not a measure: tasks that end on their own (a worker's supervision after its
    # stop, a connection's close) get it, on a loaded machine too.
    deadline = time.monotonic() + LEAK_GRACE
    while True:
        leaked = {t for t in asyncio.all_tasks() - before if not t.done()}
        leaked.discard(asyncio.current_task())  # type: ignore[arg-type]
        if not leaked:
            return
        if time.monotonic() > deadline:
            break
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


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in, tables recursively."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def settings_dict(
    pool: str,
    state_dir: Path,
    *,
    amqp_url: str = broker.AMQP_URL,
    management_url: str = broker.MANAGEMENT_URL,
    **overrides: Any,
) -> dict[str, Any]:
    """The one base configuration of a controller under test: short delays, echo workers
    owned by `state_dir`, quick activity reports; sections in `overrides` are merged in."""
    base: dict[str, Any] = {
        "pool": pool,
        "amqp": {"url": amqp_url, "management_url": management_url},
        "groups": {
            "unbind_delay": 30,
            "stop_delay": 30,
            "loop_interval": 1.0,
            # Queue figures in `/status` as fresh as without broker events.
            "listing_interval": 1.0,
            "activity_fold": 0.2,
        },
        "api": {"enabled": False},
        "driver": {
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
                "env": {"WORKER_ACTIVITY_INTERVAL": "0.5", "WORKER_DRAIN_TIMEOUT": "5"},
                "owner": str(state_dir),
                "stop_timeout": 5,
                "restart_backoff": 0.2,
            },
        },
    }
    return merged(base, overrides)


def controller_settings(pool: str, tmp_path: Path, **overrides: Any) -> Settings:
    """`settings_dict` as controller settings, workers owned by `tmp_path/workers`."""
    return Settings(**settings_dict(pool, tmp_path / "workers", **overrides))


class Running:
    """A controller running in the test's event loop."""

    def __init__(self, controller: Controller, task: asyncio.Task[None]) -> None:
        self.controller = controller
        self.task = task

    async def stop(self) -> None:
        self.controller.stop()
        await asyncio.wait_for(self.task, 30)


@contextlib.asynccontextmanager
async def running_controller(
    pool: str, tmp_path: Path, driver: Any, **overrides: Any
) -> AsyncIterator[Controller]:
    """A controller of `pool` on a driver object the test made (leader awaited), stopped
    after the block."""
    controller = Controller(controller_settings(pool, tmp_path, **overrides), driver=driver)
    task = asyncio.create_task(controller.run(), name=f"controller {pool}")
    try:
        await asyncio.wait_for(controller.wait_leader(), 30)
        yield controller
    finally:
        controller.stop()
        await asyncio.wait_for(task, 30)


@pytest.fixture
async def make_controller(
    tmp_path: Path, amqp_url: str, make_pool: Callable[[], str]
) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """Start controllers (leader awaited unless `wait=False`); all stopped after the test.

    Depends on `make_pool` so that pools are deleted only once their controllers have stopped,
    whatever order a test asks for `pool` and `make_controller` in (a controller still running
    would declare the deleted queues again, and they would stay)."""
    del make_pool  # only its teardown order matters here
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
