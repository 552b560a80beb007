"""Deployment mode, which every mode builds on: one Deployment per worker group.

Each worker learns its `WORKER_ID` from its pod name through the downward API. A group whose
version label differs from the current configuration is replaced (PUT of the new Deployment,
which rolls its pods). Under a scaler (KEDA or HPA mode) the Deployment's `spec.replicas` is
only the initial count: a replacement keeps the scaler's.
"""

from __future__ import annotations

import copy

from drivers.kubernetes import _core
from osrdyne import wire


def environment(cluster: _core.Cluster, key: str) -> list[_core.Manifest]:
    s = cluster.settings
    protocol_env = cluster.context.environment(key, worker_id="")
    env: list[_core.Manifest] = [
        {"name": k, "value": v} for k, v in s.environment.items() if k not in protocol_env
    ]
    env.append(
        {
            "name": wire.WorkerEnv.ID,
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        }
    )
    for k, v in protocol_env.items():
        if k == wire.WorkerEnv.ID:
            continue
        if k == wire.WorkerEnv.AMQP_URI and s.amqp_uri_secret is not None:
            ref = {"name": s.amqp_uri_secret.name, "key": s.amqp_uri_secret.key}
            env.append({"name": k, "valueFrom": {"secretKeyRef": ref}})
        else:
            env.append({"name": k, "value": v})
    return env


def pod_template(cluster: _core.Cluster, key: str) -> _core.Manifest:
    s = cluster.settings
    template = copy.deepcopy(s.pod_template)
    meta = cluster.metadata(key)
    pod_meta = template.setdefault("metadata", {})
    pod_meta["labels"] = {**pod_meta.get("labels", {}), **meta["labels"]}
    pod_meta["annotations"] = {**pod_meta.get("annotations", {}), **meta["annotations"]}
    spec = template.setdefault("spec", {})
    containers = spec.setdefault("containers", [])
    worker = next((c for c in containers if c.get("name") == _core.CONTAINER), None)
    if worker is None:
        worker = {"name": _core.CONTAINER}
        containers.insert(0, worker)
    worker["image"] = s.image
    optional = {
        "imagePullPolicy": s.image_pull_policy,
        "command": s.command,
        "args": s.args,
        "resources": s.resources or None,
    }
    worker.update({k: v for k, v in optional.items() if v is not None})
    reserved = {e["name"] for e in environment(cluster, key)}
    worker["env"] = [
        e for e in worker.get("env", []) if e.get("name") not in reserved
    ] + environment(cluster, key)
    if s.node_selector:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **s.node_selector}
    if s.tolerations:
        spec["tolerations"] = [*spec.get("tolerations", []), *s.tolerations]
    if s.service_account:
        spec["serviceAccountName"] = s.service_account
    return template


def deployment(cluster: _core.Cluster, key: str, *, replicas: int) -> _core.Manifest:
    """The Deployment of the group of `key`, starting with `replicas` pods."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": cluster.metadata(key),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 2,
            "selector": {"matchLabels": cluster.labels(key)},
            "template": pod_template(cluster, key),
        },
    }


def versions(cluster: _core.Cluster) -> tuple[dict[str, str], dict[str, int]]:
    """The version and `spec.replicas` of every group of the pool (blocking)."""
    deployments = cluster.apps().list_namespaced_deployment(
        cluster.namespace,
        label_selector=cluster.selector,
        _request_timeout=cluster.settings.request_timeout,
    )
    found: dict[str, str] = {}
    replicas: dict[str, int] = {}
    for d in deployments.items:
        key = cluster.key_of(d.metadata.annotations, d.metadata.labels)
        if key is not None:
            found[key] = (d.metadata.labels or {}).get(_core.LABEL_VERSION, "")
            replicas[key] = d.spec.replicas if d.spec.replicas is not None else 1
    return found, replicas


def scale(cluster: _core.Cluster, key: str, count: int) -> None:
    """Set `spec.replicas` of the Deployment of `key` (blocking; gone: nothing to do)."""
    with _core.absent_is_fine():
        cluster.apps().patch_namespaced_deployment(
            cluster.name(key), cluster.namespace, {"spec": {"replicas": count}},
            field_manager=_core.MANAGER, _request_timeout=cluster.settings.request_timeout,
        )  # fmt: skip


def converge(cluster: _core.Cluster, key: str, *, replicas: int, scaled: bool) -> str:
    """Create or upgrade the Deployment of `key` (blocking); its uid (the HPA's owner).

    `scaled`: a scaler owns the replicas, so an upgrade keeps the current count."""
    from kubernetes.client.exceptions import ApiException

    apps, timeout = cluster.apps(), cluster.settings.request_timeout
    name, namespace = cluster.name(key), cluster.namespace
    desired = deployment(cluster, key, replicas=replicas)
    try:
        current = apps.read_namespaced_deployment(name, namespace, _request_timeout=timeout)
    except ApiException as exc:
        if exc.status != 404:
            raise
        created = None
        with _core.exists_is_fine():
            created = apps.create_namespaced_deployment(
                namespace, desired, field_manager=_core.MANAGER, _request_timeout=timeout
            )
        if created is None:  # 409: another controller was faster; its uid, then
            created = apps.read_namespaced_deployment(name, namespace, _request_timeout=timeout)
        return str(created.metadata.uid)
    if (current.metadata.labels or {}).get(_core.LABEL_VERSION) == cluster.version:
        return str(current.metadata.uid)
    desired["metadata"]["resourceVersion"] = current.metadata.resource_version
    if scaled and current.spec.replicas is not None:
        desired["spec"]["replicas"] = current.spec.replicas  # KEDA's or the HPA's to decide
    # A 409 (changed since read) is raised: the caller reads again (`on_conflict_again`).
    apps.replace_namespaced_deployment(
        name, namespace, desired, field_manager=_core.MANAGER, _request_timeout=timeout
    )
    return str(current.metadata.uid)  # a replacement keeps the object, and its uid


def remove(cluster: _core.Cluster, key: str) -> None:
    """Delete the Deployment of `key` (blocking); its pods go in the background."""
    with _core.absent_is_fine():
        cluster.apps().delete_namespaced_deployment(
            cluster.name(key), cluster.namespace, propagation_policy="Background",
            _request_timeout=cluster.settings.request_timeout,
        )  # fmt: skip
