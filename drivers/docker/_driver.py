"""The docker driver: `DockerDriver`, the Driver protocol (and `Standby`, `Sizes`) over one
engine.

How groups, versions and standby containers map to containers: see the package's docstring.
The engine's containers are `_containers`, the standby ones `_standby`; sizes and capacity are
`drivers.sizing`'s. The Docker SDK is blocking and imported lazily; every SDK call runs in a
thread.
"""

from __future__ import annotations

import asyncio
import logging
import time

from drivers import base, key_locks, names, sizing
from drivers.docker import _containers, _describe, _settings, _standby
from drivers.docker._containers import GONE_STATES, STOPPED_STATES, map_errors
from drivers.docker._labels import LABEL_VERSION
from drivers.docker._labels import index as _index

logger = logging.getLogger(__name__)


class DockerDriver:
    """Runs each worker group as `settings.workers` containers on one Docker engine."""

    def __init__(self, context: base.PoolContext, settings: _settings.DockerSettings) -> None:
        import docker  # noqa: F401  (fail early, and clearly, when the SDK is missing)

        self._context = context
        self._settings = settings
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
        self._containers = _containers.PoolContainers(context, settings, version=self.version)
        self._standby = _standby.StandbyContainers(context, settings, self._containers)
        self._locks = key_locks.KeyLocks()
        #: The containers each group is asked to have, and the groups the last `list()`
        #: found (a key not among them may take a standby).
        self._sizing = sizing.GroupSizes(settings.workers)
        self._outdated: set[str] = set()
        #: Each group's containers as the last `list()` saw them (`describe`).
        self._described: dict[str, tuple[base.WorkerInfo, ...]] = {}
        #: Restarts and last exit of each container, by id, as last inspected.
        self._exits: _describe.Exits = {}

    # -- the Driver protocol --------------------------------------------------------------

    async def start(self, key: str) -> None:
        async with self._locks.hold(key):
            taken = None if self._sizing.listed(key) else await self._standby.take(key, 0)
            with map_errors(f"starting the worker group of {key!r}"):
                await asyncio.to_thread(self._converge, key)
                if taken is not None:
                    await asyncio.to_thread(self._containers.rename, taken, key, 0)
        if taken is not None:
            await self._standby.replenish()

    async def stop(self, key: str) -> None:
        # No resize of it until a listing begun later finds it again.
        self._sizing.stopped(key, at=time.monotonic())
        async with self._locks.hold(key):
            with map_errors(f"stopping the worker group of {key!r}"):
                await asyncio.to_thread(self._remove_group, key)

    async def list(self) -> set[str]:
        began = time.monotonic()
        try:
            await self._standby.replenish()
        except base.DriverError as exc:  # never in the way of the groups themselves
            logger.warning("%s", exc)
        with map_errors("listing worker containers"):
            groups = await asyncio.to_thread(self._containers.groups)
            self._described = await asyncio.to_thread(self._workers_of, groups)
        # A grown group is adopted at its size; an older version, or a half-done
        # replacement or scale change, is outdated: the group loop finishes it with start().
        found = {key: self._found(containers) for key, containers in groups.items()}
        self._outdated = self._sizing.listing(found, began=began)
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
        return self._sizing.capacity(s.max_containers, standby=s.standby)

    # -- sizes (the `Sizes` protocol) -----------------------------------------------------

    async def resize(self, key: str, workers: int) -> None:
        """Run `workers` containers for `key` (at least 1), growing only into the room
        `max_containers` leaves; no-op for a group the last `list()` did not find."""
        if not self._sizing.listed(key):
            return
        s = self._settings
        current = self._sizing.of(key)
        count = self._sizing.clamp(key, workers, s.max_containers, standby=s.standby)
        if count == current:
            return
        self._sizing.ask(key, count)
        taken: list[tuple[str, int]] = []
        async with self._locks.hold(key):
            # The new indexes first from the standby containers that wait (told the key):
            # running already, not started now; the others are created.
            for index in range(current, count):
                cid = await self._standby.take(key, index)
                if cid is None:
                    break
                taken.append((cid, index))
            with map_errors(f"resizing the worker group of {key!r} to {count}"):
                await asyncio.to_thread(self._converge, key)
                for cid, index in taken:
                    await asyncio.to_thread(self._containers.rename, cid, key, index)
        if taken:
            logger.info("%d standby container(s) taken into the group of key %r", len(taken), key)
            await self._standby.replenish()

    def sizes(self) -> dict[str, int]:
        return self._sizing.sizes()

    async def close(self) -> None:
        # Keyed containers outlive the controller on purpose (a restarted controller adopts
        # them); standby ones exist only while a controller leads: they have nothing to drain.
        if self._settings.standby:
            await self._standby.close()
        await asyncio.to_thread(self._containers.close)

    # -- standby containers (the `Standby` protocol; `_standby`) --------------------------

    def standby_workers(self) -> tuple[base.WorkerInfo, ...]:
        return self._standby.workers()

    def attach(self, assign: base.Assign | None) -> None:
        self._standby.pool.attach(assign)

    # -- blocking work, run in threads ----------------------------------------------------

    def _workers_of(
        self, groups: dict[str, _containers.Containers]
    ) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """Each group's containers as workers (`_describe`), with what was last inspected."""
        engine = self._containers.engine()
        described, self._exits = _describe.workers_of(engine, groups, self._exits)
        return described

    def _found(self, containers: _containers.Containers) -> sizing.Found:
        """A group's containers as sizing sees them: index, and whether of this version."""
        return [(_index(c), c["Labels"].get(LABEL_VERSION) == self.version) for c in containers]

    def _converge(self, key: str) -> None:
        """Make the group of `key` exactly its size (`workers`, or as resized) of running
        containers of this version."""
        containers = self._containers.keyed(key)
        wanted = range(self._sizing.of(key))
        by_index: dict[int, _containers.Containers] = {}
        for c in containers:
            index = _index(c)
            if index in wanted:
                by_index.setdefault(index, []).append(c)
            else:
                self._containers.remove(c)  # surplus first
        for index in wanted:
            current = by_index.get(index, [])
            keep = next(
                (
                    c
                    for c in current
                    if c["Labels"].get(LABEL_VERSION) == self.version
                    and c.get("State") not in GONE_STATES
                ),
                None,
            )
            for c in current:
                if c is not keep:
                    self._containers.remove(c)  # one by one: the old one goes, then its successor
            if keep is None:
                self._containers.create(key, index)
            elif keep.get("State") in STOPPED_STATES:
                self._containers.start(keep)

    def _remove_group(self, key: str) -> None:
        for c in self._containers.keyed(key):
            self._containers.remove(c)
