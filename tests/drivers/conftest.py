"""Fixtures of the driver tests: driver factories and the API-server double.

The Docker engine, its worker image and the host's interpreter mounted into containers come
from `tests.docker_engine` (a plugin of tests/conftest.py, shared with the cluster tests).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from drivers import base
from tests.docker_engine import AMQP_URI


@pytest.fixture
def pool_name(request: pytest.FixtureRequest) -> str:
    """A pool name unique to the test (so tests never see each other's containers)."""
    return f"t-{request.node.name[:20].replace('_', '-').strip('-')}-{uuid.uuid4().hex[:8]}"


DriverFactory = Callable[..., Any]


@pytest.fixture
async def docker_driver(
    docker_host: str, worker_image: str, docker_client: Any, pool_name: str
) -> AsyncIterator[DriverFactory]:
    """Builds DockerDrivers of the test's pool; removes the pool's containers afterwards."""
    from drivers import docker as docker_driver_module

    made: list[Any] = []

    def make(*, pool: str = pool_name, amqp_uri: str = AMQP_URI, **settings: Any) -> Any:
        settings.setdefault("base_url", docker_host)
        settings.setdefault("image", worker_image)
        settings.setdefault("command", ["sleep", "3600"])
        settings.setdefault("stop_timeout", 1)
        driver = docker_driver_module.DockerDriver(
            base.PoolContext(pool=pool, amqp_uri=amqp_uri),
            docker_driver_module.DockerSettings(**settings),
        )
        made.append(driver)
        return driver

    yield make
    for driver in made:
        await driver.close()
    for container in docker_client.containers.list(
        all=True, filters={"label": [f"osrdyne.pool={pool_name}"]}
    ):
        container.remove(force=True)


@pytest.fixture
def k8s_api() -> Iterator[Any]:
    """A fresh API-server double (see k8s_double.py: no cluster runs here)."""
    from tests.drivers import k8s_double

    double = k8s_double.ApiServerDouble().start()
    yield double
    double.stop()


@pytest.fixture
async def k8s_driver(k8s_api: Any, pool_name: str) -> AsyncIterator[DriverFactory]:
    """Builds KubernetesDrivers of the test's pool, talking to the double."""
    from drivers import kubernetes as kubernetes_driver_module

    made: list[Any] = []

    def make(*, pool: str = pool_name, amqp_uri: str = AMQP_URI, **settings: Any) -> Any:
        settings.setdefault("host", k8s_api.url)
        settings.setdefault("namespace", "default")
        settings.setdefault("request_timeout", 10)
        driver = kubernetes_driver_module.KubernetesDriver(
            base.PoolContext(pool=pool, amqp_uri=amqp_uri),
            kubernetes_driver_module.KubernetesSettings.model_validate(settings),
        )
        made.append(driver)
        return driver

    yield make
    for driver in made:
        await driver.close()
