"""The kubernetes driver's calls (Deployment and KEDA modes) on the real API server.

`KubernetesDriver` is driven directly here, as the controller's worker-group loop drives it,
against the cluster of scripts/ensure_kubernetes.sh: each test has a namespace of its own and
the driver authenticates as that namespace's `osrdyne` ServiceAccount (deploy/kubernetes/,
and deploy/keda/ in KEDA mode), so every call passes the real API server's authentication,
RBAC, validation and admission; what a test checks it reads back as the admin. What the
driver writes is what the server stores (the client refuses unknown fields of Deployments
before sending them; a ScaledObject is compared with what the driver made, so nothing was
pruned by KEDA's CRD), and the requests the driver sent are read from urllib3's log of the
real traffic (`sent`), to tell a write from none.

The groups' pods are not the subject here (tests/kubernetes/test_deployments.py runs them):
they are created by the real ReplicaSets but left unscheduled (a nodeSelector no node has),
so that a test's groups cost the node nothing. The faults the real server cannot be made to
give at a chosen moment (5xx, 429, a create race, a concurrent change between a read and a
write) are tests/drivers/test_kubernetes.py's, on the API double.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    scaled_objects,
    sent,
    upgrade,
)
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)

KEY = "Infra/42 é — spaces & ünïcode"


@pytest.fixture
def drivers(make_drivers: Callable[[Namespace], Drivers], namespace: Namespace) -> Drivers:
    """Drivers in the test's namespace, with the RBAC of deploy/kubernetes/."""
    return make_drivers(namespace)


# -- Deployment mode -----------------------------------------------------------------------


async def test_start_writes_a_labelled_deployment_and_its_replica_set_makes_the_pods(
    drivers: Drivers, kube: KubeCluster, namespace: Namespace
) -> None:
    driver = drivers(replicas=2, environment={"EXTRA": "1"})
    await driver.start(KEY)
    (deployment,) = deployments(kube, namespace).values()
    meta = deployment["metadata"]
    assert meta["name"] == names.object_name(POOL, KEY)
    assert meta["annotations"]["osrdyne.io/key"] == KEY
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "osrdyne"
    assert meta["labels"]["osrdyne.io/pool"] == POOL
    assert meta["labels"]["osrdyne.io/key-hash"] == names.key_hash(POOL, KEY)
    assert meta["labels"]["osrdyne.io/version"] == driver.version
    assert deployment["spec"]["replicas"] == 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert "osrdyne.io/version" not in selector  # a selector is immutable; versions change
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    env = env_of(deployment)
    assert env["WORKER_ID"]["fieldRef"]["fieldPath"] == "metadata.name"
    expected = base.PoolContext(POOL, kube.amqp_url).environment(KEY, "")
    del expected[wire.WorkerEnv.ID]
    assert {k: env[k] for k in expected} == expected
    assert env["EXTRA"] == "1"

    # The real ReplicaSet admitted two pods of the template; list() describes them.
    async def two_pods() -> bool:
        return await driver.list() == {KEY} and len(driver.describe().get(KEY, ())) == 2

    await eventually(two_pods, timeout=SETTLE, interval=0.5, what="the group's two pods")
    pods = kube.get("pods", namespace=namespace.name)
    assert {p["metadata"]["name"] for p in pods} == {w.name for w in driver.describe()[KEY]}
    for pod in pods:
        assert pod["metadata"]["annotations"]["osrdyne.io/key"] == KEY
        assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Never"


async def test_start_list_stop_are_idempotent_and_a_fresh_driver_adopts_the_group(
    drivers: Drivers,
    kube: KubeCluster,
    namespace: Namespace,
    traffic: pytest.LogCaptureFixture,
) -> None:
    where = f"/apis/apps/v1/namespaces/{namespace.name}/deployments"
    driver = drivers()
    assert await driver.list() == set()
    await driver.start(KEY)
    await driver.start(KEY)
    assert sent(traffic) == [("POST", where, 201)]
    # A restarted controller's driver finds the group, and leaves it as it is.
    restarted = drivers()
    await eventually(lambda: listed(restarted, {KEY}), timeout=SETTLE, what="the group listed")
    assert restarted.outdated() == set()
    await restarted.start(KEY)
    assert sent(traffic) == [("POST", where, 201)]
    await restarted.stop(KEY)
    await restarted.stop(KEY)
    name = driver.name(KEY)
    assert sent(traffic)[1:] == [
        ("DELETE", f"{where}/{name}", 200),
        ("DELETE", f"{where}/{name}", 404),
    ]
    await eventually(lambda: listed(driver, set()), timeout=SETTLE, what="no group listed")
    assert deployments(kube, namespace) == {}


async def test_similar_keys_and_other_pools_stay_apart(
    drivers: Drivers, kube: KubeCluster, namespace: Namespace
) -> None:
    driver = drivers()
    other_pool = drivers(pool="other pool/é")
    similar = ["infra 1", "infra-1", "INFRA_1"]
    for key in similar:
        await driver.start(key)
    await other_pool.start("infra 1")
    assert len(kube.get("deployments", namespace=namespace.name)) == 4
    await eventually(lambda: listed(driver, set(similar)), timeout=SETTLE, what="the pool's")
    assert await other_pool.list() == {"infra 1"}
    await driver.stop("infra 1")
    assert await other_pool.list() == {"infra 1"}
    await eventually(lambda: listed(driver, {"infra-1", "INFRA_1"}), timeout=SETTLE, what="two")


async def test_a_new_version_replaces_the_deployment_in_place(
    drivers: Drivers,
    kube: KubeCluster,
    namespace: Namespace,
    traffic: pytest.LogCaptureFixture,
) -> None:
    old = drivers(environment={"RELEASE": "1"})
    new = drivers(environment={"RELEASE": "2"})
    assert old.version != new.version
    await old.start(KEY)
    await old.start("other")
    before = deployments(kube, namespace)
    await upgrade(new, KEY)
    after = deployments(kube, namespace)
    replaced = after[KEY]
    assert replaced["metadata"]["uid"] == before[KEY]["metadata"]["uid"]  # the same object
    assert replaced["metadata"]["generation"] == 2
    assert replaced["metadata"]["labels"]["osrdyne.io/version"] == new.version
    assert env_of(replaced)["RELEASE"] == "2"
    puts = sent(traffic, frozenset({"PUT"}))
    where = f"/apis/apps/v1/namespaces/{namespace.name}/deployments/{new.name(KEY)}"
    assert puts[-1] == ("PUT", where, 200)
    assert all(put == ("PUT", where, 409) for put in puts[:-1]), puts  # 409: next pass
    # list() only lists: it reports the stale group, and start() upgrades it.
    await eventually(lambda: listed(new, {KEY, "other"}), timeout=SETTLE, what="both listed")
    assert new.outdated() == {"other"}
    assert after["other"]["metadata"]["labels"]["osrdyne.io/version"] == old.version
    await upgrade(new, "other")
    versions = {
        d["metadata"]["labels"]["osrdyne.io/version"] for d in deployments(kube, namespace).values()
    }
    assert versions == {new.version}


async def test_resize_sets_the_deployment_s_replicas_and_upgrades_keep_them(
    drivers: Drivers, kube: KubeCluster, namespace: Namespace
) -> None:
    def replicas() -> int:
        return int(deployments(kube, namespace)[KEY]["spec"]["replicas"])

    driver = drivers(replicas=1)
    await driver.start(KEY)
    await driver.resize(KEY, 3)  # not listed yet: nothing
    assert replicas() == 1
    await eventually(lambda: listed(driver, {KEY}), timeout=SETTLE, what="the group listed")
    assert driver.sizes() == {KEY: 1}
    await driver.resize(KEY, 3)
    assert replicas() == 3
    assert driver.sizes() == {KEY: 3}

    upgraded = drivers(replicas=1, environment={"NEW": "1"})  # a new version, restarted
    assert await upgraded.list() == {KEY}
    assert upgraded.sizes() == {KEY: 3}  # the cluster is the record
    await upgrade(upgraded, KEY)
    deployment = deployments(kube, namespace)[KEY]
    assert deployment["metadata"]["labels"]["osrdyne.io/version"] == upgraded.version
    assert deployment["spec"]["replicas"] == 3
    await upgraded.resize(KEY, 0)  # never below one
    assert replicas() == 1
    await upgraded.stop(KEY)
    assert upgraded.sizes() == {}


async def test_the_pod_template_is_the_base_of_the_worker_s(
    drivers: Drivers, kube: KubeCluster, namespace: Namespace
) -> None:
    template: dict[str, Any] = {
        "spec": {
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [
                {"name": "sidecar", "image": "proxy:1"},
                {
                    "name": "worker",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "env": [
                        {"name": "WORKER_KEY", "value": "wrong"},
                        {"name": "KEEP", "value": "1"},
                    ],
                },
            ],
        }
    }
    driver = drivers(
        pod_template=template,
        command=["python", "-m", "worker_sdk.examples.echo"],
        resources={"limits": {"memory": "4Gi", "cpu": "2"}, "requests": {"cpu": "1"}},
        node_selector={"pool": "spark"},
        tolerations=[{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
        service_account="workers",
        amqp_uri_secret={"name": "rabbitmq", "key": "uri"},
    )
    await driver.start(KEY)
    deployment = deployments(kube, namespace)[KEY]
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["sidecar", "worker"]
    worker = pod["containers"][1]
    assert worker["image"] == kube.worker_image
    assert worker["command"] == ["python", "-m", "worker_sdk.examples.echo"]
    assert worker["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert worker["resources"] == {
        "limits": {"memory": "4Gi", "cpu": "2"},
        "requests": {"cpu": "1"},
    }
    assert pod["nodeSelector"] == {"pool": "spark"}
    assert pod["tolerations"] == [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["serviceAccountName"] == "workers"
    env = env_of(deployment)
    assert env["WORKER_KEY"] == KEY and env["KEEP"] == "1"
    assert env["WORKER_AMQP_URI"] == {"secretKeyRef": {"name": "rabbitmq", "key": "uri"}}
    assert template["spec"]["containers"][1]["env"][0]["value"] == "wrong"  # not mutated


async def test_the_api_server_s_refusals_are_driver_rejected(
    drivers: Drivers,
    kube: KubeCluster,
    namespace: Namespace,
    tmp_path: Path,
    traffic: pytest.LogCaptureFixture,
) -> None:
    """401 (a token the server does not know), 403 (the ServiceAccount in a namespace it has
    no rights in), 422 (a manifest the server's validation refuses): each a `DriverRejected`
    for list, start and stop, the API's error as its cause. A field the client does not know
    is refused before anything is sent."""
    from kubernetes.client.exceptions import ApiException

    async def refused(driver: kubernetes_driver.KubernetesDriver, status: int, *calls: str) -> None:
        for call in calls:
            with pytest.raises(base.DriverRejected) as caught:
                await (driver.list() if call == "list" else getattr(driver, call)(KEY))
            cause = caught.value.__cause__
            assert isinstance(cause, ApiException) and cause.status == status, (call, cause)

    config = yaml.safe_load(namespace.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = "not-a-token"
    stranger = tmp_path / "stranger.kubeconfig"
    stranger.write_text(yaml.safe_dump(config))
    await refused(drivers(kubeconfig=str(stranger)), 401, "list", "start", "stop")
    await refused(drivers(namespace="default"), 403, "list", "start", "stop")
    effect = [{"key": "gpu", "operator": "Exists", "effect": "Sometimes"}]
    await refused(drivers(tolerations=effect), 422, "start")
    traffic.clear()
    unknown = drivers(tolerations=[{"key": "gpu", "effect": "NoSchedule", "bogus": True}])
    with pytest.raises(base.DriverRejected, match="bogus"):
        await unknown.start(KEY)
    assert sent(traffic, frozenset({"POST", "PUT"})) == []
    assert deployments(kube, namespace) == {}


# -- KEDA mode ---------------------------------------------------------------------------------


def kept(written: Any, stored: Any) -> bool:
    """Every field `written` has is in `stored` with its value; `stored` may have more (the
    defaults the server or an operator fills in, such as KEDA's `scalingModifiers: {}`)."""
    if isinstance(written, dict):
        return isinstance(stored, dict) and all(
            k in stored and kept(v, stored[k]) for k, v in written.items()
        )
    if isinstance(written, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(written)
            and all(kept(w, s) for w, s in zip(written, stored, strict=True))
        )
    return bool(written == stored)


async def test_keda_mode_writes_a_scaled_object_kept_as_written_and_stop_removes_it(
    make_namespace: Callable[..., Namespace],
    make_drivers: Callable[[Namespace], Drivers],
    kube: KubeCluster,
) -> None:
    namespace = make_namespace("keda")
    keda = {"enabled": True, "max_replicas": 5, "value": 20, "scale_down_stabilization": 30}
    driver = make_drivers(namespace)(keda=keda)
    await driver.start(KEY)
    deployment = deployments(kube, namespace)[KEY]
    (scaled,) = scaled_objects(kube, namespace)
    written = driver.scaled_object(KEY)
    assert kept(written["spec"], scaled["spec"])  # none pruned (KEDA adds its defaults)
    assert scaled["metadata"]["name"] == deployment["metadata"]["name"]
    assert scaled["metadata"]["labels"]["osrdyne.io/version"] == driver.version
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (0, 5)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "rabbitmq"
    assert trigger["metadata"]["queueName"] == wire.PoolNames(POOL).request_queue(KEY)
    assert trigger["metadata"]["mode"] == "QueueLength"
    assert trigger["metadata"]["value"] == "20"
    assert trigger["metadata"]["hostFromEnv"] == "WORKER_AMQP_URI"
    assert await driver.list() == {KEY}
    await driver.stop(KEY)
    await driver.stop(KEY)
    # KEDA's finalizer holds the ScaledObject until the operator has let go of it.
    await eventually(
        lambda: not scaled_objects(kube, namespace) and not deployments(kube, namespace),
        timeout=SETTLE, interval=0.5, what="the ScaledObject and the Deployment gone",
    )  # fmt: skip
    await eventually(lambda: listed(driver, set()), timeout=SETTLE, what="no group listed")


async def test_keda_mode_leaves_the_replicas_to_keda_through_upgrades_and_resizes(
    make_namespace: Callable[..., Namespace],
    make_drivers: Callable[[Namespace], Drivers],
    kube: KubeCluster,
    traffic: pytest.LogCaptureFixture,
) -> None:
    namespace = make_namespace("keda")
    drivers = make_drivers(namespace)
    keda = {"enabled": True, "trigger_authentication": "rabbitmq-auth", "min_replicas": 1}
    old = drivers(keda=keda, environment={"RELEASE": "1"})
    await old.start(KEY)
    (scaled,) = scaled_objects(kube, namespace)
    assert scaled["spec"]["triggers"][0]["authenticationRef"] == {"name": "rabbitmq-auth"}
    assert "hostFromEnv" not in scaled["spec"]["triggers"][0]["metadata"]
    assert deployments(kube, namespace)[KEY]["spec"]["replicas"] == 1
    # KEDA's HPA grew the group to 3 (played by the admin: no metric reaches this one).
    name = old.name(KEY)
    kube.kubectl("scale", "deployment", name, "--replicas=3", "-n", namespace.name)
    new = drivers(keda=keda, environment={"RELEASE": "2"})
    await eventually(lambda: listed(new, {KEY}), timeout=SETTLE, what="the group listed")
    assert new.outdated() == {KEY}
    assert new.sizes() == {}  # KEDA's, not the group scaler's
    traffic.clear()
    await new.resize(KEY, 4)
    assert sent(traffic) == []
    await upgrade(new, KEY)
    deployment = deployments(kube, namespace)[KEY]
    assert deployment["spec"]["replicas"] == 3
    assert env_of(deployment)["RELEASE"] == "2"
    (scaled,) = scaled_objects(kube, namespace)
    assert scaled["metadata"]["labels"]["osrdyne.io/version"] == new.version


async def test_list_reports_half_done_keda_groups_and_the_loop_finishes_them(
    make_namespace: Callable[..., Namespace],
    make_drivers: Callable[[Namespace], Drivers],
    kube: KubeCluster,
) -> None:
    namespace = make_namespace("keda")
    driver = make_drivers(namespace)(keda={"enabled": True, "min_replicas": 1})
    await driver.start("a")
    await driver.start("b")
    # A half-done stop left a ScaledObject without its Deployment, and a half-done start a
    # Deployment without its ScaledObject.
    name_a, name_b = driver.name("a"), driver.name("b")
    ns = namespace.name
    kube.kubectl("delete", "deployment", name_a, "-n", ns)
    kube.kubectl("delete", "scaledobjects.keda.sh", name_b, "-n", ns)  # waits for KEDA
    await eventually(lambda: listed(driver, {"a", "b"}), timeout=SETTLE, what="both listed")
    assert driver.outdated() == {"a", "b"}
    # The worker-group loop stops what is not expected and upgrades the rest.
    await driver.stop("a")
    await driver.start("b")

    def finished() -> bool:
        scaled = [s["metadata"]["name"] for s in scaled_objects(kube, namespace)]
        made = [d["metadata"]["name"] for d in kube.get("deployments", namespace=ns)]
        return scaled == made == [name_b]

    await eventually(finished, timeout=SETTLE, interval=0.5, what="only b's objects left")
    await eventually(lambda: listed(driver, {"b"}), timeout=SETTLE, what="b listed alone")
    assert driver.outdated() == set()


# -- what the server accepts -----------------------------------------------------------------


@pytest.mark.parametrize("folder", ["kubernetes", "keda"])
def test_the_api_server_accepts_the_deploy_manifests(
    kube: KubeCluster, make_namespace: Callable[..., Namespace], folder: str
) -> None:
    namespace = make_namespace(rbac=False)
    documents = []
    for path in sorted((DEPLOY / folder).glob("*.yaml")):
        if path.name != "kustomization.yaml":  # kustomize's, not the cluster's
            documents += deploy_documents(path, namespace=namespace.name)
    assert len(documents) >= 3
    dry_run(kube, documents)


@pytest.fixture
def admin_api(kube: KubeCluster) -> Any:
    """The official client, as the cluster's admin."""
    from kubernetes import client
    from kubernetes import config as config_module

    config: Any = config_module
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        yield api


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
@given(
    pool=st.one_of(st.sampled_from(["core", "x" * 60]), st.text(min_size=1, max_size=40)),
    key=st.text(min_size=1, max_size=255),
    vhost=st.text(max_size=40),
)
def test_any_key_gives_objects_the_api_server_accepts(
    kube: KubeCluster, namespace: Namespace, admin_api: Any, pool: str, key: str, vhost: str
) -> None:
    """Every key a request queue can have (the controller refuses the others first), in any
    pool and vhost: its Deployment, ScaledObject and HorizontalPodAutoscaler pass the real
    API server's validation (a server-side dry run, unknown fields refused: `Strict`)."""
    from kubernetes import client

    context = base.PoolContext(pool=pool, amqp_uri="amqp://h/%2F")
    if wire.key_problem(context.names, key) is not None:
        return
    section = {"namespace": namespace.name, "image": kube.worker_image}
    model = kubernetes_driver.KubernetesSettings.model_validate
    keda = model({**section, "keda": {"enabled": True}})
    hpa = model({**section, "hpa": {"enabled": True, "vhost": vhost}})
    deployment = kubernetes_driver.KubernetesDriver(context, keda).deployment(key)
    scaled = kubernetes_driver.KubernetesDriver(context, keda).scaled_object(key)
    autoscaler = kubernetes_driver.KubernetesDriver(context, hpa).horizontal_pod_autoscaler(
        key, owner_uid="4c4f8e5e-0000-4000-8000-000000000000"
    )
    apps: Any = client.AppsV1Api(admin_api)
    custom: Any = client.CustomObjectsApi(admin_api)
    autoscaling: Any = client.AutoscalingV2Api(admin_api)
    checked = {"dry_run": "All", "field_validation": "Strict"}
    apps.create_namespaced_deployment(namespace.name, deployment, **checked)
    custom.create_namespaced_custom_object(
        "keda.sh", "v1alpha1", namespace.name, "scaledobjects", scaled, **checked
    )
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace.name, autoscaler, **checked)
    for made in (deployment, scaled, autoscaler):
        assert names.is_dns_label(made["metadata"]["name"])
        assert all(names.is_label_value(v) for v in made["metadata"]["labels"].values())
    (value,) = autoscaler["spec"]["metrics"][0]["external"]["metric"]["selector"][
        "matchLabels"
    ].values()
    assert names.is_label_value(value)
