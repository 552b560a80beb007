"""Fixtures of the Kubernetes tier: a real single-node cluster (scripts/ensure_kubernetes.sh)
shared by the session, a namespace of its own per test with the RBAC of deploy/kubernetes/,
and controllers that act as that namespace's `osrdyne` ServiceAccount, not as an admin.

The cluster is built from the Go modules of Kubernetes, etcd and KEDA (versions in
scripts/kubernetes_versions.env) and started once; a test that cannot have it fails, it is
never skipped. The pods' image is deploy/compose's echo worker, built on osrdyne's dockerd and
imported into the cluster's containerd (tagged by its image id); pods reach the broker on the
node's address as the user `osrdyne-kubernetes`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from osrdyne.controller import Controller
from tests.conftest import controller_settings
from tests.docker_engine import REPO
from tests.faults.conftest import make_caller  # noqa: F401  (a fixture: the counting caller)
from tests.kubernetes.driver_factory import make_drivers, traffic  # noqa: F401  (fixtures)

ENSURE_KUBERNETES = REPO / "scripts" / "ensure_kubernetes.sh"
DEPLOY = REPO / "deploy"
#: Seconds the cluster may take to be built and started: a cold build is done by the set-up
#: (scripts/test.sh), so this is the start, or the end of a build still running.
START_TIMEOUT = 3600

#: The echo worker's environment in the pods: quick activity reports and drains.
ECHO_ENVIRONMENT = {"WORKER_ACTIVITY_INTERVAL": "0.5", "WORKER_DRAIN_TIMEOUT": "2"}


@dataclass(frozen=True)
class KubeCluster:
    """The cluster, as scripts/ensure_kubernetes.sh printed it."""

    kubeconfig: Path
    worker_image: str
    controller_image: str
    amqp_url: str
    management_url: str
    node_ip: str
    bin: Path
    helm: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl` as the cluster's admin."""
        done = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def get(self, kind: str, *, namespace: str, selector: str | None = None) -> list[Any]:
        """The objects of `kind` in `namespace` (as JSON), those matching `selector`."""
        args = ["get", kind, "-n", namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        return list(json.loads(self.kubectl(*args).stdout)["items"])

    def apply(self, documents: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1",
                                                           "items": documents}))  # fmt: skip


def _start() -> KubeCluster:
    if os.geteuid() != 0:
        pytest.fail("the Kubernetes tier runs a kubelet and containerd: it needs root")
    try:
        done = subprocess.run(
            ["bash", str(ENSURE_KUBERNETES)], capture_output=True, text=True,
            timeout=START_TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/ensure_kubernetes.sh did not finish within {START_TIMEOUT} s")
    if done.returncode != 0:
        pytest.fail(f"scripts/ensure_kubernetes.sh failed: {done.stderr[-3000:]}")
    found = dict(
        line.split("=", 1) for line in done.stdout.splitlines() if line.startswith("OSRDYNE_")
    )
    return KubeCluster(
        kubeconfig=Path(found["OSRDYNE_KUBECONFIG"]),
        worker_image=found["OSRDYNE_KUBERNETES_WORKER_IMAGE"],
        controller_image=found["OSRDYNE_KUBERNETES_CONTROLLER_IMAGE"],
        amqp_url=found["OSRDYNE_KUBERNETES_AMQP_URL"],
        management_url=found["OSRDYNE_KUBERNETES_MANAGEMENT_URL"],
        node_ip=found["OSRDYNE_KUBERNETES_NODE_IP"],
        bin=Path(found["OSRDYNE_KUBERNETES_BIN"]),
        helm=Path(found["OSRDYNE_HELM"]),
    )


@pytest.fixture(scope="session")
def kube() -> KubeCluster:
    """The cluster, started once (idempotent: the run's set-up may have started it; the
    run's end stops it, `scripts/test.sh`)."""
    return _start()


def deploy_documents(path: Path, *, namespace: str) -> list[dict[str, Any]]:
    """The documents of a deploy/ manifest, moved to `namespace` (and its subjects too)."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for document in documents:
        document["metadata"]["namespace"] = namespace
        for subject in document.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
    return documents


@dataclass(frozen=True)
class Namespace:
    """A test's namespace, with the `osrdyne` ServiceAccount of deploy/kubernetes/rbac.yaml
    and a kubeconfig that authenticates as it (a token of the TokenRequest API)."""

    name: str
    kubeconfig: Path


def service_account_kubeconfig(kube: KubeCluster, namespace: str, path: Path) -> Path:
    """A kubeconfig for the `osrdyne` ServiceAccount of `namespace`, as an operator running
    the controller out of the cluster would write it."""
    token = kube.kubectl(
        "create", "token", "osrdyne", "-n", namespace, "--duration", "2h"
    ).stdout.strip()
    admin = yaml.safe_load(kube.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "osrdyne", "cluster": cluster}],
                "users": [{"name": "osrdyne", "user": {"token": token}}],
                "contexts": [
                    {"name": "osrdyne", "context": {"cluster": "osrdyne", "user": "osrdyne",
                                                    "namespace": namespace}}
                ],
                "current-context": "osrdyne",
            }
        )
    )  # fmt: skip
    path.chmod(0o600)
    return path


def ca_data(kube: KubeCluster) -> bytes:
    admin = yaml.safe_load(kube.kubeconfig.read_text())
    return base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"])


@pytest.fixture
def make_namespace(
    kube: KubeCluster, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., Namespace]]:
    """Namespaces of the test's own, with the RBAC of deploy/kubernetes/ (and of the modes
    named: `keda`, `hpa`); each deleted after the test, with everything in it."""
    made: list[str] = []
    test = request.node.name.split("[")[0].replace("_", "-")[:30].strip("-")

    def make(*modes: str, rbac: bool = True) -> Namespace:
        """A namespace; with `rbac`, the ServiceAccount and Role of deploy/kubernetes/ (and
        of each mode named, `keda`, `hpa`) and a kubeconfig that acts as it."""
        name = f"t-{test}-{uuid.uuid4().hex[:6]}".lower()
        kube.kubectl("create", "namespace", name)
        made.append(name)
        if not rbac:
            return Namespace(name, kube.kubeconfig)
        documents = deploy_documents(DEPLOY / "kubernetes" / "rbac.yaml", namespace=name)
        for mode in modes:
            documents += deploy_documents(DEPLOY / mode / "rbac.yaml", namespace=name)
        kube.apply(documents)
        path = service_account_kubeconfig(kube, name, tmp_path / f"{name}.kubeconfig")
        return Namespace(name, path)

    yield make
    for name in made:
        kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(make_namespace: Callable[..., Namespace]) -> Namespace:
    return make_namespace()


def kubernetes_section(kube: KubeCluster, namespace: Namespace, **overrides: Any) -> dict[str, Any]:
    """`[driver.kubernetes]` of a controller run out of the cluster as the namespace's
    ServiceAccount, starting the echo worker image (never pulled)."""
    section: dict[str, Any] = {
        "auth": "kubeconfig",
        "kubeconfig": str(namespace.kubeconfig),
        "namespace": namespace.name,
        "image": kube.worker_image,
        "image_pull_policy": "Never",
        "environment": dict(ECHO_ENVIRONMENT),
        "request_timeout": 30,
    }
    section.update(overrides)
    return section


@contextlib.asynccontextmanager
async def kubernetes_controller(
    pool: str, tmp_path: Path, kube: KubeCluster, namespace: Namespace, **overrides: Any
) -> AsyncIterator[Controller]:
    """A controller of `pool` (in this process, leader awaited) whose groups are Deployments
    in `namespace`; `driver` overrides go to `[driver.kubernetes]`, the rest to the settings.
    Deployments outlive a controller on purpose (a restarted one adopts them): the
    namespace's deletion removes them."""
    import asyncio

    section = kubernetes_section(kube, namespace, **overrides.pop("driver", {}))
    amqp = {"worker_url": kube.amqp_url, **overrides.pop("amqp", {})}
    settings = controller_settings(
        pool, tmp_path, driver={"kind": "kubernetes", "kubernetes": section}, amqp=amqp,
        **overrides,
    )  # fmt: skip
    controller = Controller(settings)
    task = asyncio.create_task(controller.run(), name=f"controller {pool}")
    try:
        await asyncio.wait_for(controller.wait_leader(), 60)
        yield controller
    finally:
        controller.stop()
        await asyncio.wait_for(task, 60)
