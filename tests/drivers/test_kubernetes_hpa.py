"""HPA mode of the kubernetes driver where no real API server can serve: 5xx and 429 on the
HPA calls, and what needs no server at all.

HPA mode runs on a real cluster in tests/kubernetes/test_driver_hpa.py (the HPAs the driver
writes, accepted by the real API server, owner references followed by the real garbage
collector, upgrades, half-done groups, hostile keys, RBAC, `minReplicas: 0` refused without
the HPAScaleToZero gate, deploy/hpa/'s objects) and test_autoscalers.py (the real HPA
controller reading the HPA). Here only `test_hpa_api_errors_are_translated` uses the API
double (`k8s_double.ApiServerDouble`): a 5xx or a 429 on an HPA call, after the Deployment's
call succeeded, cannot be had from the real server on demand. The rest needs no server: the
metric's `queue_hash`, the settings and their bounds, versions, and deploy/hpa/'s files
against the driver (tests/drivers/test_hpa_metrics.py runs the metric's path on a real
RabbitMQ and Prometheus).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from drivers import base, registry
from drivers import kubernetes as kubernetes_driver

pytestmark = pytest.mark.timeout(60)

DriverFactory = Any
KEY = "Infra/42 é — spaces & ünïcode"
REPO = Path(__file__).resolve().parents[2]
HPA_DIR = REPO / "deploy" / "hpa"


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
    # Prometheus computes it in test_hpa_metrics.py.
    import hashlib

    for vhost, queue in [("/", "core-req-a"), ("prod", "p-req-x+2B#0123"), ("é", "")]:
        md5 = hashlib.new("md5", f"{vhost};{queue}".encode(), usedforsecurity=False)
        expected = int(md5.hexdigest()[16:], 16) % (2**64 - 1)
        assert kubernetes_driver.queue_hash(vhost, queue) == str(expected)


@pytest.mark.parametrize("status", [500, 429])
async def test_hpa_api_errors_are_translated(
    k8s_driver: DriverFactory, k8s_api: Any, status: int
) -> None:
    """The double: a 5xx or a 429 on the HPA's call alone (the Deployment's succeeded)
    cannot be had from the real server on demand. (The 403 of an HPA call refused by RBAC is
    met for real in tests/kubernetes/test_driver_hpa.py.)"""
    driver = k8s_driver(hpa={"enabled": True})
    await driver.start("present")
    calls = (driver.list, lambda: driver.start(KEY), lambda: driver.stop("present"))
    for call in calls:
        k8s_api.fail_next(status, plural="horizontalpodautoscalers")
        with pytest.raises(base.DriverUnavailable) as caught:
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


def test_with_the_gate_scale_to_zero_gives_min_replicas_0_and_starts_one_pod() -> None:
    # On a cluster with the HPAScaleToZero gate; the one of tests/kubernetes has it off, and
    # its API server refuses the HPA (test_driver_hpa.py).
    context = base.PoolContext(pool="core", amqp_uri="amqp://h/%2F")
    settings = kubernetes_driver.KubernetesSettings.model_validate(
        {"hpa": {"enabled": True, "min_replicas": 0, "scale_to_zero": True}}
    )
    driver = kubernetes_driver.KubernetesDriver(context, settings)
    assert driver.horizontal_pod_autoscaler(KEY, owner_uid="u")["spec"]["minReplicas"] == 0
    assert driver.deployment(KEY)["spec"]["replicas"] == 1  # a group starts: a request waits


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
