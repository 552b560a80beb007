"""One pool's containers on one Docker engine: the blocking SDK calls the driver makes, run in
threads, and the translation of the SDK's errors (`map_errors`).

Listing presents an assigned standby container as the container of its key's group it was
given (its labels cannot say so: the engine cannot relabel a container), from the record of
assignments kept here; removing one ends that record once it is gone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from drivers import base, names
from drivers.docker import _settings
from drivers.docker._labels import (
    LABEL_INDEX,
    LABEL_KEY,
    LABEL_POOL,
    LABEL_VERSION,
    LABEL_WORKER_ID,
)

if TYPE_CHECKING:
    import docker as docker_sdk

logger = logging.getLogger(__name__)

#: Containers as the engine's list API describes them (dicts with Id, Labels, State, ...).
Containers = list[dict[str, Any]]

GONE_STATES = frozenset({"dead", "removing"})
STOPPED_STATES = frozenset({"created", "exited"})


class PoolContainers:
    """The containers of one pool (`context.pool`) on the engine `settings` name."""

    def __init__(
        self, context: base.PoolContext, settings: _settings.DockerSettings, *, version: str
    ) -> None:
        self._context = context
        self._settings = settings
        self._client: docker_sdk.DockerClient | None = None
        #: The version label of the containers created now.
        self.version = version
        #: The key and index each assigned standby container serves, by container id.
        self.assigned: dict[str, tuple[str, int]] = {}

    def engine(self) -> docker_sdk.DockerClient:
        """The SDK's client, made on first use."""
        if self._client is None:
            import docker

            s = self._settings
            if s.base_url is None:
                self._client = docker.from_env(version=s.api_version, timeout=int(s.timeout))
            else:
                self._client = docker.DockerClient(
                    base_url=s.base_url, version=s.api_version, timeout=int(s.timeout)
                )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()

    def listed(self, labels: list[str]) -> Containers:
        """The pool's containers (any state) that also carry `labels` (engine filters)."""
        found: Containers = self.engine().api.containers(
            all=True, filters={"label": [f"{LABEL_POOL}={self._context.pool}", *labels]}
        )
        return found

    def keyed(self, key: str | None = None) -> Containers:
        """This pool's containers of `key` (of every key: None), any state."""
        # Compare labels exactly here rather than trusting the engine's filter parsing.
        mine = [self._as_keyed(c) for c in self.listed([])]
        return [
            c
            for c in mine
            if (c.get("Labels") or {}).get(LABEL_POOL) == self._context.pool
            and LABEL_KEY in (c.get("Labels") or {})
            and (key is None or c["Labels"][LABEL_KEY] == key)
        ]

    def _as_keyed(self, container: dict[str, Any]) -> dict[str, Any]:
        """An assigned standby container as the container of its key's group it was given
        (its labels cannot say so); one that has exited as outdated and gone, so that `start`
        replaces it with a keyed container. Any other container as it is."""
        assigned = self.assigned.get(container["Id"])
        if assigned is None:
            return container
        key, index = assigned
        labels = {**(container.get("Labels") or {}), LABEL_KEY: key, LABEL_INDEX: str(index)}
        state = container.get("State")
        if state not in ("running", "created", "restarting", "paused"):
            labels[LABEL_VERSION], state = "", "dead"
        return {**container, "Labels": labels, "State": state}

    def groups(self) -> dict[str, Containers]:
        """The pool's containers by key."""
        groups: dict[str, Containers] = {}
        for c in self.keyed():
            groups.setdefault(c["Labels"][LABEL_KEY], []).append(c)
        return groups

    def name(self, key: str, index: int) -> str:
        """The name of container `index` of the group of `key`, at this version."""
        return names.object_name(self._context.pool, key, suffix=f"{index}-{self.version}")

    def create(self, key: str, index: int) -> None:
        """Create and start container `index` of the group of `key`."""
        name = self.name(key, index)
        labels = {LABEL_KEY: key, LABEL_INDEX: str(index)}
        self.run(name, labels, self._context.environment(key, name))

    def start(self, container: dict[str, Any]) -> None:
        self.engine().api.start(container["Id"])

    def rename(self, cid: str, key: str, index: int) -> None:
        """Name an assigned standby as `index` of its key's group (see the package)."""
        import docker.errors

        name = self.name(key, index)
        try:
            self.engine().api.rename(cid, name)
        except docker.errors.APIError as exc:
            logger.warning("cannot rename standby container %s to %s: %s", cid[:12], name, exc)

    def remove(self, container: dict[str, Any]) -> None:
        """Stop and remove one container; done too when it is gone or another removal of it
        (another thread's, another controller's) is under way. An assigned standby stays
        recorded as its key's until it is gone: the standby loop must not take it for an
        orphan and remove it at the same time."""
        import docker.errors

        api = self.engine().api
        try:
            if container.get("State") not in STOPPED_STATES | GONE_STATES:
                api.stop(container["Id"], timeout=self._settings.stop_timeout)
            api.remove_container(container["Id"], force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if not _being_removed(exc):
                raise
        finally:
            self.assigned.pop(container["Id"], None)

    def run(
        self,
        name: str,
        own_labels: dict[str, str],
        protocol: dict[str, str],
        *,
        restart: bool = True,
    ) -> str:
        """Create and start one container; its id (the existing one's when another
        controller created it meanwhile)."""
        import docker.errors

        s = self._settings
        labels = {
            **s.labels,
            LABEL_POOL: self._context.pool,
            LABEL_WORKER_ID: name,
            LABEL_VERSION: self.version,
            **own_labels,
        }
        options: dict[str, Any] = {
            "name": name,
            "command": s.command,
            "entrypoint": s.entrypoint,
            "environment": {**s.environment, **protocol},
            "labels": labels,
            "network_mode": s.network_mode,
            "volumes": {
                v.source: {"bind": v.target, "mode": "ro" if v.read_only else "rw"}
                for v in s.volumes
            },
            "working_dir": s.working_dir,
            "user": s.user,
            # A standby restarted by the engine could not tell whether it had a key: the
            # driver replaces it instead.
            "restart_policy": {"Name": s.restart_policy if restart else "no"},
        }
        if restart and s.restart_policy == "on-failure":
            options["restart_policy"]["MaximumRetryCount"] = s.restart_max_retries
        if s.cpus is not None:
            options["nano_cpus"] = int(s.cpus * 1e9)
        if s.memory is not None:
            options["mem_limit"] = s.memory
        options = {k: v for k, v in options.items() if v is not None}
        containers = self.engine().containers
        try:
            try:
                container = containers.create(s.image, **options)
            except docker.errors.ImageNotFound:
                if s.pull == "never":
                    raise
                logger.info("pulling %s", s.image)
                self.engine().images.pull(s.image)
                container = containers.create(s.image, **options)
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # another controller created it meanwhile
                return name
            raise
        container.start()
        return str(container.id)


def _being_removed(exc: Any) -> bool:
    """Whether the engine refused because a removal of the container is already under way
    (409: "removal of container ... is already in progress"; also when stopping it)."""
    explanation = str(getattr(exc, "explanation", "") or "")
    return exc.status_code == 409 and "already in progress" in explanation


@contextlib.contextmanager
def map_errors(action: str) -> Iterator[None]:
    """Turn the Docker SDK's and requests' exceptions into `DriverError`s."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except docker.errors.APIError as exc:
        message = f"{action}: the Docker engine refused: {exc.explanation or exc}"
        if exc.status_code in (502, 503, 504):
            raise base.DriverUnavailable(message) from exc
        raise base.DriverRejected(message) from exc
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise base.DriverUnavailable(f"{action}: the Docker engine is unreachable: {exc}") from exc
    except docker.errors.DockerException as exc:
        # Raised by the client itself, e.g. when it cannot even fetch the engine's API version.
        raise base.DriverUnavailable(f"{action}: {exc}") from exc
