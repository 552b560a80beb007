"""HPA mode of the kubernetes driver on the real API server: the HorizontalPodAutoscalers it
writes, their owner references and the real garbage collector.

As in test_driver.py: a namespace per test, the driver acting as its `osrdyne`
ServiceAccount with the RBAC of deploy/hpa/ (enforced), the objects read back as the admin,
the groups' pods left unscheduled. The real HPA controller runs these HPAs, but no metric
reaches them (no prometheus-adapter runs here: test_autoscalers.py), so it never rescales a
group: the replicas a test sets as the admin, playing the HPA, stay what it set. The faults
the real server cannot be made to give at a chosen moment (5xx, 429 on the HPA calls) are
tests/drivers/test_kubernetes_hpa.py's, on the API double.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from drivers import base, names
from drivers import kubernetes as kubernetes_driver
from osrdyne import wire
from tests.kubernetes.conftest import DEPLOY, KubeCluster, Namespace, deploy_documents
from tests.kubernetes.driver_factory import (
    POOL,
    SETTLE,
    Drivers,
    deployments,
    dry_run,
    env_of,
    listed,
    sent,
    upgrade,
)
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)

KEY = "Infra/42 é — spaces & ünïcode"
HOSTILE_KEYS = [
    KEY,
    "a;b",  # the separator of the hashed labels
    "a",
    "A",  # label values are case-sensitive; names are not
    "x" * 255,  # the longest key: a hashed queue name
    "é" * 127,
    "#hash+2B%25/..",
    " leading and trailing ",
    "\u202etxt.exe",  # right-to-left override
    'q{queue="other"}',  # PromQL in a key
    "🚀\x00\n",
]


@pytest.fixture
def hpa_namespace(make_namespace: Callable[..., Namespace]) -> Namespace:
    """The test's namespace, with the RBAC of deploy/hpa/."""
    return make_namespace("hpa")


@pytest.fixture
def hpa_drivers(
    make_drivers: Callable[[Namespace], Drivers], hpa_namespace: Namespace
) -> Callable[..., kubernetes_driver.KubernetesDriver]:
    """HPA-mode drivers in `hpa_namespace`: `hpa` settings as keywords, the others in
    `settings`."""
    drivers = make_drivers(hpa_namespace)

    def make(*, settings: dict[str, Any] | None = None, **hpa: Any) -> Any:
        return drivers(**(settings or {}), hpa={"enabled": True, **hpa})

    return make


def hpas(kube: KubeCluster, namespace: Namespace) -> dict[str, dict[str, Any]]:
    """The namespace's HorizontalPodAutoscalers by name."""
    found = kube.get("horizontalpodautoscalers", namespace=namespace.name)
    return {h["metadata"]["name"]: h for h in found}


async def test_hpa_mode_writes_an_hpa_owned_by_the_deployment_once(
    hpa_drivers: Callable[..., Any],
    kube: KubeCluster,
    hpa_namespace: Namespace,
    traffic: pytest.LogCaptureFixture,
) -> None:
    driver = hpa_drivers(min_replicas=2, max_replicas=7, target_value=2.5)
    assert await driver.list() == set()
    await driver.start(KEY)
    await driver.start(KEY)
    ns = hpa_namespace.name
    assert sent(traffic) == [
        ("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", 201),
        ("POST", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers", 201),
    ]
    deployment = deployments(kube, hpa_namespace)[KEY]
    (hpa,) = hpas(kube, hpa_namespace).values()
    assert hpa["apiVersion"] == "autoscaling/v2"
    meta, dmeta = hpa["metadata"], deployment["metadata"]
    assert meta["name"] == dmeta["name"] == names.object_name(POOL, KEY)
    assert meta["labels"] == dmeta["labels"]  # managed-by, pool, key-hash, version
    assert meta["labels"]["osrdyne.io/version"] == driver.version
    assert meta["annotations"]["osrdyne.io/key"] == KEY
    assert meta["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": dmeta["name"],
         "uid": dmeta["uid"]}
    ]  # fmt: skip
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": dmeta["name"]
    }  # fmt: skip
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 7)
    assert deployment["spec"]["replicas"] == 2  # the HPA's floor from the start
    (metric,) = spec["metrics"]
    assert metric["type"] == "External"
    queue = wire.PoolNames(POOL).request_queue(KEY)
    assert metric["external"]["metric"] == {
        "name": "rabbitmq_queue_messages_ready",
        "selector": {"matchLabels": {"queue_hash": kubernetes_driver.queue_hash("/", queue)}},
    }
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "2500m"}
    await eventually(lambda: listed(driver, {KEY}), timeout=SETTLE, what="the group listed")
    assert driver.outdated() == set()
    await driver.stop(KEY)
    await driver.stop(KEY)
    assert not hpas(kube, hpa_namespace) and not deployments(kube, hpa_namespace)
    await eventually(lambda: listed(driver, set()), timeout=SETTLE, what="no group listed")


async def test_the_garbage_collector_removes_the_hpa_of_a_deleted_deployment(
    hpa_drivers: Callable[..., Any], kube: KubeCluster, hpa_namespace: Namespace
) -> None:
    driver = hpa_drivers()
    await driver.start("a")
    await driver.start("b")
    # What `kubectl delete deployment` does: the garbage collector follows the owner
    # reference, in the background, and takes the HPA of "a" only.
    kube.kubectl("delete", "deployment", driver.name("a"), "-n", hpa_namespace.name)
    await eventually(
        lambda: list(hpas(kube, hpa_namespace)) == [driver.name("b")],
        timeout=SETTLE, interval=0.5, what="the HPA of a collected",
    )  # fmt: skip
    await eventually(lambda: listed(driver, {"b"}), timeout=SETTLE, what="b listed alone")


async def test_an_upgrade_replaces_the_hpa_and_keeps_the_replicas_it_chose(
    hpa_drivers: Callable[..., Any],
    kube: KubeCluster,
    hpa_namespace: Namespace,
    traffic: pytest.LogCaptureFixture,
) -> None:
    old = hpa_drivers(max_replicas=4, settings={"environment": {"RELEASE": "1"}})
    new = hpa_drivers(max_replicas=9, settings={"environment": {"RELEASE": "2"}})
    assert old.version != new.version
    await old.start(KEY)
    await old.start("other")
    uid = deployments(kube, hpa_namespace)[KEY]["metadata"]["uid"]
    # The HPA grew the group to 3 (played by the admin: no metric reaches the real one).
    kube.kubectl("scale", "deployment", old.name(KEY), "--replicas=3", "-n", hpa_namespace.name)
    await eventually(lambda: listed(new, {KEY, "other"}), timeout=SETTLE, what="both listed")
    assert new.outdated() == {KEY, "other"}
    traffic.clear()
    assert new.sizes() == {}  # the HPA's, not the group scaler's
    await new.resize(KEY, 5)
    assert sent(traffic) == []
    await upgrade(new, KEY)
    replaced = {(path.rsplit("/", 2)[-2], status) for _, path, status in sent(traffic)}
    assert {("deployments", 200), ("horizontalpodautoscalers", 200)} <= replaced
    assert {status for _, status in replaced} <= {200, 409}, replaced  # 409: next pass
    deployment = deployments(kube, hpa_namespace)[KEY]
    hpa = hpas(kube, hpa_namespace)[new.name(KEY)]
    assert deployment["spec"]["replicas"] == 3
    assert env_of(deployment)["RELEASE"] == "2"
    assert deployment["metadata"]["uid"] == uid
    assert hpa["metadata"]["labels"]["osrdyne.io/version"] == new.version
    assert hpa["spec"]["maxReplicas"] == 9
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == uid
    await eventually(lambda: listed(new, {KEY, "other"}), timeout=SETTLE, what="both listed")
    assert new.outdated() == {"other"}


async def test_an_orphaned_hpa_is_given_the_new_deployment_as_its_owner(
    hpa_drivers: Callable[..., Any], kube: KubeCluster, hpa_namespace: Namespace
) -> None:
    driver = hpa_drivers()
    await driver.start(KEY)
    name, ns = driver.name(KEY), hpa_namespace.name
    # The Deployment went and left its HPA (the garbage collector removed the owner
    # reference instead of the HPA: `--cascade=orphan`).
    kube.kubectl("delete", "deployment", name, "-n", ns, "--cascade=orphan")
    await eventually(
        lambda: not hpas(kube, hpa_namespace)[name]["metadata"].get("ownerReferences"),
        timeout=SETTLE, interval=0.5, what="the HPA orphaned",
    )  # fmt: skip
    await driver.start(KEY)
    deployment = deployments(kube, hpa_namespace)[KEY]
    (owner,) = hpas(kube, hpa_namespace)[name]["metadata"]["ownerReferences"]
    assert owner["uid"] == deployment["metadata"]["uid"]
    # The reference is live: the garbage collector takes the HPA with its new owner.
    kube.kubectl("delete", "deployment", name, "-n", ns)
    await eventually(
        lambda: not hpas(kube, hpa_namespace), timeout=SETTLE, interval=0.5, what="HPA gone"
    )


async def test_list_reports_half_done_hpa_groups_and_the_loop_finishes_them(
    hpa_drivers: Callable[..., Any], kube: KubeCluster, hpa_namespace: Namespace
) -> None:
    driver = hpa_drivers()
    await driver.start("a")
    await driver.start("b")
    # A half-done stop left an HPA without its Deployment, a half-done start a Deployment
    # without its HPA.
    name_a, name_b, ns = driver.name("a"), driver.name("b"), hpa_namespace.name
    kube.kubectl("delete", "deployment", name_a, "-n", ns, "--cascade=orphan")
    kube.kubectl("delete", "horizontalpodautoscaler", name_b, "-n", ns)
    await eventually(lambda: listed(driver, {"a", "b"}), timeout=SETTLE, what="both listed")
    assert driver.outdated() == {"a", "b"}
    await driver.stop("a")
    await driver.start("b")
    assert list(hpas(kube, hpa_namespace)) == [name_b]
    assert [d["metadata"]["name"] for d in deployments(kube, hpa_namespace).values()] == [name_b]
    await eventually(lambda: listed(driver, {"b"}), timeout=SETTLE, what="b listed alone")
    assert driver.outdated() == set()


async def test_hpas_of_other_pools_and_tampered_ones_are_not_listed(
    make_drivers: Callable[[Namespace], Drivers], kube: KubeCluster, hpa_namespace: Namespace
) -> None:
    drivers = make_drivers(hpa_namespace)
    driver = drivers(hpa={"enabled": True})
    other_pool = drivers(pool="other pool/é", hpa={"enabled": True})
    await driver.start("k")
    await other_pool.start("k")
    await eventually(lambda: listed(driver, {"k"}), timeout=SETTLE, what="k listed")
    assert await other_pool.list() == {"k"}
    # An HPA whose key annotation was edited no longer matches its key-hash label: ignored.
    name, ns = driver.name("k"), hpa_namespace.name
    kube.kubectl("annotate", "--overwrite", "hpa", name, "-n", ns, "osrdyne.io/key=someone else")
    kube.kubectl("delete", "deployment", name, "-n", ns, "--cascade=orphan")
    await eventually(lambda: listed(driver, set()), timeout=SETTLE, what="nothing listed")
    assert await other_pool.list() == {"k"}


async def test_hostile_keys_give_distinct_objects_the_api_server_accepts(
    hpa_drivers: Callable[..., Any], kube: KubeCluster, hpa_namespace: Namespace
) -> None:
    driver = hpa_drivers()
    for key in HOSTILE_KEYS:
        await driver.start(key)
    found = list(hpas(kube, hpa_namespace).values())
    assert len(found) == len(HOSTILE_KEYS)
    assert len(deployments(kube, hpa_namespace)) == len(HOSTILE_KEYS)
    hashes = set()
    for hpa in found:
        key = hpa["metadata"]["annotations"]["osrdyne.io/key"]
        selected = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]
        assert list(selected) == ["queue_hash"]
        value = selected["queue_hash"]
        assert value.isdigit() and int(value) < 2**64 - 1
        assert value == kubernetes_driver.queue_hash("/", wire.PoolNames(POOL).request_queue(key))
        hashes.add(value)
    assert len(hashes) == len(HOSTILE_KEYS)
    await eventually(lambda: listed(driver, set(HOSTILE_KEYS)), timeout=SETTLE, what="all")
    for key in HOSTILE_KEYS:
        await driver.stop(key)
    assert not hpas(kube, hpa_namespace) and not deployments(kube, hpa_namespace)


async def test_scale_to_zero_is_refused_by_a_server_without_the_gate(
    hpa_drivers: Callable[..., Any], kube: KubeCluster, hpa_namespace: Namespace
) -> None:
    """`scale_to_zero` says the cluster runs with the HPAScaleToZero feature gate; this one
    does not (an alpha gate, off by default), so the API server refuses the HPA's
    `minReplicas: 0` (422): `DriverRejected`, the group half made (its Deployment, started
    with one pod since a request waits), which `list()` reports for the loop to retry."""
    driver = hpa_drivers(min_replicas=0, scale_to_zero=True)
    with pytest.raises(base.DriverRejected, match="minReplicas"):
        await driver.start(KEY)
    assert deployments(kube, hpa_namespace)[KEY]["spec"]["replicas"] == 1
    assert not hpas(kube, hpa_namespace)
    await eventually(lambda: listed(driver, {KEY}), timeout=SETTLE, what="the group listed")
    assert driver.outdated() == {KEY}


async def test_hpa_calls_without_the_hpa_rbac_are_driver_rejected(
    make_drivers: Callable[[Namespace], Drivers],
    make_namespace: Callable[..., Namespace],
    kube: KubeCluster,
) -> None:
    """Under the Role of deploy/kubernetes/ alone (no rights on HPAs), HPA mode's calls on
    HPAs are refused by the real RBAC (403): list, start (after its Deployment was made) and
    stop (which removes the HPA first) are each a `DriverRejected`."""
    from kubernetes.client.exceptions import ApiException

    namespace = make_namespace()
    driver = make_drivers(namespace)(hpa={"enabled": True})
    for call in ("start", "list", "stop"):
        with pytest.raises(base.DriverRejected, match="horizontalpodautoscalers") as caught:
            await (driver.list() if call == "list" else getattr(driver, call)(KEY))
        cause = caught.value.__cause__
        assert isinstance(cause, ApiException) and cause.status == 403, (call, cause)
    assert list(deployments(kube, namespace)) == [KEY]


def test_the_api_server_accepts_the_deploy_hpa_manifests(
    kube: KubeCluster, make_namespace: Callable[..., Namespace]
) -> None:
    namespace = make_namespace(rbac=False)
    documents = []
    for path in sorted((DEPLOY / "hpa").glob("*.yaml")):
        if path.name != "prometheus-scrape.yaml":  # Prometheus', not the cluster's
            documents += deploy_documents(path, namespace=namespace.name)
    assert {d["kind"] for d in documents} == {"ConfigMap", "HorizontalPodAutoscaler", "Role"}
    dry_run(kube, documents)
