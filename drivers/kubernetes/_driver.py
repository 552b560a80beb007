"""The kubernetes driver: a group's Deployment (`_deployment`), and its scaler's object in
KEDA mode (`_keda`) or HPA mode (`_hpa`).

The API server is the only state, so a restarted controller adopts what it lists. The official
client is blocking and imported lazily; every call runs in a thread, one at a time per key.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from drivers import base, key_locks, sizing
from drivers.kubernetes import _core, _deployment, _hpa, _keda, _pods, _settings

if TYPE_CHECKING:
    from kubernetes import client as k8s


class KubernetesDriver:
    """Runs each worker group as a Deployment (and, in KEDA or HPA mode, its scaler)."""

    def __init__(self, context: base.PoolContext, settings: _settings.KubernetesSettings) -> None:
        import kubernetes  # noqa: F401  (fail early, and clearly, when the SDK is missing)

        self._context = context
        self._settings = settings
        self._cluster = _core.Cluster(context, settings)
        self._keda = _keda.Keda(self._cluster)
        self._hpa = _hpa.Hpa(self._cluster)
        # The settings enable one scaler at most (KubernetesSettings checks it).
        self._scaler: _core.Scaler | None = (
            self._keda if settings.keda.enabled else self._hpa if settings.hpa.enabled else None
        )
        self._replicas = self._scaler.replicas if self._scaler is not None else settings.replicas
        #: `spec.replicas` of each group as the last `list()` read it, or as `resize` set it
        #: (the `Sizes` protocol; empty in KEDA and HPA modes, whose scaler owns replicas).
        self._sizes: dict[str, int] = {}
        self._locks = key_locks.KeyLocks()
        self._outdated: set[str] = set()
        self._pods = _pods.Pods(self._cluster)
        #: Each group's pods as the last `list()` saw them (`describe`).
        self._described: dict[str, tuple[base.WorkerInfo, ...]] = {}
        self.namespace = self._cluster.namespace
        self.version = self._cluster.version
        self.selector = self._cluster.selector
        self.vhost = self._hpa.vhost

    # -- manifests (pure) -----------------------------------------------------------------

    def name(self, key: str) -> str:
        return self._cluster.name(key)

    def pod_template(self, key: str) -> _core.Manifest:
        return _deployment.pod_template(self._cluster, key)

    def deployment(self, key: str) -> _core.Manifest:
        """The Deployment of the group of `key` (an upgrade keeps the group's size)."""
        return _deployment.deployment(self._cluster, key, replicas=self._size(key))

    def scaled_object(self, key: str) -> _core.Manifest:
        """The KEDA ScaledObject of the group of `key`."""
        return self._keda.scaled_object(key)

    def queue_hash(self, key: str) -> str:
        """The `queue_hash` label of the metric of the request queue of `key` (deploy/hpa/)."""
        return self._hpa.queue_hash(key)

    def horizontal_pod_autoscaler(self, key: str, *, owner_uid: str) -> _core.Manifest:
        """The HorizontalPodAutoscaler of the group of `key`, owned by its Deployment."""
        return self._hpa.horizontal_pod_autoscaler(key, owner_uid=owner_uid)

    # -- the Driver protocol --------------------------------------------------------------

    async def start(self, key: str) -> None:
        async with self._locks.hold(key):
            with _core.map_errors(f"starting the worker group of {key!r}"):
                await asyncio.to_thread(self._converge, key)

    async def stop(self, key: str) -> None:
        async with self._locks.hold(key):
            with _core.map_errors(f"stopping the worker group of {key!r}"):
                await asyncio.to_thread(self._remove, key)
        self._sizes.pop(key, None)

    # -- sizes (the `Sizes` protocol; Deployment mode only) -------------------------------

    async def resize(self, key: str, workers: int) -> None:
        """Set `spec.replicas` of the group of `key` (at least 1): the cluster starts the
        pods, and stops surplus ones with SIGTERM (they drain within their grace period).
        No-op in KEDA and HPA modes, and for a group the last `list()` did not find."""
        if self._scaler is not None or key not in self._sizes:
            return
        count = sizing.clamp(current=self._sizes[key], wanted=workers)
        if self._sizes[key] == count:
            return
        async with self._locks.hold(key):
            with _core.map_errors(f"resizing the worker group of {key!r} to {count}"):
                await asyncio.to_thread(_deployment.scale, self._cluster, key, count)
        self._sizes[key] = count

    def sizes(self) -> dict[str, int]:
        return {} if self._scaler is not None else dict(self._sizes)

    async def list(self) -> set[str]:
        with _core.map_errors("listing worker groups"):
            versions, orphans = await asyncio.to_thread(self._list)
        # A ScaledObject or HPA without its Deployment is a half-removed group: listed, and
        # outdated, so the group loop finishes removing it (stop) or restores it (start).
        self._outdated = {k for k, v in versions.items() if v != self.version} | orphans
        self._described = await asyncio.to_thread(self._pods.quietly, set(versions))
        return set(versions) | orphans

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The pods of each group, as the last `list()` saw them (`Describes`, `_pods`)."""
        return dict(self._described)

    def outdated(self) -> set[str]:
        """Groups of an older version, or half-created or half-removed (`Upgrades`)."""
        return set(self._outdated)

    async def close(self) -> None:
        # Deployments outlive the controller on purpose (a restarted controller adopts them).
        await self._cluster.close()

    # -- blocking work, run in threads ----------------------------------------------------

    def _client(self) -> k8s.ApiClient:
        return self._cluster.client()

    def _list(self) -> tuple[dict[str, str], set[str]]:
        """Version of every group of this pool, and keys of ScaledObjects or HPAs without a
        group."""
        versions, sizes = _deployment.versions(self._cluster)
        self._sizes = sizes  # the cluster is the record of each group's size
        orphans: set[str] = set()
        if self._scaler is not None:
            scaler_keys = self._scaler.keys()
            orphans = scaler_keys - set(versions)
            for key in set(versions) - scaler_keys:
                versions[key] = ""  # a group without its ScaledObject or HPA: converge it
        return versions, orphans

    def _size(self, key: str) -> int:
        return self._replicas if self._scaler is not None else self._sizes.get(key, self._replicas)

    def _converge(self, key: str) -> None:
        owner_uid = _core.on_conflict_again(
            lambda: _deployment.converge(
                self._cluster, key, replicas=self._size(key), scaled=self._scaler is not None
            )
        )
        if self._scaler is not None:
            scaler = self._scaler
            _core.on_conflict_again(lambda: scaler.converge(key, owner_uid=owner_uid))

    def _remove(self, key: str) -> None:
        if self._scaler is not None:
            self._scaler.remove(key)  # first: it would scale a Deployment being removed
        _deployment.remove(self._cluster, key)
