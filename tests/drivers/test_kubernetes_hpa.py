"""HPA mode of the kubernetes driver, against the API-server double, and its deploy files.

No Kubernetes API server can run where these tests run: `k8s_double.ApiServerDouble` stands in
for it (the real REST paths of the official client, `autoscaling/v2` HorizontalPodAutoscalers
beside `apps/v1` Deployments, optimistic concurrency, label selectors, owner-reference garbage
collection) and refuses (422) every object that fails the Kubernetes 1.29 OpenAPI schema, as
`kubernetes-validate` ships it (strict: unknown fields refused). The real `KubernetesDriver`
talks to it over HTTP. Nothing here proves that an HPA controller reads the metric or scales a
Deployment, nor that prometheus-adapter serves the metric: those need a cluster.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers import base, names, registry
from drivers import kubernetes as kubernetes_driver
from osrdyne import wire
from tests.drivers import k8s_double

pytestmark = pytest.mark.timeout(60)

DriverFactory = Any
KEY = "Infra/42 é — spaces & ünïcode"
REPO = Path(__file__).resolve().parents[2]
HPA_DIR = REPO / "deploy" / "hpa"
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


def hpa_of(k8s_api: Any) -> dict[str, Any]:
    (hpa,) = k8s_api.of_kind("horizontalpodautoscalers")
    return hpa  # type: ignore[no-any-return]


def hpa_driver(k8s_driver: DriverFactory, *, image: str = "worker:1", **hpa: Any) -> Any:
    return k8s_driver(image=image, hpa={"enabled": True, **hpa})


async def test_hpa_mode_creates_a_valid_hpa_owned_by_the_deployment(
    k8s_driver: DriverFactory, k8s_api: Any, pool_name: str
) -> None:
    driver = hpa_driver(k8s_driver, min_replicas=2, max_replicas=7, target_value=2.5)
    await driver.start(KEY)
    (deployment,) = k8s_api.of_kind("deployments")
    hpa = hpa_of(k8s_api)
    k8s_double.validate(hpa)
    assert hpa["apiVersion"] == "autoscaling/v2"
    meta, dmeta = hpa["metadata"], deployment["metadata"]
    assert meta["name"] == dmeta["name"] == names.object_name(pool_name, KEY)
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
    queue = wire.PoolNames(pool_name).request_queue(KEY)
    assert metric["external"]["metric"] == {
        "name": "rabbitmq_queue_messages_ready",
        "selector": {"matchLabels": {"queue_hash": kubernetes_driver.queue_hash("/", queue)}},
    }
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "2500m"}
    paths = {path for method, path, _ in k8s_api.requests if method == "POST"}
    assert "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers" in paths


async def test_hpa_start_list_stop_are_idempotent(k8s_driver: DriverFactory, k8s_api: Any) -> None:
    driver = hpa_driver(k8s_driver)
    assert await driver.list() == set()
    await driver.start(KEY)
    await driver.start(KEY)
    assert [m for m, _, _ in k8s_api.requests if m in ("POST", "PUT")] == ["POST", "POST"]
    assert await driver.list() == {KEY}
    assert driver.outdated() == set()
    await driver.stop(KEY)
    await driver.stop(KEY)
    assert k8s_api.of_kind("deployments") == k8s_api.of_kind("horizontalpodautoscalers") == []
    assert await driver.list() == set()


async def test_deleting_the_deployment_deletes_its_hpa(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    driver = hpa_driver(k8s_driver)
    await driver.start("a")
    await driver.start("b")
    # What `kubectl delete deployment` does: the garbage collector follows the owner
    # reference (the double collects at once) and takes the HPA of "a" only.
    from kubernetes import client

    api = client.AppsV1Api(driver._client())
    api.delete_namespaced_deployment(driver.name("a"), "default")
    assert [h["metadata"]["name"] for h in k8s_api.of_kind("horizontalpodautoscalers")] == [
        driver.name("b")
    ]
    assert await driver.list() == {"b"}


async def test_upgrade_replaces_the_hpa_and_keeps_the_replicas_it_chose(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    old = hpa_driver(k8s_driver, max_replicas=4, image="worker:1")
    new = hpa_driver(k8s_driver, max_replicas=9, image="worker:2")
    assert old.version != new.version
    await old.start(KEY)
    await old.start("other")
    (uid,) = {d["metadata"]["uid"] for d in k8s_api.of_kind("deployments")
              if d["metadata"]["name"] == old.name(KEY)}  # fmt: skip
    # The HPA scaled the group to 3; an upgrade must not reset that.
    k8s_api.objects[("deployments", "default", old.name(KEY))]["spec"]["replicas"] = 3
    assert await new.list() == {KEY, "other"}
    assert new.outdated() == {KEY, "other"}
    await new.start(KEY)
    deployment = k8s_api.objects[("deployments", "default", new.name(KEY))]
    hpa = k8s_api.objects[("horizontalpodautoscalers", "default", new.name(KEY))]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "worker:2"
    assert deployment["metadata"]["uid"] == uid
    assert hpa["metadata"]["generation"] == 2
    assert hpa["metadata"]["labels"]["osrdyne.io/version"] == new.version
    assert hpa["spec"]["maxReplicas"] == 9
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == uid
    assert await new.list() == {KEY, "other"}
    assert new.outdated() == {"other"}
    puts = [body for method, _, body in k8s_api.requests if method == "PUT"]
    assert {b["kind"] for b in puts} == {"Deployment", "HorizontalPodAutoscaler"}
    assert all(b["metadata"]["resourceVersion"] for b in puts)


async def test_an_hpa_left_by_a_deleted_deployment_is_given_the_new_owner(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    driver = hpa_driver(k8s_driver)
    await driver.start(KEY)
    # The Deployment went, and the collector has not reached its HPA yet.
    del k8s_api.objects[("deployments", "default", driver.name(KEY))]
    await driver.start(KEY)
    (deployment,) = k8s_api.of_kind("deployments")
    owner = hpa_of(k8s_api)["metadata"]["ownerReferences"][0]
    assert owner["uid"] == deployment["metadata"]["uid"]


async def test_list_reports_half_done_hpa_groups(k8s_driver: DriverFactory, k8s_api: Any) -> None:
    driver = hpa_driver(k8s_driver)
    await driver.start("a")
    await driver.start("b")
    # A half-done stop left an HPA without its Deployment, a half-done start a Deployment
    # without its HPA.
    name_a, name_b = driver.name("a"), driver.name("b")
    del k8s_api.objects[("deployments", "default", name_a)]
    del k8s_api.objects[("horizontalpodautoscalers", "default", name_b)]
    assert await driver.list() == {"a", "b"}
    assert driver.outdated() == {"a", "b"}
    await driver.stop("a")
    await driver.start("b")
    assert [h["metadata"]["name"] for h in k8s_api.of_kind("horizontalpodautoscalers")] == [name_b]
    assert [d["metadata"]["name"] for d in k8s_api.of_kind("deployments")] == [name_b]
    assert await driver.list() == {"b"} and driver.outdated() == set()


async def test_hpas_of_other_pools_and_tampered_ones_are_not_listed(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    driver = hpa_driver(k8s_driver)
    other_pool = k8s_driver(pool="other pool/é", hpa={"enabled": True})
    await driver.start("k")
    await other_pool.start("k")
    assert await driver.list() == {"k"} and await other_pool.list() == {"k"}
    # An HPA whose key annotation was edited no longer matches its key-hash label: ignored.
    del k8s_api.objects[("deployments", "default", driver.name("k"))]
    hpa = k8s_api.objects[("horizontalpodautoscalers", "default", driver.name("k"))]
    hpa["metadata"]["annotations"]["osrdyne.io/key"] = "someone else"
    assert await driver.list() == set()


async def test_hostile_keys_give_valid_distinct_objects(
    k8s_driver: DriverFactory, k8s_api: Any, pool_name: str
) -> None:
    driver = hpa_driver(k8s_driver)
    for key in HOSTILE_KEYS:
        await driver.start(key)  # the double refuses (422) what the schema refuses
    hpas = k8s_api.of_kind("horizontalpodautoscalers")
    assert len(hpas) == len(HOSTILE_KEYS)
    hashes = set()
    for hpa in hpas:
        key = hpa["metadata"]["annotations"]["osrdyne.io/key"]
        assert names.is_dns_label(hpa["metadata"]["name"])
        assert all(names.is_label_value(v) for v in hpa["metadata"]["labels"].values())
        selected = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]
        assert list(selected) == ["queue_hash"]
        value = selected["queue_hash"]
        assert names.is_label_value(value) and value.isdigit() and int(value) < 2**64 - 1
        assert value == kubernetes_driver.queue_hash(
            "/", wire.PoolNames(pool_name).request_queue(key)
        )
        hashes.add(value)
    assert len(hashes) == len(HOSTILE_KEYS)
    assert await driver.list() == set(HOSTILE_KEYS)
    for key in HOSTILE_KEYS:
        await driver.stop(key)
    assert k8s_api.of_kind("deployments") == k8s_api.of_kind("horizontalpodautoscalers") == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    pool=st.one_of(st.sampled_from(["core", "x" * 60]), st.text(min_size=1, max_size=40)),
    key=st.text(min_size=1, max_size=255),
    vhost=st.text(max_size=40),
)
def test_any_key_gives_a_valid_hpa(pool: str, key: str, vhost: str) -> None:
    # Every key a request queue can have (the controller refuses the others first), in any
    # pool and vhost: the HPA passes the schema, its names and label values are valid.
    context = base.PoolContext(pool=pool, amqp_uri="amqp://h/%2F")
    if wire.key_problem(context.names, key) is not None:
        return
    settings = kubernetes_driver.KubernetesSettings(hpa={"enabled": True, "vhost": vhost})
    hpa = kubernetes_driver.KubernetesDriver(context, settings).horizontal_pod_autoscaler(
        key, owner_uid="u"
    )
    k8s_double.validate(hpa)
    assert names.is_dns_label(hpa["metadata"]["name"])
    assert hpa["spec"]["scaleTargetRef"]["name"] == hpa["metadata"]["name"]
    assert all(names.is_label_value(v) for v in hpa["metadata"]["labels"].values())
    (value,) = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"].values()
    assert names.is_label_value(value)


@pytest.mark.parametrize(
    ("amqp_uri", "vhost"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/%2F", "/"),
        ("amqp://guest:guest@127.0.0.1:5672", "/"),
        ("amqp://u:p@h1/prod%20east,amqp://u:p@h2/prod%20east", "prod east"),
        ("amqps://u:p@h:5671/jobs?heartbeat=30", "jobs"),
    ],
)
def test_the_vhost_comes_from_the_worker_uri_unless_set(amqp_uri: str, vhost: str) -> None:
    context = base.PoolContext(pool="core", amqp_uri=amqp_uri)
    settings = kubernetes_driver.KubernetesSettings(hpa={"enabled": True})
    driver = kubernetes_driver.KubernetesDriver(context, settings)
    assert driver.vhost == vhost
    queue = context.names.request_queue("k")
    assert driver.queue_hash("k") == kubernetes_driver.queue_hash(vhost, queue)
    explicit = settings.model_copy(update={"hpa": settings.hpa.model_copy(update={"vhost": "x"})})
    other = kubernetes_driver.KubernetesDriver(context, explicit)
    assert other.vhost == "x" and other.queue_hash("k") != driver.queue_hash("k")


def test_queue_hash_is_prometheus_hashmod_arithmetic() -> None:
    # Prometheus (model/relabel, action hashmod): md5 of the source label values joined by
    # the separator, its last 8 bytes as a big-endian integer, modulo the modulus, in decimal.
    # Written here from the hex digest, apart from the driver's byte arithmetic; the real
    # Prometheus computes it in test_prometheus_hashmod.py.
    import hashlib

    for vhost, queue in [("/", "core-req-a"), ("prod", "p-req-x+2B#0123"), ("é", "")]:
        md5 = hashlib.new("md5", f"{vhost};{queue}".encode(), usedforsecurity=False)
        expected = int(md5.hexdigest()[16:], 16) % (2**64 - 1)
        assert kubernetes_driver.queue_hash(vhost, queue) == str(expected)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, base.DriverUnavailable),
        (429, base.DriverUnavailable),
        (403, base.DriverRejected),
        (422, base.DriverRejected),
    ],
)
async def test_hpa_api_errors_are_translated(
    k8s_driver: DriverFactory, k8s_api: Any, status: int, error: type[Exception]
) -> None:
    driver = hpa_driver(k8s_driver)
    await driver.start("present")
    calls = (driver.list, lambda: driver.start(KEY), lambda: driver.stop("present"))
    for call in calls:
        k8s_api.fail_next(status, plural="horizontalpodautoscalers")
        with pytest.raises(error) as caught:
            await call()
        assert caught.value.__cause__ is not None
    assert k8s_api.faults == []


@pytest.mark.parametrize(
    "hpa",
    [
        {"min_replicas": 0},  # HPAScaleToZero not declared
        {"min_replicas": 5, "max_replicas": 4},
        {"max_replicas": 0},
        {"max_replicas": 1001},
        {"min_replicas": -1},
        {"target_value": 0},
        {"target_value": 1e7},
        {"scale_down_stabilization": 3601},
        {"metric_name": ""},
        {"metric_name": 'rabbitmq_queue_messages_ready{queue="x"}'},
        {"metric_name": "a/b"},
        {"metric_name": "a" * 201},
        {"vhost": "v" * 256},
        {"bogus": 1},
    ],
)
def test_hpa_settings_are_bounded(hpa: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        kubernetes_driver.KubernetesSettings.model_validate({"hpa": {"enabled": True, **hpa}})


async def test_scale_to_zero_needs_the_gate_and_starts_one_pod(
    k8s_driver: DriverFactory, k8s_api: Any
) -> None:
    driver = hpa_driver(k8s_driver, min_replicas=0, scale_to_zero=True)
    await driver.start(KEY)
    assert hpa_of(k8s_api)["spec"]["minReplicas"] == 0
    (deployment,) = k8s_api.of_kind("deployments")
    assert deployment["spec"]["replicas"] == 1  # a group starts because a request waits


def test_hpa_kind_and_its_exclusions() -> None:
    context = base.PoolContext(pool="core", amqp_uri="amqp://h/%2F")
    plain = kubernetes_driver.KubernetesSettings()
    driver = registry.make_driver("hpa", {"kubernetes": plain}, context)
    assert isinstance(driver, kubernetes_driver.KubernetesDriver)
    assert driver._settings.hpa.enabled and not driver._settings.keda.enabled
    keda_on = plain.model_copy(update={"keda": plain.keda.model_copy(update={"enabled": True})})
    with pytest.raises(base.DriverConfigurationError):
        registry.make_driver("hpa", {"kubernetes": keda_on}, context)
    hpa_on = plain.model_copy(update={"hpa": plain.hpa.model_copy(update={"enabled": True})})
    with pytest.raises(base.DriverConfigurationError):
        registry.make_driver("keda", {"kubernetes": hpa_on}, context)
    with pytest.raises(pydantic.ValidationError):
        kubernetes_driver.KubernetesSettings.model_validate(
            {"keda": {"enabled": True}, "hpa": {"enabled": True}}
        )
    for name, field in kubernetes_driver.HpaSettings.model_fields.items():
        assert field.description, name


@pytest.mark.parametrize(
    ("settings", "version"),
    [
        # Versions computed by osrdyne before HPA mode existed: adding it must not change
        # them, or upgrading osrdyne would replace every running Deployment.
        ({}, "hfhiqizo2x"),
        ({"keda": {"enabled": True}}, "b3hwmjfqtr"),
        ({"image": "w:2", "replicas": 3}, "l5qvbtr452"),
    ],
)
def test_versions_of_other_modes_are_unchanged(settings: dict[str, Any], version: str) -> None:
    context = base.PoolContext(pool="core", amqp_uri="amqp://guest:guest@127.0.0.1:5672/%2F")
    model = kubernetes_driver.KubernetesSettings.model_validate(settings)
    assert kubernetes_driver.KubernetesDriver(context, model).version == version
    with_hpa = model.model_copy(update={"hpa": model.hpa.model_copy(update={"enabled": True})})
    assert kubernetes_driver.KubernetesDriver(context, with_hpa).version != version


def test_the_double_refuses_an_invalid_hpa() -> None:
    context = base.PoolContext(pool="core", amqp_uri="amqp://h/%2F")
    settings = kubernetes_driver.KubernetesSettings(hpa={"enabled": True})
    hpa = kubernetes_driver.KubernetesDriver(context, settings).horizontal_pod_autoscaler(
        "k", owner_uid="u"
    )
    k8s_double.validate(hpa)
    del hpa["spec"]["maxReplicas"]
    with pytest.raises(Exception, match="maxReplicas"):
        k8s_double.validate(hpa)


# -- deploy/hpa ----------------------------------------------------------------------------


def hpa_documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in sorted(HPA_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                documents.append((path.name, document))
    return documents


def manifests() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{w}:{d['kind']}", d) for w, d in hpa_documents() if "apiVersion" in d]


def test_deploy_hpa_files_parse() -> None:
    files = {w for w, _ in hpa_documents()}
    assert {"adapter-config.yaml", "prometheus-scrape.yaml", "hpa-example.yaml"} <= files
    assert {"configmap.yaml", "rbac.yaml"} <= files


@pytest.mark.parametrize(("where", "manifest"), manifests())
def test_deploy_hpa_manifests_are_valid(where: str, manifest: dict[str, Any]) -> None:
    k8s_double.validate(manifest)


def test_example_hpa_is_what_the_driver_makes() -> None:
    (example,) = [m for _, m in manifests() if m["kind"] == "HorizontalPodAutoscaler"]
    (config_map,) = [m for w, m in manifests() if w.startswith("configmap.yaml")]
    config = tomllib.loads(config_map["data"]["osrdyne.toml"])
    assert config["driver"]["kind"] == "hpa"
    settings = kubernetes_driver.KubernetesSettings.model_validate(config["driver"]["kubernetes"])
    context = base.PoolContext(pool=config["pool"], amqp_uri="amqp://h/%2F")
    driver = registry.make_driver("hpa", {"kubernetes": settings}, context)
    assert isinstance(driver, kubernetes_driver.KubernetesDriver)
    key = example["metadata"]["annotations"]["osrdyne.io/key"]
    made = driver.horizontal_pod_autoscaler(key, owner_uid="uid")
    assert example["spec"] == made["spec"]
    assert example["metadata"]["name"] == made["metadata"]["name"]


def test_adapter_rule_and_scrape_config_match_the_driver() -> None:
    docs = dict(hpa_documents())
    (config_map,) = [m for w, m in manifests() if w.startswith("adapter-config.yaml")]
    adapter = yaml.safe_load(config_map["data"]["config.yaml"])
    (rule,) = adapter["externalRules"]
    default = kubernetes_driver.HpaSettings().metric_name
    assert rule["name"]["as"] == default
    assert "rabbitmq_detailed_queue_messages_ready" in rule["seriesQuery"]
    assert "<<.LabelMatchers>>" in rule["metricsQuery"]
    assert rule["resources"] == {"namespaced": False}  # the queue is no object of a namespace
    scrape = docs["prometheus-scrape.yaml"]
    (job,) = scrape["scrape_configs"]
    assert job["metrics_path"] == "/metrics/detailed"
    assert job["params"] == {"family": ["queue_coarse_metrics"]}
    (hashmod,) = [r for r in job["metric_relabel_configs"] if r.get("action") == "hashmod"]
    assert hashmod["source_labels"] == ["vhost", "queue"]
    assert hashmod.get("separator", ";") == ";"
    assert hashmod["target_label"] == kubernetes_driver.QUEUE_HASH_LABEL
    assert hashmod["modulus"] == kubernetes_driver.QUEUE_HASH_MODULUS


def test_deploy_hpa_rbac_grants_what_the_driver_uses() -> None:
    (role,) = [m for _, m in manifests() if m["kind"] == "Role"]
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}  # fmt: skip
    verbs = {"get", "list", "create", "patch", "update", "delete"}
    assert granted[("apps", "deployments")] == verbs
    assert granted[("autoscaling", "horizontalpodautoscalers")] == verbs
    assert granted[("", "pods")] == {"get", "list"}  # read only
