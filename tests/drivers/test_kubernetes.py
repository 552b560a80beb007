"""The kubernetes driver against an API-server double, and every manifest against schemas.

No Kubernetes cluster can run where these tests run: `k8s_double.ApiServerDouble` stands in
for the API server (the real REST paths of the official client, status codes and optimistic
concurrency, schema validation of what is written), and the real `KubernetesDriver` talks to
it over HTTP. Nothing here proves that pods start, roll or get scaled by KEDA on a cluster.
Deployments are validated with kubernetes-validate (Kubernetes 1.29, strict), ScaledObjects
and TriggerAuthentications with the KEDA schemas in `schemas/`, written from KEDA's docs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from drivers import base, names
from drivers import kubernetes as kubernetes_driver
from osrdyne import wire
from tests.drivers import k8s_double

pytestmark = pytest.mark.timeout(60)

DriverFactory = Any
KEY = "Infra/42 é — spaces & ünïcode"
REPO = Path(__file__).resolve().parents[2]


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "worker"
    ]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


async def test_start_creates_a_valid_labelled_deployment(
    k8s_driver: DriverFactory, k8s_api: Any, pool_name: str, amqp_uri: str
) -> None:
    driver = k8s_driver(replicas=2, environment={"EXTRA": "1"})
    await driver.start(KEY)
    (deployment,) = k8s_api.of_kind("deployments")
    k8s_double.validate(deployment)
    meta = deployment["metadata"]
    assert meta["name"] == names.object_name(pool_name, KEY)
    assert meta["annotations"]["osrdyne.io/key"] == KEY
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "osrdyne"
    assert meta["labels"]["osrdyne.io/pool"] == pool_name
    assert meta["labels"]["osrdyne.io/key-hash"] == names.key_hash(pool_name, KEY)
    assert meta["labels"]["osrdyne.io/version"] == driver.version
    assert deployment["spec"]["replicas"] == 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert "osrdyne.io/version" not in selector  # a selector is immutable; versions change
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    env = env_of(deployment)
    assert env["WORKER_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    expected = base.PoolContext(pool_name, amqp_uri).environment(KEY, "")
    del expected[wire.WorkerEnv.ID]
    assert {k: env[k] for k in expected} == expected
    assert env["EXTRA"] == "1"


async def test_start_list_stop_are_idempotent(k8s_driver: DriverFactory, k8s_api: Any) -> None:
    driver = k8s_driver()
    assert await driver.list() == set()
    await driver.start(KEY)
    await driver.start(KEY)
    assert [m for m, _, _ in k8s_api.requests if m in ("POST", "PUT")] == ["POST"]
    assert await driver.list() == {KEY}
    await driver.stop(KEY)
    await driver.stop(KEY)
    assert k8s_api.of_kind("deployments") == []
    assert await driver.list() == set()


async def test_similar_keys_and_other_pools_stay_apart(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    driver = k8s_driver()
    other_pool = k8s_driver(pool="other")
    similar = ["infra 1", "infra-1", "INFRA_1"]
    for key in similar:
        await driver.start(key)
    await other_pool.start("infra 1")
    assert len(k8s_api.of_kind("deployments")) == 4
    assert await driver.list() == set(similar)
    assert await other_pool.list() == {"infra 1"}
    await driver.stop("infra 1")
    assert await other_pool.list() == {"infra 1"}


async def test_fresh_driver_adopts_existing_deployments(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    await k8s_driver().start(KEY)
    writes = len(list(k8s_api.writes()))
    restarted = k8s_driver()
    assert await restarted.list() == {KEY}
    await restarted.start(KEY)
    assert len(list(k8s_api.writes())) == writes
    await restarted.stop(KEY)
    assert k8s_api.of_kind("deployments") == []


async def test_new_version_replaces_the_deployment(k8s_driver: DriverFactory, k8s_api: Any) -> None:
    old = k8s_driver(image="worker:1")
    new = k8s_driver(image="worker:2")
    assert old.version != new.version
    await old.start(KEY)
    await old.start("other")
    await new.start(KEY)
    replaced = {
        d["metadata"]["annotations"]["osrdyne.io/key"]: d for d in k8s_api.of_kind("deployments")
    }
    assert replaced[KEY]["metadata"]["generation"] == 2
    assert replaced[KEY]["metadata"]["labels"]["osrdyne.io/version"] == new.version
    assert replaced[KEY]["spec"]["template"]["spec"]["containers"][0]["image"] == "worker:2"
    # list() only lists: it reports the stale group, and start() upgrades it.
    assert await new.list() == {KEY, "other"}
    assert new.outdated() == {"other"}
    assert old.version in {
        d["metadata"]["labels"]["osrdyne.io/version"] for d in k8s_api.of_kind("deployments")
    }
    await new.start("other")
    assert {
        d["metadata"]["labels"]["osrdyne.io/version"] for d in k8s_api.of_kind("deployments")
    } == {new.version}
    # A PUT carries the resourceVersion it read: a concurrent change makes it a 409, ignored.
    puts = [body for method, _, body in k8s_api.requests if method == "PUT"]
    assert puts and all(body["metadata"]["resourceVersion"] for body in puts)


async def test_keda_mode_creates_and_deletes_a_scaled_object(
    k8s_driver: DriverFactory, k8s_api: Any, pool_name: str
) -> None:
    driver = k8s_driver(keda={"enabled": True, "max_replicas": 5, "value": 20})
    await driver.start(KEY)
    (deployment,) = k8s_api.of_kind("deployments")
    (scaled,) = k8s_api.of_kind("scaledobjects")
    k8s_double.validate(scaled)
    assert deployment["spec"]["replicas"] == 1
    assert scaled["metadata"]["name"] == deployment["metadata"]["name"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["spec"]["minReplicaCount"] == 0
    assert scaled["spec"]["maxReplicaCount"] == 5
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "rabbitmq"
    assert trigger["metadata"]["queueName"] == wire.PoolNames(pool_name).request_queue(KEY)
    assert trigger["metadata"]["mode"] == "QueueLength"
    assert trigger["metadata"]["value"] == "20"
    assert trigger["metadata"]["hostFromEnv"] == "WORKER_AMQP_URI"
    assert await driver.list() == {KEY}
    await driver.stop(KEY)
    await driver.stop(KEY)
    assert k8s_api.of_kind("deployments") == k8s_api.of_kind("scaledobjects") == []


async def test_keda_trigger_authentication_and_replicas_left_to_keda(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    keda = {"enabled": True, "trigger_authentication": "rabbitmq-auth", "min_replicas": 1}
    old = k8s_driver(keda=keda, image="worker:1")
    await old.start(KEY)
    (scaled,) = k8s_api.of_kind("scaledobjects")
    assert scaled["spec"]["triggers"][0]["authenticationRef"] == {"name": "rabbitmq-auth"}
    assert "hostFromEnv" not in scaled["spec"]["triggers"][0]["metadata"]
    # KEDA scaled the group to 3; an upgrade must not reset that.
    (deployment,) = k8s_api.of_kind("deployments")
    key = ("deployments", "default", deployment["metadata"]["name"])
    k8s_api.objects[key]["spec"]["replicas"] = 3
    await k8s_driver(keda=keda, image="worker:2").start(KEY)
    (deployment,) = k8s_api.of_kind("deployments")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "worker:2"


async def test_list_reports_half_done_keda_groups(k8s_driver: DriverFactory, k8s_api: Any) -> None:
    driver = k8s_driver(keda={"enabled": True})
    await driver.start("a")
    await driver.start("b")
    # A half-done stop left a ScaledObject without its Deployment, and a half-done start a
    # Deployment without its ScaledObject.
    name_a, name_b = driver.name("a"), driver.name("b")
    del k8s_api.objects[("deployments", "default", name_a)]
    del k8s_api.objects[("scaledobjects", "default", name_b)]
    assert await driver.list() == {"a", "b"}
    assert driver.outdated() == {"a", "b"}
    # The worker-group loop stops what is not expected and upgrades the rest.
    await driver.stop("a")
    await driver.start("b")
    assert [s["metadata"]["name"] for s in k8s_api.of_kind("scaledobjects")] == [name_b]
    assert [d["metadata"]["name"] for d in k8s_api.of_kind("deployments")] == [name_b]
    assert await driver.list() == {"b"} and driver.outdated() == set()


async def test_create_race_is_fine(k8s_driver: DriverFactory, k8s_api: Any) -> None:
    await k8s_driver().start(KEY)
    k8s_api.fail_next(404)  # our read misses the group another controller just created
    await k8s_driver().start(KEY)
    assert len(k8s_api.of_kind("deployments")) == 1
    assert [m for m, _, _ in k8s_api.requests].count("POST") == 2  # the second one was a 409


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, base.DriverUnavailable),
        (503, base.DriverUnavailable),
        (429, base.DriverUnavailable),
        (403, base.DriverRejected),
        (401, base.DriverRejected),
        (422, base.DriverRejected),
    ],
)
async def test_api_errors_are_translated(
    k8s_driver: DriverFactory, k8s_api: Any, status: int, error: type[Exception]
) -> None:
    driver = k8s_driver()
    for call in (driver.list, lambda: driver.start(KEY), lambda: driver.stop(KEY)):
        k8s_api.fail_next(status)
        with pytest.raises(error) as caught:
            await call()
        assert caught.value.__cause__ is not None


async def test_invalid_manifest_is_rejected(k8s_driver: DriverFactory) -> None:
    driver = k8s_driver(tolerations=[{"key": "gpu", "effect": "NoSchedule", "bogus": True}])
    with pytest.raises(base.DriverRejected, match="bogus"):
        await driver.start(KEY)


async def test_unreachable_api_server_is_driver_unavailable(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    url = k8s_api.url
    k8s_api.stop()
    driver = k8s_driver(host=url, request_timeout=5)
    for call in (driver.list, lambda: driver.start(KEY), lambda: driver.stop(KEY)):
        with pytest.raises(base.DriverUnavailable):
            await call()
    k8s_api.start = lambda: k8s_api  # the fixture's stop() must not run twice
    k8s_api.stop = lambda: None


async def test_missing_kubeconfig_is_driver_rejected(
    k8s_driver: DriverFactory, tmp_path: Path
) -> None:
    driver = k8s_driver(host=None, auth="kubeconfig", kubeconfig=str(tmp_path / "nope"))
    with pytest.raises(base.DriverRejected):
        await driver.list()


async def test_pod_template_is_the_base(k8s_driver: DriverFactory, k8s_api: Any) -> None:
    template = {
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
    driver = k8s_driver(
        pod_template=template,
        image="worker:3",
        command=["python", "-m", "worker_sdk.examples.echo"],
        resources={"limits": {"memory": "4Gi", "cpu": "2"}, "requests": {"cpu": "1"}},
        node_selector={"pool": "spark"},
        tolerations=[{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
        service_account="workers",
        amqp_uri_secret={"name": "rabbitmq", "key": "uri"},
    )
    await driver.start(KEY)
    (deployment,) = k8s_api.of_kind("deployments")
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["sidecar", "worker"]
    worker = pod["containers"][1]
    assert worker["image"] == "worker:3"
    assert worker["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert worker["resources"]["limits"]["memory"] == "4Gi"
    assert pod["nodeSelector"] == {"pool": "spark"}
    assert pod["serviceAccountName"] == "workers"
    env = env_of(deployment)
    assert env["WORKER_KEY"] == KEY and env["KEEP"] == "1"
    assert env["WORKER_AMQP_URI"] == {"secretKeyRef": {"name": "rabbitmq", "key": "uri"}}
    assert template["spec"]["containers"][1]["env"][0]["value"] == "wrong"  # not mutated


def test_every_write_was_valid_for_its_schema(k8s_api: Any) -> None:
    # The double refuses (422) what fails validation, so the tests above that succeeded only
    # wrote valid manifests; this checks the validator itself refuses what it must.
    bad = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
           "spec": {"scaleTargetRef": {"name": "x"}, "triggers": [{"type": "rabbitmq",
                    "metadata": {"queueName": "q", "value": "10"}}]}}  # fmt: skip
    with pytest.raises(Exception, match="valid"):
        k8s_double.validate(bad)  # a rabbitmq trigger needs a host source


def test_settings_are_documented_and_keda_needs_a_host() -> None:
    for model in (kubernetes_driver.KubernetesSettings, kubernetes_driver.KedaSettings):
        for name, field in model.model_fields.items():
            assert field.description, name
    with pytest.raises(ValueError):
        kubernetes_driver.KubernetesSettings.model_validate(
            {"keda": {"enabled": True, "host_from_env": None}}
        )


def deploy_documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for folder in ("kubernetes", "keda"):
        for path in sorted((REPO / "deploy" / folder).glob("*.yaml")):
            if path.name == "kustomization.yaml":  # kustomize's, not the cluster's
                continue
            for document in yaml.safe_load_all(path.read_text()):
                if document:
                    documents.append((f"{folder}/{path.name}:{document['kind']}", document))
    return documents


@pytest.mark.parametrize(("where", "manifest"), deploy_documents())
def test_deploy_manifests_are_valid(where: str, manifest: dict[str, Any]) -> None:
    k8s_double.validate(manifest)


def test_deploy_rbac_grants_what_the_driver_uses() -> None:
    roles = [m for _, m in deploy_documents() if m["kind"] == "Role"]
    assert roles
    verbs = {"get", "list", "create", "patch", "update", "delete"}
    for role in roles:
        granted = {(g, r): set(rule["verbs"]) for rule in role["rules"]
                   for g in rule["apiGroups"] for r in rule["resources"]}  # fmt: skip
        assert granted[("apps", "deployments")] == verbs
        assert granted[("", "pods")] == {"get", "list"}  # read only
        if ("keda.sh", "scaledobjects") in granted:
            assert granted[("keda.sh", "scaledobjects")] == verbs


@pytest.mark.parametrize("folder", ["kubernetes", "keda"])
def test_deploy_config_maps_hold_valid_driver_settings(folder: str) -> None:
    import tomllib

    (config_map,) = [m for w, m in deploy_documents() if w.startswith(f"{folder}/configmap")]
    config = tomllib.loads(config_map["data"]["osrdyne.toml"])
    settings = kubernetes_driver.KubernetesSettings.model_validate(config["driver"]["kubernetes"])
    assert settings.keda.enabled == (config["driver"]["kind"] == "keda")


async def test_resize_sets_the_deployments_replicas_and_upgrades_keep_them(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    driver = k8s_driver(replicas=1)
    await driver.start(KEY)
    await driver.resize(KEY, 3)  # not listed yet: nothing
    assert k8s_api.of_kind("deployments")[0]["spec"]["replicas"] == 1
    assert await driver.list() == {KEY}
    assert driver.sizes() == {KEY: 1}
    await driver.resize(KEY, 3)
    (deployment,) = k8s_api.of_kind("deployments")
    k8s_double.validate(deployment)
    assert deployment["spec"]["replicas"] == 3
    assert driver.sizes() == {KEY: 3}

    upgraded = k8s_driver(replicas=1, environment={"NEW": "1"})  # a new version, restarted
    assert await upgraded.list() == {KEY}
    assert upgraded.sizes() == {KEY: 3}  # the cluster is the record
    await upgraded.start(KEY)
    (deployment,) = k8s_api.of_kind("deployments")
    assert deployment["metadata"]["labels"]["osrdyne.io/version"] == upgraded.version
    assert deployment["spec"]["replicas"] == 3
    await upgraded.resize(KEY, 0)  # never below one
    assert k8s_api.of_kind("deployments")[0]["spec"]["replicas"] == 1
    await upgraded.stop(KEY)
    assert upgraded.sizes() == {}


async def test_keda_and_hpa_modes_keep_their_own_scaler(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    driver = k8s_driver(keda={"enabled": True, "max_replicas": 5})
    await driver.start(KEY)
    assert await driver.list() == {KEY}
    assert driver.sizes() == {}
    await driver.resize(KEY, 4)
    assert k8s_api.of_kind("deployments")[0]["spec"]["replicas"] == 1
