"""The docker driver: `DockerDriver`, the Driver protocol (and `Standby`) over one engine.

How groups, versions and standby containers map to containers: see the package's docstring.
The Docker SDK is blocking and imported lazily; every SDK call runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from drivers import base, names
from drivers.docker import _describe, _settings
from drivers.docker._labels import (
    LABEL_INDEX,
    LABEL_KEY,
    LABEL_POOL,
    LABEL_STANDBY,
    LABEL_VERSION,
    LABEL_WORKER_ID,
)
from drivers.docker._labels import index as _index

if TYPE_CHECKING:
    import docker as docker_sdk

logger = logging.getLogger(__name__)


#: Containers as the engine's list API describes them (dicts with Id, Labels, State, ...).
_Containers = list[dict[str, Any]]
#: Standby containers waiting for a key: (id, name), oldest first.
_Waiting = list[tuple[str, str]]

_GONE_STATES = frozenset({"dead", "removing"})
_STOPPED_STATES = frozenset({"created", "exited"})


class DockerDriver:
    """Runs each worker group as `settings.workers` containers on one Docker engine."""

    def __init__(self, context: base.PoolContext, settings: _settings.DockerSettings) -> None:
        import docker  # noqa: F401  (fail early, and clearly, when the SDK is missing)

        self._context = context
        self._settings = settings
        self._client: docker_sdk.DockerClient | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._outdated: set[str] = set()
        #: Each group's containers as the last `list()` saw them (`describe`).
        self._described: dict[str, tuple[base.WorkerInfo, ...]] = {}
        #: Restarts and last exit of each container, by id, as last inspected.
        self._exits: dict[str, tuple[int, int | None]] = {}
        self.version = names.version_hash(
            {
                "pool": context.pool,
                "amqp_uri": context.amqp_uri,
                "container": settings.model_dump(
                    mode="json",
                    exclude={"base_url", "api_version", "timeout", "pull", "workers", "standby"},
                ),
            }
        )
        #: The keys the last `list()` found (a key not among them may take a standby).
        self._listed: set[str] = set()
        #: Standby containers waiting for a key, oldest first: (id, name).
        self._waiting: _Waiting = []
        #: Standby containers being given a key now (kept out of `_waiting` meanwhile).
        self._taking: set[str] = set()
        #: The key and index each assigned standby container serves, by container id.
        self._assigned: dict[str, tuple[str, int]] = {}
        self._standby_lock = asyncio.Lock()
        self._assign: base.Assign | None = None
        #: Containers of each group resized away from `workers` (the `Sizes` protocol).
        self._sizes: dict[str, int] = {}
        #: When each key was last stopped (monotonic): a listing begun before does not make
        #: it resizable again (a late resize would start its containers anew).
        self._stopped: dict[str, float] = {}

    # -- the Driver protocol --------------------------------------------------------------

    async def start(self, key: str) -> None:
        async with self._lock(key):
            taken = None if key in self._listed else await self._take_standby(key, 0)
            with _map_errors(f"starting the worker group of {key!r}"):
                await asyncio.to_thread(self._converge, key)
                if taken is not None:
                    await asyncio.to_thread(self._rename, taken, key, 0)
        if taken is not None:
            await self._replenish()

    async def stop(self, key: str) -> None:
        self._sizes.pop(key, None)
        self._listed.discard(key)  # no resize of it until a listing finds it again
        self._stopped[key] = time.monotonic()
        async with self._lock(key):
            with _map_errors(f"stopping the worker group of {key!r}"):
                await asyncio.to_thread(self._remove_group, key)

    async def list(self) -> set[str]:
        began = time.monotonic()
        try:
            await self._replenish()
        except base.DriverError as exc:  # never in the way of the groups themselves
            logger.warning("%s", exc)
        with _map_errors("listing worker containers"):
            groups = await asyncio.to_thread(self._groups)
            self._described = await asyncio.to_thread(self._workers_of, groups)
        self._stopped = {k: at for k, at in self._stopped.items() if at >= began}
        self._listed = set(groups) - set(self._stopped)
        self._sizes = {k: n for k, n in self._sizes.items() if k in groups}
        for key, found in groups.items():  # adopt a grown group at its size
            if key not in self._sizes and len(found) > self._settings.workers:
                if self._healthy(found, len(found)):
                    self._sizes[key] = len(found)
        # An older version, or a half-done replacement or scale change: the group loop
        # finishes it with start().
        self._outdated = {
            key for key, found in groups.items() if not self._healthy(found, self._size(key))
        }
        return set(groups)

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The containers of each group, as the last `list()` saw them (`Describes`)."""
        return dict(self._described)

    def outdated(self) -> set[str]:
        """Groups of an older version or a half-done change (`Upgrades`)."""
        return set(self._outdated)

    def capacity(self) -> int | None:
        """Most groups at once (`Capacity`): `max_containers`, less the standby containers
        and the containers groups run beyond their `workers`, over the containers of a
        group."""
        s = self._settings
        if s.max_containers is None:
            return None
        extras = sum(max(0, n - s.workers) for n in self._sizes.values())
        return max(0, s.max_containers - s.standby - extras) // s.workers

    # -- sizes (the `Sizes` protocol) -----------------------------------------------------

    def _size(self, key: str) -> int:
        return self._sizes.get(key, self._settings.workers)

    async def resize(self, key: str, workers: int) -> None:
        """Run `workers` containers for `key` (at least 1), growing only into the room
        `max_containers` leaves; no-op for a group the last `list()` did not find."""
        if key not in self._listed:
            return
        s = self._settings
        current, count = self._size(key), max(1, workers)
        if count > current and s.max_containers is not None:
            used = sum(self._size(k) for k in self._listed) + s.standby
            count = current + min(count - current, max(0, s.max_containers - used))
        if count == current:
            return
        self._sizes[key] = count
        taken: list[tuple[str, int]] = []
        async with self._lock(key):
            # The new indexes first from the standby containers that wait (told the key):
            # running already, not started now; the others are created.
            for index in range(current, count):
                cid = await self._take_standby(key, index)
                if cid is None:
                    break
                taken.append((cid, index))
            with _map_errors(f"resizing the worker group of {key!r} to {count}"):
                await asyncio.to_thread(self._converge, key)
                for cid, index in taken:
                    await asyncio.to_thread(self._rename, cid, key, index)
        if taken:
            logger.info("%d standby container(s) taken into the group of key %r", len(taken), key)
            await self._replenish()

    def sizes(self) -> dict[str, int]:
        return {key: self._size(key) for key in self._listed}

    async def close(self) -> None:
        # Keyed containers outlive the controller on purpose (a restarted controller adopts
        # them); standby ones exist only while a controller leads: they have nothing to drain.
        if self._settings.standby:
            waiting, self._waiting = self._waiting, []
            with contextlib.suppress(base.DriverError), _map_errors("removing standby containers"):
                for cid, _ in waiting:
                    await asyncio.to_thread(self._remove, {"Id": cid})
        if self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.close)

    # -- standby containers (the `Standby` protocol) --------------------------------------

    def standby_workers(self) -> tuple[base.WorkerInfo, ...]:
        return tuple(base.WorkerInfo(worker_id=name, name=name) for _, name in self._waiting)

    def attach(self, assign: base.Assign | None) -> None:
        self._assign = assign

    async def _take_standby(self, key: str, index: int) -> str | None:
        """Give `key` to the oldest standby container that takes it, as `index` of the key's
        group: its id, or None."""
        for entry in list(self._waiting):
            assign = self._assign
            if assign is None:
                return None
            if entry not in self._waiting:
                continue  # taken by another key meanwhile
            self._waiting.remove(entry)
            cid, name = entry
            self._taking.add(cid)
            try:
                taken = await assign(self._context.names.standby_queue(name), key)
            except Exception as exc:  # the outcome is unknown: never let it serve twice
                logger.warning(
                    "assigning key %r to standby container %s failed: %s", key, name, exc
                )
                with contextlib.suppress(base.DriverError), _map_errors("removing a standby"):
                    await asyncio.to_thread(self._remove, {"Id": cid})
                continue
            finally:
                self._taking.discard(cid)
            if taken:
                logger.info("standby container %s takes key %r", name, key)
                self._assigned[cid] = (key, index)
                return cid
            self._waiting.append(entry)  # not waiting yet: keep it for a later key
        return None

    async def _replenish(self) -> None:
        """Keep `standby` waiting containers: remove the exited, outdated or orphaned ones
        (assigned by a controller that is gone), create the missing ones."""
        if not self._settings.standby:
            return
        async with self._standby_lock:
            with _map_errors("keeping standby containers"):
                self._waiting = await asyncio.to_thread(self._converge_standby)

    def _standby_name(self, standby_id: str) -> str:
        return names.object_name(self._context.pool, standby_id, suffix=f"standby-{self.version}")

    def _converge_standby(self) -> _Waiting:
        found = self._engine().api.containers(
            all=True, filters={"label": [f"{LABEL_POOL}={self._context.pool}", LABEL_STANDBY]}
        )
        waiting: _Waiting = []
        for c in sorted(found, key=lambda c: c.get("Created", 0)):
            labels = c.get("Labels") or {}
            if labels.get(LABEL_POOL) != self._context.pool or LABEL_STANDBY not in labels:
                continue
            if c["Id"] in self._assigned or c["Id"] in self._taking or c.get("State") == "removing":
                continue
            name = (c.get("Names") or ["/"])[0].lstrip("/")
            current = labels.get(LABEL_VERSION) == self.version
            if (
                c.get("State") == "running"
                and current
                and name == self._standby_name(labels[LABEL_STANDBY])
            ):
                waiting.append((c["Id"], name))
            else:  # exited, never started, outdated, or given a key by a controller gone
                self._remove(c)
        for c in waiting[self._settings.standby :]:  # one handed back after a replacement
            self._remove({"Id": c[0]})
        del waiting[self._settings.standby :]
        for _ in range(self._settings.standby - len(waiting)):
            waiting.append(self._create_standby())
        return waiting

    def _rename(self, cid: str, key: str, index: int) -> None:
        """Name an assigned standby as `index` of its key's group (see the module)."""
        import docker.errors

        name = names.object_name(self._context.pool, key, suffix=f"{index}-{self.version}")
        try:
            self._engine().api.rename(cid, name)
        except docker.errors.APIError as exc:
            logger.warning("cannot rename standby container %s to %s: %s", cid[:12], name, exc)

    # -- blocking work, run in threads ----------------------------------------------------

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _engine(self) -> docker_sdk.DockerClient:
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

    def _containers(self, key: str | None = None) -> _Containers:
        """This pool's containers (any state), as the engine's list API returns them."""
        found: _Containers = self._engine().api.containers(
            all=True, filters={"label": [f"{LABEL_POOL}={self._context.pool}"]}
        )
        # Compare labels exactly here rather than trusting the engine's filter parsing.
        mine = [self._as_keyed(c) for c in found]
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
        assigned = self._assigned.get(container["Id"])
        if assigned is None:
            return container
        key, index = assigned
        labels = {**(container.get("Labels") or {}), LABEL_KEY: key, LABEL_INDEX: str(index)}
        state = container.get("State")
        if state not in ("running", "created", "restarting", "paused"):
            labels[LABEL_VERSION], state = "", "dead"
        return {**container, "Labels": labels, "State": state}

    def _groups(self) -> dict[str, _Containers]:
        groups: dict[str, _Containers] = {}
        for c in self._containers():
            groups.setdefault(c["Labels"][LABEL_KEY], []).append(c)
        return groups

    def _workers_of(self, groups: dict[str, _Containers]) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """Each group's containers as workers (`_describe`), with what was last inspected."""
        described, self._exits = _describe.workers_of(self._engine(), groups, self._exits)
        return described

    def _healthy(self, containers: _Containers, size: int) -> bool:
        indexes = sorted(
            _index(c) for c in containers if c["Labels"].get(LABEL_VERSION) == self.version
        )
        return len(indexes) == len(containers) and indexes == list(range(size))

    def _converge(self, key: str) -> None:
        """Make the group of `key` exactly its size (`workers`, or as resized) of running
        containers of this version."""
        containers = self._containers(key)
        wanted = range(self._size(key))
        by_index: dict[int, _Containers] = {}
        for c in containers:
            index = _index(c)
            if index in wanted:
                by_index.setdefault(index, []).append(c)
            else:
                self._remove(c)  # surplus first
        for index in wanted:
            current = by_index.get(index, [])
            keep = next(
                (
                    c
                    for c in current
                    if c["Labels"].get(LABEL_VERSION) == self.version
                    and c.get("State") not in _GONE_STATES
                ),
                None,
            )
            for c in current:
                if c is not keep:
                    self._remove(c)  # one by one: the old one goes, then its successor comes
            if keep is None:
                self._create(key, index)
            elif keep.get("State") in _STOPPED_STATES:
                self._engine().api.start(keep["Id"])

    def _remove_group(self, key: str) -> None:
        for c in self._containers(key):
            self._remove(c)

    def _remove(self, container: dict[str, Any]) -> None:
        """Stop and remove one container; done too when it is gone or another removal of it
        (another thread's, another controller's) is under way. An assigned standby stays
        recorded as its key's until it is gone: the standby loop must not take it for an
        orphan and remove it at the same time."""
        import docker.errors

        api = self._engine().api
        try:
            if container.get("State") not in _STOPPED_STATES | _GONE_STATES:
                api.stop(container["Id"], timeout=self._settings.stop_timeout)
            api.remove_container(container["Id"], force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if not _being_removed(exc):
                raise
        finally:
            self._assigned.pop(container["Id"], None)

    def _create(self, key: str, index: int) -> None:
        name = names.object_name(self._context.pool, key, suffix=f"{index}-{self.version}")
        labels = {LABEL_KEY: key, LABEL_INDEX: str(index)}
        self._run(name, labels, self._context.environment(key, name))

    def _create_standby(self) -> tuple[str, str]:
        standby_id = uuid.uuid4().hex[:12]
        name = self._standby_name(standby_id)
        environment = self._context.standby_environment(name)
        cid = self._run(name, {LABEL_STANDBY: standby_id}, environment, restart=False)
        return cid, name

    def _run(
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
        containers = self._engine().containers
        try:
            try:
                container = containers.create(s.image, **options)
            except docker.errors.ImageNotFound:
                if s.pull == "never":
                    raise
                logger.info("pulling %s", s.image)
                self._engine().images.pull(s.image)
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
def _map_errors(action: str) -> Iterator[None]:
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
