"""osrdyne deployed as users deploy it: the controller itself a pod, installed either from
deploy/kubernetes/ (kubectl's kustomize, from an overlay as an operator would write one: the
namespace, osrdyne's image built here, the broker's credentials) or with the Helm chart of
deploy/helm/osrdyne (Helm built from its module); authenticated in-cluster as its
ServiceAccount (the API server reached through its Service address: kube-proxy), and a client
on this machine answered by a worker pod it started.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from osrdyne import Client
from tests.faults.conftest import to_toml
from tests.kubernetes.conftest import DEPLOY, KubeCluster, Namespace
from tests.kubernetes.test_deployments import COLD, whoami
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(600)


def overlay(kube: KubeCluster, namespace: str, pool: str, directory: Path) -> Path:
    """A kustomize overlay of deploy/kubernetes/ for this cluster: what an operator changes."""
    base = DEPLOY / "kubernetes"
    (config_doc,) = yaml.safe_load_all((base / "configmap.yaml").read_text())
    config = tomllib.loads(config_doc["data"]["osrdyne.toml"])
    config["pool"] = pool
    config["amqp"]["management_url"] = kube.management_url
    section = config["driver"]["kubernetes"]
    section.update(image=kube.worker_image, image_pull_policy="Never", command=None)
    section.pop("command")  # the echo worker image's own CMD
    section["environment"] = {"WORKER_ACTIVITY_INTERVAL": "0.5"}
    name, tag = kube.controller_image.rsplit(":", 1)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(base, directory)],
        "namespace": namespace,
        "images": [{"name": "registry.example.org/osrdyne", "newName": name, "newTag": tag}],
        "patches": [
            {
                "target": {"kind": "Deployment", "name": "osrdyne"},
                "patch": json.dumps(
                    [{"op": "add", "path": "/spec/template/spec/containers/0/imagePullPolicy",
                      "value": "Never"}]
                ),
            },
            {
                "patch": yaml.safe_dump(
                    {"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "osrdyne-amqp", "namespace": "osrdyne"},
                     "stringData": {"uri": kube.amqp_url, "worker-uri": kube.amqp_url}}
                )
            },
            {
                "patch": yaml.safe_dump(
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "osrdyne-config", "namespace": "osrdyne"},
                     "data": {"osrdyne.toml": to_toml(config)}}
                )
            },
        ],
    }  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


def helm_install(kube: KubeCluster, namespace: str, pool: str) -> None:
    """`helm install` of deploy/helm/osrdyne with the values an operator sets."""
    repository, tag = kube.controller_image.rsplit(":", 1)
    values = {
        "pool": pool,
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "broker": {"uri": kube.amqp_url, "workerUri": kube.amqp_url,
                   "managementUrl": [kube.management_url]},
        "workers": {"image": kube.worker_image, "pullPolicy": "Never", "command": [],
                    "environment": {"WORKER_ACTIVITY_INTERVAL": "0.5"}},
        "config": {"groups": {"unbind_delay": 120}},
    }  # fmt: skip
    done = subprocess.run(
        [str(kube.helm), "install", "osrdyne", str(DEPLOY / "helm" / "osrdyne"),
         "--kubeconfig", str(kube.kubeconfig), "--namespace", namespace,
         "--values", "-", "--wait", "--timeout", f"{COLD}s"],
        input=json.dumps(values), capture_output=True, text=True, timeout=COLD + 60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("installer", ["kustomize", "helm"])
async def test_the_controller_runs_as_a_pod_and_serves_a_client(
    installer: str,
    pool: str,
    tmp_path: Path,
    client: Client,
    kube: KubeCluster,
    make_namespace: Callable[..., Namespace],
) -> None:
    namespace = make_namespace() if installer == "kustomize" else make_namespace(rbac=False)
    if installer == "kustomize":
        kube.kubectl("apply", "-k", str(overlay(kube, namespace.name, pool, tmp_path / "overlay")))
    else:
        helm_install(kube, namespace.name, pool)

    def controllers_ready() -> list[Any]:
        pods = kube.get("pods", namespace=namespace.name, selector="app.kubernetes.io/name=osrdyne")
        return [
            p for p in pods
            for c in p["status"].get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        ]  # fmt: skip

    # Two replicas: one leads, the other stands by.
    await eventually(controllers_ready, timeout=COLD, interval=1, what="a controller pod ready")
    answer = await whoami(client, pool, "in-cluster")
    (deployment,) = kube.get(
        "deployments", namespace=namespace.name, selector="app.kubernetes.io/managed-by=osrdyne"
    )
    assert deployment["metadata"]["annotations"]["osrdyne.io/key"] == "in-cluster"
    assert answer["worker_id"].startswith(deployment["metadata"]["name"])
