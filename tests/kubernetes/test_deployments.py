"""The kubernetes driver (Deployment mode) on a real cluster: pods scheduled and started by
the real scheduler and kubelet, Deployments rolled by the real Deployment controller, the
controller acting as the `osrdyne` ServiceAccount of deploy/kubernetes/rbac.yaml (RBAC
enforced by the real API server). The controller runs in this process, out of the cluster, as
an operator would run it beside a cluster; tests/kubernetes/test_in_cluster.py runs it as a pod.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drivers.kubernetes._core import ANNOTATION_KEY, CONTAINER, LABEL_POOL
from osrdyne import Client, Status
from tests.faults.conftest import Caller
from tests.faults.report import Tally
from tests.kubernetes.conftest import KubeCluster, Namespace, kubernetes_controller
from tests.scaling.hot_key import SCALING, WORKER_ENV, grow_and_shrink
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(600)

#: Seconds a first answer may take: the Deployment made, its pod scheduled, the container
#: started (a Python worker's start on a loaded two-core machine), its queue consumed.
COLD = 240


def pods_of(kube: KubeCluster, namespace: Namespace) -> list[dict[str, Any]]:
    return kube.get("pods", namespace=namespace.name, selector=f"{LABEL_POOL}")


def running_pods(kube: KubeCluster, namespace: Namespace) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in pods_of(kube, namespace)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


async def whoami(client: Client, pool: str, key: str, *, timeout: float = COLD) -> dict[str, Any]:
    answer = await client.call(pool, key, b"", path="whoami", timeout=timeout)
    assert answer.status == Status.OK, answer
    result: dict[str, Any] = answer.json()
    return result


async def test_a_new_key_is_answered_by_a_pod_of_its_deployment(
    pool: str, tmp_path: Path, client: Client, kube: KubeCluster, namespace: Namespace
) -> None:
    # Keys are hostile until checked: not a DNS label, not ASCII, slashes, spaces, 200 bytes.
    keys = ["dataset=42", "Données/été 2024 #1 ✓", "k" * 100 + "/" + "é" * 50]
    async with kubernetes_controller(pool, tmp_path, kube, namespace):
        answers = await asyncio.gather(*(whoami(client, pool, key) for key in keys))
        deployments = kube.get("deployments", namespace=namespace.name)
        pods = {p["metadata"]["name"]: p for p in pods_of(kube, namespace)}
    by_key = {d["metadata"]["annotations"][ANNOTATION_KEY]: d for d in deployments}
    assert set(by_key) == set(keys)
    for key, answer in zip(keys, answers, strict=True):
        assert answer["key"] == key
        # The worker is the pod (WORKER_ID from the downward API), of this key's Deployment.
        pod = pods[answer["worker_id"]]
        assert pod["metadata"]["annotations"][ANNOTATION_KEY] == key
        assert pod["spec"]["containers"][0]["image"].endswith(kube.worker_image)
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        selector = by_key[key]["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()


async def test_a_killed_pod_is_replaced_by_its_replica_set_and_the_key_answered_again(
    pool: str, tmp_path: Path, client: Client, kube: KubeCluster, namespace: Namespace
) -> None:
    async with kubernetes_controller(pool, tmp_path, kube, namespace):
        first = await whoami(client, pool, "hot")
        # Killed at once: no grace period, the kubelet kills the container (SIGKILL).
        kube.kubectl(
            "delete", "pod", first["worker_id"], "-n", namespace.name,
            "--grace-period=0", "--force", "--wait=false",
        )  # fmt: skip
        await eventually(
            lambda: running_pods(kube, namespace) - {first["worker_id"]},
            timeout=COLD, interval=1, what="a new pod of the ReplicaSet",
        )  # fmt: skip
        # Every request sent meanwhile waits in the key's queue for the new pod.
        answers = await asyncio.gather(*(whoami(client, pool, "hot") for _ in range(10)))
    assert {a["worker_id"] for a in answers} == running_pods(kube, namespace) - {first["worker_id"]}
    assert all(a["worker_id"] != first["worker_id"] for a in answers)


async def test_an_upgrade_rolls_the_deployment_and_every_request_is_answered_once(
    pool: str,
    tmp_path: Path,
    kube: KubeCluster,
    namespace: Namespace,
    make_caller: Callable[..., Any],
) -> None:
    """A new version of the configuration (an environment variable of the workers): the next
    controller replaces the Deployment, the Deployment controller rolls its pod (a new one
    started before the old one gets SIGTERM and drains), and requests sent all along are each
    answered once, `ok`."""
    tally = Tally("kubernetes: a rolling upgrade under load")
    caller: Caller = await make_caller(tally)
    key = "rolling"
    async with kubernetes_controller(pool, tmp_path, kube, namespace):
        await caller.send(pool, key, b"first", path="whoami")
        assert not await caller.settle(COLD), "the first request"
        (old,) = running_pods(kube, namespace)

    stop = asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            await caller.send(pool, key, b"x")
            await asyncio.sleep(0.05)

    sending = asyncio.create_task(load(), name="load")
    try:
        upgraded = {"environment": {"WORKER_ACTIVITY_INTERVAL": "0.5", "UPGRADE": "2"}}
        async with kubernetes_controller(pool, tmp_path, kube, namespace, driver=upgraded):
            await eventually(
                lambda: old not in {p["metadata"]["name"] for p in pods_of(kube, namespace)}
                and running_pods(kube, namespace),
                timeout=COLD, interval=1, what="the Deployment rolled to a new pod",
            )  # fmt: skip
            await asyncio.sleep(2)  # a few requests to the new pod too
            stop.set()
            await sending
            unanswered = await caller.settle(COLD, grace=3)
        (new,) = running_pods(kube, namespace)
    finally:
        stop.set()
        await sending
    row = tally.row()
    assert not unanswered, caller.describe(unanswered)
    assert row["sent"] > 20 and row["ok"] == row["sent"], row
    assert row["duplicated"] == 0 and row["unexpected"] == 0, row
    (deployment,) = kube.get("deployments", namespace=namespace.name)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["UPGRADE"] == "2" and new != old


async def test_an_idle_group_s_deployment_is_removed(
    pool: str, tmp_path: Path, client: Client, kube: KubeCluster, namespace: Namespace
) -> None:
    groups = {"unbind_delay": 2, "stop_delay": 2}
    async with kubernetes_controller(pool, tmp_path, kube, namespace, groups=groups):
        await whoami(client, pool, "idle")
        assert kube.get("deployments", namespace=namespace.name)
        await eventually(
            lambda: not kube.get("deployments", namespace=namespace.name),
            timeout=120, interval=1, what="the idle group's Deployment deleted",
        )  # fmt: skip
        await eventually(
            lambda: not pods_of(kube, namespace),
            timeout=120, interval=1, what="its pod gone",
        )  # fmt: skip


async def test_a_worker_image_that_exits_at_start_is_answered_start_failed(
    pool: str, tmp_path: Path, client: Client, kube: KubeCluster, namespace: Namespace
) -> None:
    """The container exits with status 3 at once: the kubelet restarts it (CrashLoopBackOff),
    the driver reads the pod's restarts and last exit code, and the key's callers are answered
    `start_failed` with that reason instead of waiting for their deadline."""
    exits = {"command": ["python", "-c", "raise SystemExit(3)"]}
    async with kubernetes_controller(
        pool, tmp_path, kube, namespace, driver=exits, groups={"failing_after": 2}
    ) as controller:
        started = time.monotonic()
        answer = await client.call(pool, "broken", b"", timeout=COLD)
        assert answer.status == Status.START_FAILED, answer
        assert answer.json()["details"]["reason"] == "a worker exited with status 3 before serving"
        assert time.monotonic() - started < COLD
        group = controller.status().groups["broken"]
        assert group.failing_reason is not None and (group.restarts or 0) >= 2
    (pod,) = pods_of(kube, namespace)
    (status,) = (s for s in pod["status"]["containerStatuses"] if s["name"] == CONTAINER)
    assert status["lastState"]["terminated"]["exitCode"] == 3


async def test_the_controller_acts_with_the_service_account_s_rights_only(
    pool: str, tmp_path: Path, client: Client, kube: KubeCluster, namespace: Namespace
) -> None:
    """The Role of deploy/kubernetes/rbac.yaml is enough for every call the driver makes (the
    tests above run under it), and nothing more is granted: the same credentials are refused
    elsewhere by the API server."""
    for verb, what in [
        ("list", "secrets"),
        ("create", "pods"),
        ("delete", "namespaces"),
        ("list", "deployments --all-namespaces"),
    ]:
        done = kube.kubectl(
            "--kubeconfig", str(namespace.kubeconfig), "auth", "can-i", verb, *what.split(),
            check=False,
        )  # fmt: skip
        assert done.stdout.strip() == "no", (verb, what, done.stdout)
    for verb in ["get", "list", "create", "update", "patch", "delete"]:
        done = kube.kubectl(
            "--kubeconfig", str(namespace.kubeconfig), "auth", "can-i", verb,
            "deployments.apps", check=False,
        )  # fmt: skip
        assert done.stdout.strip() == "yes", (verb, done.stdout)


async def test_the_group_scaler_grows_a_hot_key_through_spec_replicas_and_back(
    pool: str, tmp_path: Path, client: Client, kube: KubeCluster, namespace: Namespace
) -> None:
    """The controller's own group scaler sizes the Deployment: load on one key grows
    `spec.replicas` to 3, the pods start and share the queue; once the load is gone the group
    shrinks back to one (surplus pods drain on SIGTERM within their grace period). Every call
    answered once, `ok`, with its own body (`grow_and_shrink`, as for every driver)."""
    async with kubernetes_controller(
        pool, tmp_path, kube, namespace, scaling={**SCALING, "max_workers": 3},
        driver={"environment": WORKER_ENV},
    ) as controller:  # fmt: skip

        def back_to_one() -> bool:
            (deployment,) = kube.get("deployments", namespace=namespace.name)
            return deployment["spec"]["replicas"] == 1 and len(pods_of(kube, namespace)) == 1

        await grow_and_shrink(
            controller, client, pool, key="hot", most=3, drained=back_to_one, timeout=COLD
        )
