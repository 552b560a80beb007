"""The docker driver's standby containers (the `Standby` protocol; see the package): kept at
`standby` waiting ones, given a key through a `drivers.standby.StandbyPool`, and recorded as
the container of their key's group they became (`PoolContainers.assigned`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from drivers import base, names, standby
from drivers.docker import _containers, _settings
from drivers.docker._labels import LABEL_POOL, LABEL_STANDBY, LABEL_VERSION

#: A standby container: (id, name).
Container = tuple[str, str]


class StandbyContainers:
    """The standby containers of one pool, waiting for a key."""

    def __init__(
        self,
        context: base.PoolContext,
        settings: _settings.DockerSettings,
        containers: _containers.PoolContainers,
    ) -> None:
        self._context = context
        self._settings = settings
        self._containers = containers
        self.pool: standby.StandbyPool[Container] = standby.StandbyPool(
            queue=lambda c: context.names.standby_queue(c[1]),
            name=lambda c: f"container {c[1]}",
            discard=self._discard,
        )
        self._lock = asyncio.Lock()

    def workers(self) -> tuple[base.WorkerInfo, ...]:
        return tuple(base.WorkerInfo(worker_id=name, name=name) for _, name in self.pool.waiting)

    async def take(self, key: str, index: int) -> str | None:
        """Give `key` to the oldest standby container that takes it, as `index` of the key's
        group: its id, or None."""
        taken = await self.pool.take(key)
        if taken is None:
            return None
        cid, _ = taken
        self._containers.assigned[cid] = (key, index)
        return cid

    async def _discard(self, container: Container) -> None:
        with contextlib.suppress(base.DriverError), _containers.map_errors("removing a standby"):
            await asyncio.to_thread(self._containers.remove, {"Id": container[0]})

    async def replenish(self) -> None:
        """Keep `standby` waiting containers: remove the exited, outdated or orphaned ones
        (assigned by a controller that is gone), create the missing ones."""
        if not self._settings.standby:
            return
        async with self._lock:
            with _containers.map_errors("keeping standby containers"):
                found = await asyncio.to_thread(self._converge)
                # Given a key meanwhile: its record is the group's now.
                self.pool.replace(c for c in found if c[0] not in self._containers.assigned)

    async def close(self) -> None:
        """Remove the waiting containers: they exist only while a controller leads."""
        waiting = self.pool.clear()
        with (
            contextlib.suppress(base.DriverError),
            _containers.map_errors("removing standby containers"),
        ):
            for cid, _ in waiting:
                await asyncio.to_thread(self._containers.remove, {"Id": cid})

    def _name(self, standby_id: str) -> str:
        version = self._containers.version
        return names.object_name(self._context.pool, standby_id, suffix=f"standby-{version}")

    def _converge(self) -> list[Container]:
        """The standby containers that wait, oldest first, `standby` of them (blocking)."""
        waiting: list[Container] = []
        found = self._containers.listed([LABEL_STANDBY])
        for c in sorted(found, key=lambda c: c.get("Created", 0)):
            labels = c.get("Labels") or {}
            if labels.get(LABEL_POOL) != self._context.pool or LABEL_STANDBY not in labels:
                continue
            if c["Id"] in self._containers.assigned or any(
                cid == c["Id"] for cid, _ in self.pool.taking
            ):
                continue
            if c.get("State") == "removing":
                continue
            name = (c.get("Names") or ["/"])[0].lstrip("/")
            current = labels.get(LABEL_VERSION) == self._containers.version
            if (
                c.get("State") == "running"
                and current
                and name == self._name(labels[LABEL_STANDBY])
            ):
                waiting.append((c["Id"], name))
            else:  # exited, never started, outdated, or given a key by a controller gone
                self._containers.remove(c)
        for cid, _ in waiting[self._settings.standby :]:  # handed back after a replacement
            self._containers.remove({"Id": cid})
        del waiting[self._settings.standby :]
        for _ in range(self._settings.standby - len(waiting)):
            waiting.append(self._create())
        return waiting

    def _create(self) -> Container:
        standby_id = uuid.uuid4().hex[:12]
        name = self._name(standby_id)
        environment = self._context.standby_environment(name)
        cid = self._containers.run(name, {LABEL_STANDBY: standby_id}, environment, restart=False)
        return cid, name
