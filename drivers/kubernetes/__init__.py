"""Worker groups as Kubernetes Deployments, optionally scaled by KEDA or an HPA.

One room per mode over a shared core:

    _settings     `[driver.kubernetes]`: one model for the three kinds (imports without the SDK)
    _core         a pool's objects in a namespace: names, labels, version, API client, errors
    _deployment   Deployment mode, which the others build on: one Deployment per group
    _keda         KEDA mode (`keda.enabled`): a ScaledObject per group scales its Deployment
    _hpa          HPA mode (`hpa.enabled`): a HorizontalPodAutoscaler per group, on the queue
                  depth a metrics adapter serves (deploy/hpa/; `queue_hash` names the queue)
    _pods         the pods of each group (`describe`): restarts and last exits, for failing
                  groups
    _driver       `KubernetesDriver`: the Driver protocol over the Deployment and its scaler

One Deployment per worker key, named by `drivers.names.object_name`, labelled
`app.kubernetes.io/managed-by: osrdyne`, `osrdyne.io/pool` and `osrdyne.io/key-hash` (its
selector) and `osrdyne.io/version`, and annotated with the exact key (`osrdyne.io/key`).

Upgrades: a group whose version label differs from the current configuration is replaced
(PUT of the new Deployment, which rolls its pods), on `start` and whenever `list` sees it.
"""

from drivers.kubernetes._driver import KubernetesDriver
from drivers.kubernetes._hpa import QUEUE_HASH_LABEL, QUEUE_HASH_MODULUS, queue_hash
from drivers.kubernetes._settings import (
    MAX_HPA_REPLICAS,
    HpaSettings,
    KedaSettings,
    KubernetesSettings,
    SecretKey,
)

__all__ = [
    "MAX_HPA_REPLICAS",
    "QUEUE_HASH_LABEL",
    "QUEUE_HASH_MODULUS",
    "HpaSettings",
    "KedaSettings",
    "KubernetesDriver",
    "KubernetesSettings",
    "SecretKey",
    "queue_hash",
]
