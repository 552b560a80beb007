"""HPA mode (`hpa.enabled`): each group also gets a HorizontalPodAutoscaler (autoscaling/v2).

Owned by its Deployment, it scales it on an External metric: the depth of the group's request
queue as a metrics adapter serves it (deploy/hpa/: prometheus-adapter over RabbitMQ's
per-queue metrics). A queue name is no label value (up to 255 bytes of `+:@,/#`...), so the
metric selector names the queue by `queue_hash`, a label Prometheus computes at scrape time
with its `hashmod` relabelling and the driver computes the same way (`queue_hash`).
"""

from __future__ import annotations

import hashlib
import urllib.parse

from drivers.kubernetes import _core

#: The label of the adapter's metric naming a queue (see `queue_hash` and deploy/hpa/).
QUEUE_HASH_LABEL = "queue_hash"
#: Modulus of the Prometheus `hashmod` relabelling giving `queue_hash` (2**64 - 1: the
#: largest a Prometheus configuration takes, so the whole 64-bit hash is kept).
QUEUE_HASH_MODULUS = 2**64 - 1


class Hpa:
    """The HorizontalPodAutoscalers of one pool's groups (a `_core.Scaler`)."""

    def __init__(self, cluster: _core.Cluster) -> None:
        self.cluster = cluster
        self.settings = cluster.settings.hpa
        self.replicas = max(self.settings.min_replicas, 1)
        self.vhost = (
            self.settings.vhost
            if self.settings.vhost is not None
            else vhost_of(cluster.context.amqp_uri)
        )

    def queue_hash(self, key: str) -> str:
        """The `queue_hash` label of the metric of the request queue of `key` (deploy/hpa/)."""
        return queue_hash(self.vhost, self.cluster.context.names.request_queue(key))

    def horizontal_pod_autoscaler(self, key: str, *, owner_uid: str) -> _core.Manifest:
        """The HorizontalPodAutoscaler of the group of `key`, owned by its Deployment (whose
        uid is `owner_uid`), so deleting the Deployment deletes it too."""
        hpa, cluster = self.settings, self.cluster
        metadata = cluster.metadata(key)
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": cluster.name(key),
             "uid": owner_uid}
        ]  # fmt: skip
        selector = {"matchLabels": {QUEUE_HASH_LABEL: self.queue_hash(key)}}
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": metadata,
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": cluster.name(key),
                },
                "minReplicas": hpa.min_replicas,
                "maxReplicas": hpa.max_replicas,
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {"name": hpa.metric_name, "selector": selector},
                            "target": {
                                "type": "AverageValue",
                                "averageValue": _quantity(hpa.target_value),
                            },
                        },
                    }
                ],
                "behavior": {
                    "scaleDown": {"stabilizationWindowSeconds": hpa.scale_down_stabilization}
                },
            },
        }

    def keys(self) -> set[str]:
        cluster = self.cluster
        hpas = cluster.autoscaling().list_namespaced_horizontal_pod_autoscaler(
            cluster.namespace,
            label_selector=cluster.selector,
            _request_timeout=cluster.settings.request_timeout,
        )
        keys = (cluster.key_of(h.metadata.annotations, h.metadata.labels) for h in hpas.items)
        return {key for key in keys if key is not None}

    def converge(self, key: str, *, owner_uid: str) -> None:
        from kubernetes.client.exceptions import ApiException

        cluster = self.cluster
        autoscaling, timeout = cluster.autoscaling(), cluster.settings.request_timeout
        name, namespace = cluster.name(key), cluster.namespace
        desired = self.horizontal_pod_autoscaler(key, owner_uid=owner_uid)
        try:
            current = autoscaling.read_namespaced_horizontal_pod_autoscaler(
                name, namespace, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            with _core.exists_is_fine():
                autoscaling.create_namespaced_horizontal_pod_autoscaler(
                    namespace, desired, field_manager=_core.MANAGER, _request_timeout=timeout
                )
            return
        owners = {o.uid for o in current.metadata.owner_references or []}
        version = (current.metadata.labels or {}).get(_core.LABEL_VERSION)
        if version == cluster.version and owner_uid in owners:
            return
        # Another version, or owned by a Deployment since deleted and made anew.
        desired["metadata"]["resourceVersion"] = current.metadata.resource_version
        # A 409 (changed since read) is raised: the driver reads again (`on_conflict_again`).
        autoscaling.replace_namespaced_horizontal_pod_autoscaler(
            name, namespace, desired, field_manager=_core.MANAGER, _request_timeout=timeout
        )

    def remove(self, key: str) -> None:
        # The owner reference would have the garbage collector do it after the Deployment
        # goes; deleting it first stops it scaling a Deployment being removed.
        cluster = self.cluster
        with _core.absent_is_fine():
            cluster.autoscaling().delete_namespaced_horizontal_pod_autoscaler(
                cluster.name(key), cluster.namespace,
                _request_timeout=cluster.settings.request_timeout,
            )  # fmt: skip


def queue_hash(vhost: str, queue: str) -> str:
    """The `queue_hash` label Prometheus gives the metrics of `queue` in `vhost` (deploy/hpa/).

    Its `hashmod` relabelling with `source_labels: [vhost, queue]`, the default separator `;`
    and `modulus: QUEUE_HASH_MODULUS`: the last 8 bytes of the MD5 of `vhost;queue`, read
    big-endian, modulo the modulus, in decimal. A label value whatever the queue's name
    (digits only), 64 bits of hash: MD5 is Prometheus' choice, a name hash, not a safeguard.
    """
    digest = hashlib.md5(f"{vhost};{queue}".encode(), usedforsecurity=False).digest()
    return str(int.from_bytes(digest[8:], "big") % QUEUE_HASH_MODULUS)


def vhost_of(amqp_uri: str) -> str:
    """The virtual host of the first of the (comma-separated) AMQP URIs: '/' when none."""
    path = urllib.parse.urlsplit(amqp_uri.split(",", 1)[0].strip()).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"


def _quantity(value: float) -> str:
    """A Kubernetes quantity for `value`, kept to thousandths: 10 -> '10', 1.5 -> '1500m'."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
