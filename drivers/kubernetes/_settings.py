"""The settings of the kubernetes driver (`[driver.kubernetes]`), of its three modes alike.

One model for the three kinds (`kubernetes`, `keda`, `hpa`): the modes are its `keda` and `hpa`
sections. It imports without the Kubernetes client, so the configuration page and validation
work where the SDK is not installed.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic
from pydantic import Field

#: The hard limit of an HPA's replicas here (a group is one key's workers, not a fleet).
MAX_HPA_REPLICAS = 1000
_METRIC_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,199}$")


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
    scale_down_stabilization: int | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="Seconds a lower replica count must hold before the HPA KEDA makes "
        "shrinks a group to it (advanced.horizontalPodAutoscalerConfig.behavior.scaleDown."
        "stabilizationWindowSeconds); None: the HPA's default, 300.",
    )


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
