"""Worker groups as Kubernetes Deployments, optionally scaled by KEDA.

One Deployment per worker key, named by `drivers.names.object_name`, labelled
`app.kubernetes.io/managed-by: osrdyne`, `osrdyne.io/pool` and `osrdyne.io/key-hash` (its
selector) and `osrdyne.io/version`, and annotated with the exact key (`osrdyne.io/key`). The
API server is the only state, so a restarted controller adopts what it lists. Each worker
learns its `WORKER_ID` from its pod name through the downward API.

KEDA mode (`keda.enabled`): each group also gets a ScaledObject (keda.sh/v1alpha1) with a
`rabbitmq` trigger on the group's request queue, so KEDA scales *inside* a group while osrdyne
creates and removes groups. osrdyne then leaves `spec.replicas` to KEDA.

HPA mode (`hpa.enabled`): each group also gets a HorizontalPodAutoscaler (autoscaling/v2),
owned by its Deployment, scaling it on an External metric: the depth of the group's request
queue as a metrics adapter serves it (deploy/hpa/: prometheus-adapter over RabbitMQ's
per-queue metrics). A queue name is no label value (up to 255 bytes of `+:@,/#`...), so the
metric selector names the queue by `queue_hash`, a label Prometheus computes at scrape time
with its `hashmod` relabelling and the driver computes the same way (`queue_hash`).

Upgrades: a group whose version label differs from the current configuration is replaced
(PUT of the new Deployment, which rolls its pods), on `start` and whenever `list` sees it.

The official client is blocking and imported lazily; every call runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import logging
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from pydantic import Field

from drivers import base, names
from osrdyne import wire

if TYPE_CHECKING:
    from kubernetes import client as k8s

logger = logging.getLogger(__name__)

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_POOL = "osrdyne.io/pool"
LABEL_KEY_HASH = "osrdyne.io/key-hash"
LABEL_VERSION = "osrdyne.io/version"
ANNOTATION_KEY = "osrdyne.io/key"
ANNOTATION_POOL = "osrdyne.io/pool"
MANAGER = "osrdyne"
CONTAINER = "worker"
KEDA_GROUP, KEDA_VERSION, KEDA_PLURAL = "keda.sh", "v1alpha1", "scaledobjects"
#: The label of the adapter's metric naming a queue (see `queue_hash` and deploy/hpa/).
QUEUE_HASH_LABEL = "queue_hash"
#: Modulus of the Prometheus `hashmod` relabelling giving `queue_hash` (2**64 - 1: the
#: largest a Prometheus configuration takes, so the whole 64-bit hash is kept).
QUEUE_HASH_MODULUS = 2**64 - 1
#: The hard limit of an HPA's replicas here (a group is one key's workers, not a fleet).
MAX_HPA_REPLICAS = 1000
_METRIC_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,199}$")
_IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

Manifest = dict[str, Any]


class SecretKey(pydantic.BaseModel):
    """A key of a Secret in the driver's namespace."""

    model_config = pydantic.ConfigDict(extra="forbid")

    name: str = Field(description="Name of the Secret.")
    key: str = Field(description="Key inside the Secret.")


class KedaSettings(pydantic.BaseModel):
    """KEDA mode: a ScaledObject per group scales its Deployment on the queue's length."""

    model_config = pydantic.ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="Create a ScaledObject per group.")
    min_replicas: int = Field(
        default=0, ge=0, description="minReplicaCount: 0 lets KEDA scale an idle group to zero."
    )
    max_replicas: int = Field(default=4, ge=1, description="maxReplicaCount of a group.")
    mode: Literal["QueueLength", "MessageRate"] = Field(
        default="QueueLength", description="What the rabbitmq trigger measures."
    )
    value: float = Field(
        default=10, gt=0, description="Target per replica: messages ready, or publishes/s."
    )
    activation_value: float | None = Field(
        default=None, ge=0, description="activationValue of the trigger; None: KEDA's default."
    )
    polling_interval: int = Field(default=15, ge=1, description="pollingInterval, seconds.")
    cooldown_period: int = Field(default=300, ge=0, description="cooldownPeriod, seconds.")
    protocol: Literal["auto", "amqp", "http"] = Field(
        default="auto", description="How KEDA reads the queue: AMQP or the management API."
    )
    host_from_env: str | None = Field(
        default="WORKER_AMQP_URI",
        description="hostFromEnv: environment variable of the worker container holding the "
        "broker URI KEDA connects with (the worker's own WORKER_AMQP_URI by default).",
    )
    trigger_authentication: str | None = Field(
        default=None,
        description="Name of a TriggerAuthentication (same namespace) giving the trigger its "
        "`host`; used instead of host_from_env when set.",
    )
    vhost: str | None = Field(default=None, description="vhostName; None: the URI's vhost.")


class HpaSettings(pydantic.BaseModel):
    """HPA mode: a HorizontalPodAutoscaler per group scales its Deployment on the queue's depth.

    The depth is an External metric served by a metrics adapter (deploy/hpa/).
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="Create a HorizontalPodAutoscaler per group.")
    min_replicas: int = Field(
        default=1,
        ge=0,
        le=MAX_HPA_REPLICAS,
        description="minReplicas; 0 only with scale_to_zero (osrdyne removes idle groups "
        "itself, so 1 is the usual floor).",
    )
    max_replicas: int = Field(
        default=4, ge=1, le=MAX_HPA_REPLICAS, description="maxReplicas of a group."
    )
    scale_to_zero: bool = Field(
        default=False,
        description="The cluster runs with the HPAScaleToZero feature gate: min_replicas may be 0.",
    )
    target_value: float = Field(
        default=10,
        ge=0.001,
        le=1_000_000,
        description="Target averageValue: messages ready per replica (kept to thousandths).",
    )
    metric_name: str = Field(
        default="rabbitmq_queue_messages_ready",
        description="Name of the External metric the adapter serves (deploy/hpa/ names it so).",
    )
    vhost: str | None = Field(
        default=None,
        max_length=255,
        description="Virtual host of the request queues, hashed with their names into "
        "queue_hash; None: the worker AMQP URI's ('/' when it names none).",
    )
    scale_down_stabilization: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="behavior.scaleDown.stabilizationWindowSeconds, seconds.",
    )

    @pydantic.field_validator("metric_name")
    @classmethod
    def _metric_name(cls, name: str) -> str:
        if not _METRIC_NAME.match(name):
            raise ValueError(
                "metric_name must match [a-zA-Z_][a-zA-Z0-9_]*, 200 characters at most"
            )
        return name

    @pydantic.model_validator(mode="after")
    def _bounds(self) -> HpaSettings:
        if self.min_replicas == 0 and not self.scale_to_zero:
            raise ValueError("min_replicas = 0 needs scale_to_zero (the HPAScaleToZero gate)")
        if self.max_replicas < max(self.min_replicas, 1):
            raise ValueError("max_replicas must be at least min_replicas (and 1)")
        return self


class KubernetesSettings(pydantic.BaseModel):
    """Settings of the kubernetes driver (`[driver.kubernetes]` in the configuration)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    auth: Literal["auto", "incluster", "kubeconfig"] = Field(
        default="auto",
        description="Credentials: the pod's service account ('incluster'), a kubeconfig "
        "file, or 'auto' (in-cluster when available, else kubeconfig).",
    )
    host: str | None = Field(
        default=None,
        description="Explicit API server URL; when set, no credentials are loaded (tests, "
        "kubectl proxy) besides `token`.",
    )
    token: str | None = Field(default=None, description="Bearer token to use with `host`.")
    verify_ssl: bool = Field(default=True, description="Verify the API server's certificate.")
    kubeconfig: str | None = Field(
        default=None, description="Kubeconfig path; None: KUBECONFIG or ~/.kube/config."
    )
    kube_context: str | None = Field(
        default=None, description="Kubeconfig context; None: the current context."
    )
    request_timeout: float = Field(default=30.0, gt=0, description="Seconds per API call.")
    namespace: str | None = Field(
        default=None,
        description="Namespace of the groups; None: the pod's own namespace in-cluster, "
        "else 'default'.",
    )
    image: str = Field(default="osrdyne-worker:latest", description="Worker image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="imagePullPolicy; None: Kubernetes' default."
    )
    command: list[str] | None = Field(
        default=None, description="Container command; None: the image's ENTRYPOINT."
    )
    args: list[str] | None = Field(default=None, description="Container args; None: image's.")
    replicas: int = Field(
        default=1, ge=0, description="Pods per group (KEDA and HPA modes: only the initial count)."
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment; the protocol's WORKER_* variables win over it.",
    )
    amqp_uri_secret: SecretKey | None = Field(
        default=None,
        description="Take WORKER_AMQP_URI from this Secret key instead of a literal value.",
    )
    resources: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="Container resources, e.g. {requests = {cpu = '1'}, limits = {memory = "
        "'4Gi'}}.",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Pod nodeSelector.")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Pod tolerations, as Kubernetes spells them."
    )
    service_account: str | None = Field(
        default=None, description="serviceAccountName of the pods; None: the namespace's."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels on Deployments and pods."
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Extra annotations on Deployments and pods."
    )
    pod_template: dict[str, Any] = Field(
        default_factory=dict,
        description="Base PodTemplateSpec (volumes, sidecars, securityContext, ...); the "
        "driver fills in its container named 'worker' (added if absent) and the settings "
        "above.",
    )
    keda: KedaSettings = Field(default_factory=KedaSettings, description="KEDA mode.")
    hpa: HpaSettings = Field(default_factory=HpaSettings, description="HPA mode.")

    @pydantic.model_validator(mode="after")
    def _keda_needs_a_host(self) -> KubernetesSettings:
        if self.keda.enabled and not (self.keda.host_from_env or self.keda.trigger_authentication):
            raise ValueError("keda needs host_from_env or trigger_authentication")
        if self.keda.enabled and self.hpa.enabled:
            raise ValueError("keda and hpa both scale the Deployment: enable one of them")
        return self


class KubernetesDriver:
    """Runs each worker group as a Deployment (and, in KEDA mode, a ScaledObject)."""

    def __init__(self, context: base.PoolContext, settings: KubernetesSettings) -> None:
        import kubernetes  # noqa: F401  (fail early, and clearly, when the SDK is missing)

        self._context = context
        self._settings = settings
        self._api: k8s.ApiClient | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._outdated: set[str] = set()
        self.namespace = settings.namespace or _default_namespace()
        self.version = names.version_hash(
            {
                "pool": context.pool,
                "amqp_uri": context.amqp_uri,
                "group": settings.model_dump(
                    mode="json",
                    exclude={
                        "auth", "host", "token", "verify_ssl", "kubeconfig", "kube_context",
                        "request_timeout", "namespace",
                        # Off, HPA mode is no part of a group: versions (and running groups)
                        # stay what they were before it existed.
                        *(() if settings.hpa.enabled else ("hpa",)),
                    },
                ),
            }
        )  # fmt: skip
        self.selector = (
            f"{LABEL_MANAGED_BY}={MANAGER},{LABEL_POOL}={names.label_value(context.pool)}"
        )
        self.vhost = (
            settings.hpa.vhost if settings.hpa.vhost is not None else _vhost_of(context.amqp_uri)
        )

    # -- manifests (pure) -----------------------------------------------------------------

    def name(self, key: str) -> str:
        return names.object_name(self._context.pool, key)

    def _labels(self, key: str) -> dict[str, str]:
        return {
            LABEL_MANAGED_BY: MANAGER,
            LABEL_POOL: names.label_value(self._context.pool),
            LABEL_KEY_HASH: names.key_hash(self._context.pool, key),
        }

    def _metadata(self, key: str) -> Manifest:
        s = self._settings
        return {
            "name": self.name(key),
            "namespace": self.namespace,
            "labels": {**s.labels, **self._labels(key), LABEL_NAME: "osrdyne-worker",
                       LABEL_VERSION: self.version},
            "annotations": {**s.annotations, ANNOTATION_KEY: key,
                            ANNOTATION_POOL: self._context.pool},
        }  # fmt: skip

    def _environment(self, key: str) -> list[Manifest]:
        s = self._settings
        protocol_env = self._context.environment(key, worker_id="")
        env: list[Manifest] = [
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

    def pod_template(self, key: str) -> Manifest:
        s = self._settings
        template = copy.deepcopy(s.pod_template)
        meta = self._metadata(key)
        pod_meta = template.setdefault("metadata", {})
        pod_meta["labels"] = {**pod_meta.get("labels", {}), **meta["labels"]}
        pod_meta["annotations"] = {**pod_meta.get("annotations", {}), **meta["annotations"]}
        spec = template.setdefault("spec", {})
        containers = spec.setdefault("containers", [])
        worker = next((c for c in containers if c.get("name") == CONTAINER), None)
        if worker is None:
            worker = {"name": CONTAINER}
            containers.insert(0, worker)
        worker["image"] = s.image
        optional = {
            "imagePullPolicy": s.image_pull_policy,
            "command": s.command,
            "args": s.args,
            "resources": s.resources or None,
        }
        worker.update({k: v for k, v in optional.items() if v is not None})
        reserved = {e["name"] for e in self._environment(key)}
        worker["env"] = [
            e for e in worker.get("env", []) if e.get("name") not in reserved
        ] + self._environment(key)
        if s.node_selector:
            spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **s.node_selector}
        if s.tolerations:
            spec["tolerations"] = [*spec.get("tolerations", []), *s.tolerations]
        if s.service_account:
            spec["serviceAccountName"] = s.service_account
        return template

    def deployment(self, key: str) -> Manifest:
        """The Deployment of the group of `key`."""
        s = self._settings
        if s.keda.enabled:
            replicas = max(s.keda.min_replicas, 1)  # a group starts because a request waits
        elif s.hpa.enabled:
            replicas = max(s.hpa.min_replicas, 1)
        else:
            replicas = s.replicas
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self._metadata(key),
            "spec": {
                "replicas": replicas,
                "revisionHistoryLimit": 2,
                "selector": {"matchLabels": self._labels(key)},
                "template": self.pod_template(key),
            },
        }

    def scaled_object(self, key: str) -> Manifest:
        """The KEDA ScaledObject of the group of `key`."""
        keda = self._settings.keda
        trigger_metadata = {
            "protocol": keda.protocol,
            "mode": keda.mode,
            "value": _number(keda.value),
            "queueName": self._context.names.request_queue(key),
        }
        if keda.activation_value is not None:
            trigger_metadata["activationValue"] = _number(keda.activation_value)
        if keda.vhost is not None:
            trigger_metadata["vhostName"] = keda.vhost
        trigger: Manifest = {"type": "rabbitmq", "metadata": trigger_metadata}
        if keda.trigger_authentication:
            trigger["authenticationRef"] = {"name": keda.trigger_authentication}
        elif keda.host_from_env:
            trigger_metadata["hostFromEnv"] = keda.host_from_env
        return {
            "apiVersion": f"{KEDA_GROUP}/{KEDA_VERSION}",
            "kind": "ScaledObject",
            "metadata": self._metadata(key),
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": self.name(key),
                    "envSourceContainerName": CONTAINER,
                },
                "pollingInterval": keda.polling_interval,
                "cooldownPeriod": keda.cooldown_period,
                "minReplicaCount": keda.min_replicas,
                "maxReplicaCount": keda.max_replicas,
                "triggers": [trigger],
            },
        }

    def queue_hash(self, key: str) -> str:
        """The `queue_hash` label of the metric of the request queue of `key` (deploy/hpa/)."""
        return queue_hash(self.vhost, self._context.names.request_queue(key))

    def horizontal_pod_autoscaler(self, key: str, *, owner_uid: str) -> Manifest:
        """The HorizontalPodAutoscaler of the group of `key`, owned by its Deployment (whose
        uid is `owner_uid`), so deleting the Deployment deletes it too."""
        hpa = self._settings.hpa
        metadata = self._metadata(key)
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": self.name(key),
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
                    "name": self.name(key),
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

    # -- the Driver protocol --------------------------------------------------------------

    async def start(self, key: str) -> None:
        async with self._lock(key):
            with _map_errors(f"starting the worker group of {key!r}"):
                await asyncio.to_thread(self._converge, key)

    async def stop(self, key: str) -> None:
        async with self._lock(key):
            with _map_errors(f"stopping the worker group of {key!r}"):
                await asyncio.to_thread(self._remove, key)

    async def list(self) -> set[str]:
        with _map_errors("listing worker groups"):
            versions, orphans = await asyncio.to_thread(self._list)
        # A ScaledObject or HPA without its Deployment is a half-removed group: listed, and
        # outdated, so the group loop finishes removing it (stop) or restores it (start).
        self._outdated = {k for k, v in versions.items() if v != self.version} | orphans
        return set(versions) | orphans

    def outdated(self) -> set[str]:
        """Groups of an older version, or half-created or half-removed (`Upgrades`)."""
        return set(self._outdated)

    async def close(self) -> None:
        # Deployments outlive the controller on purpose (a restarted controller adopts them).
        if self._api is not None:
            api, self._api = self._api, None
            await asyncio.to_thread(api.close)

    # -- blocking work, run in threads ----------------------------------------------------

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _client(self) -> k8s.ApiClient:
        if self._api is None:
            from kubernetes import client
            from kubernetes import config as config_module

            config: Any = config_module
            s = self._settings
            configuration = client.Configuration()
            if s.host is not None:
                configuration.host = s.host
                configuration.verify_ssl = s.verify_ssl
                if s.token:
                    configuration.api_key = {"authorization": f"Bearer {s.token}"}
            elif s.auth == "incluster" or (s.auth == "auto" and _IN_CLUSTER_NAMESPACE.exists()):
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(
                    config_file=s.kubeconfig,
                    context=s.kube_context,
                    client_configuration=configuration,
                )
            configuration.retries = False  # the control loop retries, on its own schedule
            self._api = client.ApiClient(configuration)
        return self._api

    # The client's own annotations are partial (dict bodies work but are not declared), so
    # the two API objects are used untyped.
    def _apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self._client())

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._client())

    def _autoscaling(self) -> Any:
        from kubernetes import client

        return client.AutoscalingV2Api(self._client())

    def _list(self) -> tuple[dict[str, str], set[str]]:
        """Version of every group of this pool, and keys of ScaledObjects or HPAs without a
        group."""
        timeout = self._settings.request_timeout
        deployments = self._apps().list_namespaced_deployment(
            self.namespace, label_selector=self.selector, _request_timeout=timeout
        )
        versions: dict[str, str] = {}
        for d in deployments.items:
            key = self._key_of(d.metadata.annotations, d.metadata.labels)
            if key is not None:
                versions[key] = (d.metadata.labels or {}).get(LABEL_VERSION, "")
        orphans: set[str] = set()
        scaler_keys = self._scaler_keys()
        if scaler_keys is not None:
            orphans = scaler_keys - set(versions)
            for key in set(versions) - scaler_keys:
                versions[key] = ""  # a group without its ScaledObject or HPA: converge it
        return versions, orphans

    def _scaler_keys(self) -> set[str] | None:
        """Keys of this pool's ScaledObjects (KEDA mode) or HPAs (HPA mode); None in neither."""
        timeout = self._settings.request_timeout
        found: list[tuple[dict[str, str] | None, dict[str, str] | None]]
        if self._settings.keda.enabled:
            scaled = self._custom().list_namespaced_custom_object(
                KEDA_GROUP, KEDA_VERSION, self.namespace, KEDA_PLURAL,
                label_selector=self.selector, _request_timeout=timeout,
            )  # fmt: skip
            metas = [item.get("metadata", {}) for item in scaled.get("items", [])]
            found = [(m.get("annotations"), m.get("labels")) for m in metas]
        elif self._settings.hpa.enabled:
            hpas = self._autoscaling().list_namespaced_horizontal_pod_autoscaler(
                self.namespace, label_selector=self.selector, _request_timeout=timeout
            )
            found = [(h.metadata.annotations, h.metadata.labels) for h in hpas.items]
        else:
            return None
        keys = (self._key_of(annotations, labels) for annotations, labels in found)
        return {key for key in keys if key is not None}

    def _key_of(
        self, annotations: dict[str, str] | None, labels: dict[str, str] | None
    ) -> str | None:
        """The key of an object of ours, or None when it is not one (or was tampered with)."""
        annotations, labels = annotations or {}, labels or {}
        key = annotations.get(ANNOTATION_KEY)
        if key is None or annotations.get(ANNOTATION_POOL) != self._context.pool:
            return None
        if labels.get(LABEL_KEY_HASH) != names.key_hash(self._context.pool, key):
            return None
        return key

    def _converge(self, key: str) -> None:
        owner_uid = self._converge_deployment(key)
        if self._settings.keda.enabled:
            self._converge_scaled_object(key)
        if self._settings.hpa.enabled:
            self._converge_hpa(key, owner_uid)

    def _converge_deployment(self, key: str) -> str:
        """Create or upgrade the Deployment of `key`; its uid (the HPA's owner)."""
        from kubernetes.client.exceptions import ApiException

        apps, timeout = self._apps(), self._settings.request_timeout
        desired = self.deployment(key)
        try:
            current = apps.read_namespaced_deployment(
                self.name(key), self.namespace, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            created = None
            with _exists_is_fine():
                created = apps.create_namespaced_deployment(
                    self.namespace, desired, field_manager=MANAGER, _request_timeout=timeout
                )
            if created is None:  # 409: another controller was faster; its uid, then
                created = apps.read_namespaced_deployment(
                    self.name(key), self.namespace, _request_timeout=timeout
                )
            return str(created.metadata.uid)
        if (current.metadata.labels or {}).get(LABEL_VERSION) == self.version:
            return str(current.metadata.uid)
        desired["metadata"]["resourceVersion"] = current.metadata.resource_version
        scaler_owns_replicas = self._settings.keda.enabled or self._settings.hpa.enabled
        if scaler_owns_replicas and current.spec.replicas is not None:
            desired["spec"]["replicas"] = current.spec.replicas  # KEDA's or the HPA's to decide
        with _exists_is_fine():  # 409: changed meanwhile; the next pass sees the new one
            apps.replace_namespaced_deployment(
                self.name(key), self.namespace, desired, field_manager=MANAGER,
                _request_timeout=timeout,
            )  # fmt: skip
        return str(current.metadata.uid)  # a replacement keeps the object, and its uid

    def _converge_scaled_object(self, key: str) -> None:
        from kubernetes.client.exceptions import ApiException

        custom, timeout = self._custom(), self._settings.request_timeout
        where = (KEDA_GROUP, KEDA_VERSION, self.namespace, KEDA_PLURAL)
        desired = self.scaled_object(key)
        try:
            current = custom.get_namespaced_custom_object(
                *where, self.name(key), _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            with _exists_is_fine():
                custom.create_namespaced_custom_object(
                    *where, desired, field_manager=MANAGER, _request_timeout=timeout
                )
            return
        meta = current.get("metadata", {})
        if meta.get("labels", {}).get(LABEL_VERSION) == self.version:
            return
        desired["metadata"]["resourceVersion"] = meta.get("resourceVersion")
        with _exists_is_fine():
            custom.replace_namespaced_custom_object(
                *where, self.name(key), desired, field_manager=MANAGER, _request_timeout=timeout
            )

    def _converge_hpa(self, key: str, owner_uid: str) -> None:
        from kubernetes.client.exceptions import ApiException

        autoscaling, timeout = self._autoscaling(), self._settings.request_timeout
        desired = self.horizontal_pod_autoscaler(key, owner_uid=owner_uid)
        try:
            current = autoscaling.read_namespaced_horizontal_pod_autoscaler(
                self.name(key), self.namespace, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            with _exists_is_fine():
                autoscaling.create_namespaced_horizontal_pod_autoscaler(
                    self.namespace, desired, field_manager=MANAGER, _request_timeout=timeout
                )
            return
        owners = {o.uid for o in current.metadata.owner_references or []}
        version = (current.metadata.labels or {}).get(LABEL_VERSION)
        if version == self.version and owner_uid in owners:
            return
        # Another version, or owned by a Deployment since deleted and made anew.
        desired["metadata"]["resourceVersion"] = current.metadata.resource_version
        with _exists_is_fine():
            autoscaling.replace_namespaced_horizontal_pod_autoscaler(
                self.name(key), self.namespace, desired, field_manager=MANAGER,
                _request_timeout=timeout,
            )  # fmt: skip

    def _remove(self, key: str) -> None:
        if self._settings.keda.enabled:
            self._delete_scaled_object(key)
        if self._settings.hpa.enabled:
            # The owner reference would have the garbage collector do it after the
            # Deployment goes; deleting it first stops it scaling a Deployment being removed.
            with _absent_is_fine():
                self._autoscaling().delete_namespaced_horizontal_pod_autoscaler(
                    self.name(key), self.namespace,
                    _request_timeout=self._settings.request_timeout,
                )  # fmt: skip
        with _absent_is_fine():
            self._apps().delete_namespaced_deployment(
                self.name(key), self.namespace, propagation_policy="Background",
                _request_timeout=self._settings.request_timeout,
            )  # fmt: skip

    def _delete_scaled_object(self, key: str) -> None:
        with _absent_is_fine():
            self._custom().delete_namespaced_custom_object(
                KEDA_GROUP, KEDA_VERSION, self.namespace, KEDA_PLURAL, self.name(key),
                _request_timeout=self._settings.request_timeout,
            )  # fmt: skip


def _default_namespace() -> str:
    try:
        return _IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def queue_hash(vhost: str, queue: str) -> str:
    """The `queue_hash` label Prometheus gives the metrics of `queue` in `vhost` (deploy/hpa/).

    Its `hashmod` relabelling with `source_labels: [vhost, queue]`, the default separator `;`
    and `modulus: QUEUE_HASH_MODULUS`: the last 8 bytes of the MD5 of `vhost;queue`, read
    big-endian, modulo the modulus, in decimal. A label value whatever the queue's name
    (digits only), 64 bits of hash: MD5 is Prometheus' choice, a name hash, not a safeguard.
    """
    digest = hashlib.md5(f"{vhost};{queue}".encode(), usedforsecurity=False).digest()
    return str(int.from_bytes(digest[8:], "big") % QUEUE_HASH_MODULUS)


def _vhost_of(amqp_uri: str) -> str:
    """The virtual host of the first of the (comma-separated) AMQP URIs: '/' when none."""
    path = urllib.parse.urlsplit(amqp_uri.split(",", 1)[0].strip()).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"


def _quantity(value: float) -> str:
    """A Kubernetes quantity for `value`, kept to thousandths: 10 -> '10', 1.5 -> '1500m'."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _number(value: float) -> str:
    """KEDA trigger metadata values are strings: '10', not '10.0'."""
    return str(int(value)) if value == int(value) else str(value)


@contextlib.contextmanager
def _exists_is_fine() -> Iterator[None]:
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as exc:
        if exc.status != 409:
            raise


@contextlib.contextmanager
def _absent_is_fine() -> Iterator[None]:
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as exc:
        if exc.status != 404:
            raise


@contextlib.contextmanager
def _map_errors(action: str) -> Iterator[None]:
    """Turn the Kubernetes client's and urllib3's exceptions into `DriverError`s."""
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    try:
        yield
    except ApiException as exc:
        message = f"{action}: the API server answered {exc.status} {exc.reason}: {exc.body}"
        if not exc.status or exc.status == 429 or exc.status >= 500:
            raise base.DriverUnavailable(message) from exc
        raise base.DriverRejected(message) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise base.DriverUnavailable(f"{action}: the API server is unreachable: {exc}") from exc
    except ConfigException as exc:
        raise base.DriverRejected(f"{action}: no usable Kubernetes credentials: {exc}") from exc
    except pydantic.ValidationError as exc:
        # The client validates bodies against its models before sending them.
        raise base.DriverRejected(f"{action}: invalid manifest: {exc}") from exc
