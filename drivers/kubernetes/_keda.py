"""KEDA mode (`keda.enabled`): each group also gets a ScaledObject (keda.sh/v1alpha1).

Its `rabbitmq` trigger watches the group's request queue, so KEDA scales *inside* a group
while osrdyne creates and removes groups; osrdyne then leaves `spec.replicas` to KEDA.
"""

from __future__ import annotations

from drivers.kubernetes import _core

KEDA_GROUP, KEDA_VERSION, KEDA_PLURAL = "keda.sh", "v1alpha1", "scaledobjects"


class Keda:
    """The ScaledObjects of one pool's groups (a `_core.Scaler`)."""

    def __init__(self, cluster: _core.Cluster) -> None:
        self.cluster = cluster
        self.settings = cluster.settings.keda
        self.replicas = max(self.settings.min_replicas, 1)
        self._where = (KEDA_GROUP, KEDA_VERSION, cluster.namespace, KEDA_PLURAL)

    def scaled_object(self, key: str) -> _core.Manifest:
        """The KEDA ScaledObject of the group of `key`."""
        keda, cluster = self.settings, self.cluster
        trigger_metadata = {
            "protocol": keda.protocol,
            "mode": keda.mode,
            "value": _number(keda.value),
            "queueName": cluster.context.names.request_queue(key),
        }
        if keda.activation_value is not None:
            trigger_metadata["activationValue"] = _number(keda.activation_value)
        if keda.vhost is not None:
            trigger_metadata["vhostName"] = keda.vhost
        trigger: _core.Manifest = {"type": "rabbitmq", "metadata": trigger_metadata}
        if keda.trigger_authentication:
            trigger["authenticationRef"] = {"name": keda.trigger_authentication}
        elif keda.host_from_env:
            trigger_metadata["hostFromEnv"] = keda.host_from_env
        spec: _core.Manifest = {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": cluster.name(key),
                "envSourceContainerName": _core.CONTAINER,
            },
            "pollingInterval": keda.polling_interval,
            "cooldownPeriod": keda.cooldown_period,
            "minReplicaCount": keda.min_replicas,
            "maxReplicaCount": keda.max_replicas,
            "triggers": [trigger],
        }
        if keda.scale_down_stabilization is not None:
            scale_down = {"stabilizationWindowSeconds": keda.scale_down_stabilization}
            behavior = {"behavior": {"scaleDown": scale_down}}
            spec["advanced"] = {"horizontalPodAutoscalerConfig": behavior}
        return {
            "apiVersion": f"{KEDA_GROUP}/{KEDA_VERSION}",
            "kind": "ScaledObject",
            "metadata": cluster.metadata(key),
            "spec": spec,
        }

    def keys(self) -> set[str]:
        cluster = self.cluster
        scaled = cluster.custom().list_namespaced_custom_object(
            *self._where, label_selector=cluster.selector,
            _request_timeout=cluster.settings.request_timeout,
        )  # fmt: skip
        metas = [item.get("metadata", {}) for item in scaled.get("items", [])]
        keys = (cluster.key_of(m.get("annotations"), m.get("labels")) for m in metas)
        return {key for key in keys if key is not None}

    def converge(self, key: str, *, owner_uid: str) -> None:
        from kubernetes.client.exceptions import ApiException

        cluster = self.cluster
        custom, timeout = cluster.custom(), cluster.settings.request_timeout
        desired = self.scaled_object(key)
        try:
            current = custom.get_namespaced_custom_object(
                *self._where, cluster.name(key), _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            with _core.exists_is_fine():
                custom.create_namespaced_custom_object(
                    *self._where, desired, field_manager=_core.MANAGER, _request_timeout=timeout
                )
            return
        meta = current.get("metadata", {})
        if meta.get("labels", {}).get(_core.LABEL_VERSION) == cluster.version:
            return
        desired["metadata"]["resourceVersion"] = meta.get("resourceVersion")
        # A 409 (changed since read) is raised: the driver reads again (`on_conflict_again`).
        custom.replace_namespaced_custom_object(
            *self._where, cluster.name(key), desired, field_manager=_core.MANAGER,
            _request_timeout=timeout,
        )  # fmt: skip

    def remove(self, key: str) -> None:
        cluster = self.cluster
        with _core.absent_is_fine():
            cluster.custom().delete_namespaced_custom_object(
                *self._where, cluster.name(key),
                _request_timeout=cluster.settings.request_timeout,
            )  # fmt: skip


def _number(value: float) -> str:
    """KEDA trigger metadata values are strings: '10', not '10.0'."""
    return str(int(value)) if value == int(value) else str(value)
