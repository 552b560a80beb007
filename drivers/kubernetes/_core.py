"""What the three modes share: one pool's objects in one namespace, and the API client.

`Cluster` names a group's objects and labels them (`app.kubernetes.io/managed-by: osrdyne`,
`osrdyne.io/pool`, `osrdyne.io/key-hash`: the selector, `osrdyne.io/version`), annotates them
with the exact key (`osrdyne.io/key`), tells the key of an object it lists, and holds the
(blocking, lazily imported) official client. The context managers at the end translate the
client's errors at the edge: `map_errors` into `DriverError`s, the others let a conflict or an
absence pass where either is what was wanted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pydantic

from drivers import base, names
from drivers.kubernetes import _settings

if TYPE_CHECKING:
    from kubernetes import client as k8s

T = TypeVar("T")

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_POOL = "osrdyne.io/pool"
LABEL_KEY_HASH = "osrdyne.io/key-hash"
LABEL_VERSION = "osrdyne.io/version"
ANNOTATION_KEY = "osrdyne.io/key"
ANNOTATION_POOL = "osrdyne.io/pool"
MANAGER = "osrdyne"
CONTAINER = "worker"
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

Manifest = dict[str, Any]


class Cluster:
    """One pool's groups in one namespace: names, labels, version, and the API client."""

    def __init__(self, context: base.PoolContext, settings: _settings.KubernetesSettings) -> None:
        self.context = context
        self.settings = settings
        self._api: k8s.ApiClient | None = None
        self.namespace = settings.namespace or default_namespace()
        exclude: dict[str, Any] = dict.fromkeys(
            ("auth", "host", "token", "verify_ssl", "kubeconfig", "kube_context",
             "request_timeout", "namespace"),
            True,
        )  # fmt: skip
        # Settings added since groups first ran are no part of a group's version while they
        # keep their default: versions (and running groups) stay what they were before.
        if not settings.hpa.enabled:
            exclude["hpa"] = True
        if settings.keda.scale_down_stabilization is None:
            exclude["keda"] = {"scale_down_stabilization": True}
        self.version = names.version_hash(
            {
                "pool": context.pool,
                "amqp_uri": context.amqp_uri,
                "group": settings.model_dump(mode="json", exclude=exclude),
            }
        )
        self.selector = (
            f"{LABEL_MANAGED_BY}={MANAGER},{LABEL_POOL}={names.label_value(context.pool)}"
        )

    def name(self, key: str) -> str:
        return names.object_name(self.context.pool, key)

    def labels(self, key: str) -> dict[str, str]:
        return {
            LABEL_MANAGED_BY: MANAGER,
            LABEL_POOL: names.label_value(self.context.pool),
            LABEL_KEY_HASH: names.key_hash(self.context.pool, key),
        }

    def metadata(self, key: str) -> Manifest:
        s = self.settings
        return {
            "name": self.name(key),
            "namespace": self.namespace,
            "labels": {**s.labels, **self.labels(key), LABEL_NAME: "osrdyne-worker",
                       LABEL_VERSION: self.version},
            "annotations": {**s.annotations, ANNOTATION_KEY: key,
                            ANNOTATION_POOL: self.context.pool},
        }  # fmt: skip

    def key_of(
        self, annotations: dict[str, str] | None, labels: dict[str, str] | None
    ) -> str | None:
        """The key of an object of ours, or None when it is not one (or was tampered with)."""
        annotations, labels = annotations or {}, labels or {}
        key = annotations.get(ANNOTATION_KEY)
        if key is None or annotations.get(ANNOTATION_POOL) != self.context.pool:
            return None
        if labels.get(LABEL_KEY_HASH) != names.key_hash(self.context.pool, key):
            return None
        return key

    # -- the API client (blocking: called in threads) -------------------------------------

    def client(self) -> k8s.ApiClient:
        if self._api is None:
            from kubernetes import client
            from kubernetes import config as config_module

            config: Any = config_module
            s = self.settings
            configuration = client.Configuration()
            if s.host is not None:
                configuration.host = s.host
                configuration.verify_ssl = s.verify_ssl
                if s.token:
                    configuration.api_key = {"authorization": f"Bearer {s.token}"}
            elif s.auth == "incluster" or (s.auth == "auto" and IN_CLUSTER_NAMESPACE.exists()):
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
    # the API objects are used untyped.
    def apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self.client())

    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.client())

    def autoscaling(self) -> Any:
        from kubernetes import client

        return client.AutoscalingV2Api(self.client())

    async def close(self) -> None:
        if self._api is not None:
            api, self._api = self._api, None
            await asyncio.to_thread(api.close)


def default_namespace() -> str:
    try:
        return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


@contextlib.contextmanager
def exists_is_fine() -> Iterator[None]:
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as exc:
        if exc.status != 409:
            raise


#: Tries of a read-then-replace whose replace another client's write refused (409), as
#: client-go's `retry.RetryOnConflict` (its DefaultRetry: 5).
CONFLICT_TRIES = 5


def on_conflict_again(converge: Callable[[], T]) -> T:
    """`converge()` (reads an object, then replaces it with the resourceVersion it read)
    again while its replace is refused because the object changed meanwhile (409: KEDA, the
    HPA or the Deployment controller writing its status), up to `CONFLICT_TRIES` tries; the
    last refusal is raised (`map_errors`: unavailable, the next pass tries again)."""
    import tenacity
    from kubernetes.client.exceptions import ApiException

    again = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(CONFLICT_TRIES),
        wait=tenacity.wait_random(0, 0.05),
        retry=tenacity.retry_if_exception(
            lambda exc: isinstance(exc, ApiException) and exc.status == 409
        ),
        reraise=True,
    )
    return again(converge)


@contextlib.contextmanager
def absent_is_fine() -> Iterator[None]:
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as exc:
        if exc.status != 404:
            raise


@contextlib.contextmanager
def map_errors(action: str) -> Iterator[None]:
    """Turn the Kubernetes client's and urllib3's exceptions into `DriverError`s."""
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    try:
        yield
    except ApiException as exc:
        message = f"{action}: the API server answered {exc.status} {exc.reason}: {exc.body}"
        if exc.status == 409:  # changed by others at each of our tries: a later pass
            message += f" ({CONFLICT_TRIES} tries, the object changed before each)"
        if not exc.status or exc.status in (409, 429) or exc.status >= 500:
            raise base.DriverUnavailable(message) from exc
        raise base.DriverRejected(message) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise base.DriverUnavailable(f"{action}: the API server is unreachable: {exc}") from exc
    except ConfigException as exc:
        raise base.DriverRejected(f"{action}: no usable Kubernetes credentials: {exc}") from exc
    except pydantic.ValidationError as exc:
        # The client validates bodies against its models before sending them.
        raise base.DriverRejected(f"{action}: invalid manifest: {exc}") from exc


class Scaler(Protocol):
    """A mode that scales each group's Deployment inside the group (KEDA, HPA): one object
    of its own per group, made after the Deployment and removed before it."""

    #: The Deployment's initial replicas (a group starts because a request waits: >= 1).
    replicas: int

    def keys(self) -> set[str]:
        """Keys of the pool's objects of this scaler (blocking)."""
        ...

    def converge(self, key: str, *, owner_uid: str) -> None:
        """Create or upgrade the object of `key`, whose Deployment's uid is `owner_uid`."""
        ...

    def remove(self, key: str) -> None:
        """Delete the object of `key`, if any (blocking)."""
        ...
