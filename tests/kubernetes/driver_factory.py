"""The kubernetes driver under test on the real cluster (test_driver.py, test_driver_hpa.py):
drivers acting as a test namespace's `osrdyne` ServiceAccount, the requests they sent (read
from urllib3's log of the real traffic), and what the server holds.

`make_drivers` and `traffic` are fixtures (conftest.py registers them).
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from drivers import base
from drivers import kubernetes as kubernetes_driver
from tests.waiting import eventually

if TYPE_CHECKING:  # conftest.py imports this module
    from tests.kubernetes.conftest import KubeCluster, Namespace

POOL = "core"
#: The groups' pods stay Pending: no node has this label (their scheduling is not tested here).
NO_NODE = {"osrdyne.io/test": "no-such-node"}
#: Seconds the API server's caches and its garbage collector may take on a loaded machine.
SETTLE = 120

_REQUEST = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Drivers:
    """Builds KubernetesDrivers of `pool` acting as `namespace`'s ServiceAccount, in it."""

    def __init__(self, kube: KubeCluster, namespace: Namespace) -> None:
        self.kube, self.namespace = kube, namespace
        self.made: list[kubernetes_driver.KubernetesDriver] = []

    def __call__(self, *, pool: str = POOL, **settings: Any) -> kubernetes_driver.KubernetesDriver:
        context = base.PoolContext(pool=pool, amqp_uri=self.kube.amqp_url)
        defaults = {
            "auth": "kubeconfig",
            "kubeconfig": str(self.namespace.kubeconfig),
            "namespace": self.namespace.name,
            "image": self.kube.worker_image,
            "image_pull_policy": "Never",
            "node_selector": NO_NODE,
            "request_timeout": 30,
        }
        model = kubernetes_driver.KubernetesSettings.model_validate({**defaults, **settings})
        driver = kubernetes_driver.KubernetesDriver(context, model)
        self.made.append(driver)
        return driver

    async def close(self) -> None:
        for driver in self.made:
            await driver.close()


@pytest.fixture
async def make_drivers(kube: KubeCluster) -> AsyncIterator[Callable[[Namespace], Drivers]]:
    """Driver factories for namespaces of the test (`make_namespace`); drivers closed after."""
    made: list[Drivers] = []

    def make(namespace: Namespace) -> Drivers:
        made.append(Drivers(kube, namespace))
        return made[-1]

    yield make
    for drivers in made:
        await drivers.close()


@pytest.fixture
def traffic(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """urllib3's log of every response the drivers got (`sent` reads it)."""
    caplog.set_level(logging.DEBUG, logger="urllib3.connectionpool")
    return caplog


def sent(
    traffic: pytest.LogCaptureFixture, methods: frozenset[str] = WRITES
) -> list[tuple[str, str, int]]:
    """(method, path, status) of each request of `methods` sent since the test began (or
    since `traffic.clear()`), as urllib3 logged its response: the real traffic."""
    found = []
    for record in traffic.records:
        if record.name == "urllib3.connectionpool" and (m := _REQUEST.search(record.getMessage())):
            path = urllib.parse.urlsplit(m["path"]).path
            if m["method"] in methods:
                found.append((m["method"], urllib.parse.unquote(path), int(m["status"])))
    return found


def deployments(kube: KubeCluster, namespace: Namespace) -> dict[str, dict[str, Any]]:
    """The namespace's Deployments by the key they are annotated with."""
    found = kube.get("deployments", namespace=namespace.name)
    return {d["metadata"]["annotations"]["osrdyne.io/key"]: d for d in found}


def scaled_objects(kube: KubeCluster, namespace: Namespace) -> list[dict[str, Any]]:
    return kube.get("scaledobjects.keda.sh", namespace=namespace.name)


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "worker"
    ]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


async def listed(driver: kubernetes_driver.KubernetesDriver, keys: set[str]) -> bool:
    """Whether the driver lists exactly `keys` (for `eventually`: the server's caches, and
    the garbage collector and KEDA's finalizer, work in the background)."""
    return await driver.list() == keys


async def upgrade(driver: kubernetes_driver.KubernetesDriver, *keys: str) -> None:
    """What the worker-group loop does for outdated groups, pass after pass until none of
    `keys` is: start them again. A pass may meet a 409: the Deployment controller (or an
    autoscaler) wrote the object's status between the driver's read and its replace, which
    the driver leaves for the next pass."""

    async def one_pass() -> bool:
        await driver.list()
        for key in driver.outdated() & set(keys):
            await driver.start(key)
        await driver.list()
        return not driver.outdated() & set(keys)

    await eventually(one_pass, timeout=SETTLE, interval=0.5, what=f"{keys} upgraded")


def dry_run(kube: KubeCluster, documents: list[dict[str, Any]]) -> None:
    """`kubectl apply --dry-run=server` of `documents` (strict: unknown fields refused)."""
    kube.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-",
        input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": documents}),
    )  # fmt: skip
