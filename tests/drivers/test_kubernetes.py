"""The kubernetes driver where no real API server can serve: faults at a chosen moment, and
what needs no server at all.

The driver runs on a real cluster in tests/kubernetes/ (test_driver.py: Deployment and KEDA
modes call by call; test_driver_hpa.py: HPA mode; test_deployments.py, test_autoscalers.py,
test_in_cluster.py: end to end), where the real server's answers, its 401, 403 and 422
included, are met for real. Here, on the API double (`k8s_double.ApiServerDouble`, with the
real `KubernetesDriver` talking to it over HTTP), only what the real server cannot be made to
do at a chosen moment:

- `test_api_errors_are_translated`: a 5xx or a 429 answer to one call (`fail_next`);
- `test_a_create_race_is_fine`: a read that misses the object another controller has just
  created, then the 409 of the create;
- `test_a_replace_that_meets_a_concurrent_change_waits_for_the_next_pass`: another client's
  write between the driver's read and its replace (the 409 of optimistic concurrency).

The other tests need no server: an unreachable one (a closed port), missing credentials, the
settings, and static checks of deploy/kubernetes/ and deploy/keda/ (their objects are
checked by the real API server in tests/kubernetes/test_driver.py).
"""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from drivers import base
from drivers import kubernetes as kubernetes_driver

pytestmark = pytest.mark.timeout(60)

DriverFactory = Any
KEY = "Infra/42 é — spaces & ünïcode"
REPO = Path(__file__).resolve().parents[2]
#: Each mode, and the plural of the object whose calls a test aims at.
MODES = {
    "deployment": ({}, "deployments"),
    "keda": ({"keda": {"enabled": True}}, "scaledobjects"),
    "hpa": ({"hpa": {"enabled": True}}, "horizontalpodautoscalers"),
}


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_api_errors_are_translated(
    k8s_driver: DriverFactory, k8s_api: Any, status: int
) -> None:
    """The double: a 5xx or a 429 cannot be had from the real server on demand."""
    driver = k8s_driver()
    for call in (driver.list, lambda: driver.start(KEY), lambda: driver.stop(KEY)):
        k8s_api.fail_next(status)
        with pytest.raises(base.DriverUnavailable) as caught:
            await call()
        assert caught.value.__cause__ is not None
    assert k8s_api.faults == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_create_race_is_fine(k8s_driver: DriverFactory, k8s_api: Any, mode: str) -> None:
    """The double: another controller creates the object between this one's read (a 404)
    and its create (a 409), which is as good as its own."""
    settings, plural = MODES[mode]
    await k8s_driver(**settings).start(KEY)
    k8s_api.fail_next(404, plural=plural, method="GET")
    await k8s_driver(**settings).start(KEY)
    assert len(k8s_api.of_kind(plural)) == 1
    posts = [path for method, path, _ in k8s_api.writes() if method == "POST"]
    assert sum(path.endswith(f"/{plural}") for path in posts) == 2  # the second was a 409
    assert k8s_api.faults == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_replace_that_meets_a_concurrent_change_reads_again_and_replaces(
    k8s_driver: DriverFactory, k8s_api: Any, mode: str
) -> None:
    """The double: another client (the Deployment controller, KEDA or the HPA controller
    writing the object's status) writes between the driver's read and its replace. The
    replace carries the resourceVersion it read, so it is refused (409) rather than undoing
    that write; the driver reads the object again and replaces it (client-go's
    RetryOnConflict), so the group is upgraded by this start, Deployment and scaler object
    alike (`list()` reads no scaler object's version: one left behind would stay so)."""
    settings, plural = MODES[mode]
    await k8s_driver(**settings, environment={"RELEASE": "1"}).start(KEY)
    new = k8s_driver(**settings, environment={"RELEASE": "2"})
    k8s_api.change_before_next("PUT", plural)
    await new.start(KEY)
    for kind in {"deployments", plural}:
        (upgraded,) = k8s_api.of_kind(kind)
        assert upgraded["metadata"]["labels"]["osrdyne.io/version"] == new.version
    puts = [(path, body) for method, path, body in k8s_api.writes() if method == "PUT"]
    assert sum(f"/{plural}/" in path for path, _ in puts) == 2  # the 409, then the replace
    assert all(body["metadata"]["resourceVersion"] for _, body in puts)
    assert await new.list() == {KEY} and new.outdated() == set()


@pytest.mark.parametrize("mode", MODES)
async def test_an_object_changed_before_every_replace_is_unavailable_then_upgraded(
    k8s_driver: DriverFactory, k8s_api: Any, mode: str
) -> None:
    """The double: the object changes before each of the driver's `CONFLICT_TRIES`
    replaces; the start is answered unavailable (the group loop's next pass tries again,
    nothing is reported done that is not), and the next start upgrades it."""
    from drivers.kubernetes import _core

    settings, plural = MODES[mode]
    await k8s_driver(**settings, environment={"RELEASE": "1"}).start(KEY)
    new = k8s_driver(**settings, environment={"RELEASE": "2"})
    for _ in range(_core.CONFLICT_TRIES):
        k8s_api.change_before_next("PUT", plural)
    with pytest.raises(base.DriverUnavailable, match="409"):
        await new.start(KEY)
    await new.start(KEY)
    for kind in {"deployments", plural}:
        (upgraded,) = k8s_api.of_kind(kind)
        assert upgraded["metadata"]["labels"]["osrdyne.io/version"] == new.version


async def test_unreachable_api_server_is_driver_unavailable(k8s_driver: DriverFactory) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    driver = k8s_driver(host=f"http://127.0.0.1:{port}", request_timeout=5)
    for call in (driver.list, lambda: driver.start(KEY), lambda: driver.stop(KEY)):
        with pytest.raises(base.DriverUnavailable):
            await call()


async def test_missing_kubeconfig_is_driver_rejected(
    k8s_driver: DriverFactory, tmp_path: Path
) -> None:
    driver = k8s_driver(host=None, auth="kubeconfig", kubeconfig=str(tmp_path / "nope"))
    with pytest.raises(base.DriverRejected):
        await driver.list()


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


def test_deploy_rbac_grants_what_the_driver_uses_and_no_more() -> None:
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
    (config_map,) = [m for w, m in deploy_documents() if w.startswith(f"{folder}/configmap")]
    config = tomllib.loads(config_map["data"]["osrdyne.toml"])
    settings = kubernetes_driver.KubernetesSettings.model_validate(config["driver"]["kubernetes"])
    assert settings.keda.enabled == (config["driver"]["kind"] == "keda")
