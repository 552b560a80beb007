"""The pods of each group, for `describe()` (the `Describes` protocol): the worker
container's restart count and the exit code of its last termination, so a pod in a crash
loop makes its group failing (docs/protocol.md, "Failing groups").

One pod list of the pool per `list()` pass, by label. It needs `get` and `list` on pods
(deploy/*/rbac.yaml); without them the groups are not described (the reason logged once),
and everything else works.
"""

from __future__ import annotations

import logging
from typing import Any

from drivers import base
from drivers.kubernetes import _core

logger = logging.getLogger("drivers.kubernetes")


class Pods:
    def __init__(self, cluster: _core.Cluster) -> None:
        self._cluster = cluster
        #: Why pods could not be listed last time (logged once per new reason).
        self._error: str | None = None

    def quietly(self, keys: set[str]) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """`of(keys)`, or nothing when they cannot be listed (say, no RBAC for pods):
        describing is never in the way of the groups themselves."""
        try:
            described = self.of(keys)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
            if reason != self._error:
                logger.warning("cannot list the pods of worker groups: %s", reason)
            self._error = reason
            return {}
        self._error = None
        return described

    def of(self, keys: set[str]) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The pods of the groups of `keys` (blocking: called in a thread)."""
        cluster = self._cluster
        pods = self._core().list_namespaced_pod(
            cluster.namespace,
            label_selector=cluster.selector,
            _request_timeout=cluster.settings.request_timeout,
        )
        found: dict[str, list[base.WorkerInfo]] = {}
        for pod in pods.items:
            key = cluster.key_of(pod.metadata.annotations, pod.metadata.labels)
            if key is None or key not in keys:
                continue
            statuses = (pod.status.container_statuses if pod.status else None) or []
            worker = next((c for c in statuses if c.name == _core.CONTAINER), None)
            last = worker.last_state.terminated if worker and worker.last_state else None
            found.setdefault(key, []).append(
                base.WorkerInfo(
                    worker_id=pod.metadata.name,
                    name=pod.metadata.name,
                    restarts=(worker.restart_count or 0) if worker else 0,
                    last_exit=last.exit_code if last is not None else None,
                )
            )
        return {key: tuple(pods) for key, pods in found.items()}

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._cluster.client())
