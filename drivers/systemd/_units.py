"""The pool's units as systemd reports them: listed (`ListUnitsByPatterns`) with their service
properties, one unit's state (`GetUnit`), the replicas of a key systemd has loaded, and
waiting until a unit has stopped. Reads only: starting and stopping units is the driver's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from drivers import base
from drivers.systemd import _bus, _unit_names

#: Active states of a unit that count as a running (or starting, or failed) group.
PRESENT = frozenset({"active", "activating", "reloading", "deactivating", "failed"})
RUNNING = frozenset({"active", "activating", "reloading"})
#: Properties read at once, at most, in one listing.
_READS_AT_ONCE = 16


@dataclasses.dataclass
class Unit:
    """What one listing saw of a unit of the pool."""

    name: str
    path: str
    active_state: str
    sub_state: str
    key: str | None = None
    replica: int = 0
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)


class Units:
    """The units of one pool (`unit_names`), read through `bus`."""

    def __init__(self, bus: _bus.Bus, unit_names: _unit_names.UnitNames) -> None:
        self._bus = bus
        self._names = unit_names

    async def listed(self) -> tuple[set[str], list[Unit]]:
        """The names of the pool's loaded units (any state), and those present (running,
        starting, stopping or failed) with the key and replica each stands for (no
        properties yet: `read`)."""
        # systemd matches with FNM_NOESCAPE: the backslashes of the name are literal.
        patterns = [self._names.pool_pattern()]
        reply = await self._bus.manager("ListUnitsByPatterns", "asas", [[], patterns])
        rows: _bus.Body = reply[0] if reply else []
        units = [
            Unit(name=row[0], path=row[6], active_state=active_state(row), sub_state=row[4])
            for row in rows
        ]
        loaded = {u.name for u in units}
        units = [u for u in units if u.active_state in PRESENT]
        for unit in units:
            unit.key, unit.replica = self._names.key_of(unit.name) or (None, 0)
        return loaded, units

    async def read(self, units: list[Unit]) -> None:
        """Read the service properties of the keyed units of a listing (and, for a failed
        one, since when it is failed)."""
        limit = asyncio.Semaphore(_READS_AT_ONCE)

        async def read(unit: Unit) -> None:
            async with limit:
                unit.properties = await self._bus.properties(unit.path)
                if unit.active_state == "failed":  # since when: a Unit property
                    general = await self._bus.properties(unit.path, _bus.UNIT)
                    unit.properties["InactiveEnterTimestamp"] = general.get(
                        "InactiveEnterTimestamp"
                    )

        await asyncio.gather(*(read(u) for u in units if u.key is not None))

    async def loaded_replicas(self, key: str) -> dict[int, str]:
        """The active state of each unit of `key` systemd has loaded, by replica."""
        patterns = self._names.key_patterns(key)
        reply = await self._bus.manager("ListUnitsByPatterns", "asas", [[], patterns])
        found: dict[int, str] = {}
        for row in reply[0] if reply else []:
            replica = self._names.replica_of(key, row[0])
            if replica is not None:
                found[replica] = row[3]
        return found

    async def state(self, unit: str) -> dict[str, Any] | None:
        """The unit's properties, or None when systemd has not loaded it."""
        reply = await self._bus.manager("GetUnit", "s", [unit], missing_ok=True)
        if reply is None:
            return None
        path: str = reply[0]
        state = await self._bus.properties(path, _bus.UNIT)
        return {**state, **await self._bus.properties(path)} if state else None

    async def wait_stopped(self, unit: str, within: float) -> None:
        """Wait until `unit` is inactive, failed or gone; DriverUnavailable after `within`
        seconds."""
        deadline = time.monotonic() + within
        while True:
            state = await self.state(unit)
            if state is None or state.get("ActiveState") in ("inactive", "failed"):
                return
            if time.monotonic() >= deadline:
                raise base.DriverUnavailable(
                    f"{unit} did not stop within {within:g}s "
                    f"(state {state.get('ActiveState')}/{state.get('SubState')})"
                )
            await asyncio.sleep(0.1)


def active_state(row: _bus.Body) -> str:
    """A listed unit's active state, `activating` for an inactive one whose start job waits
    (StartUnit returns once the job is queued: the unit is being started)."""
    state: str = row[3]
    return "activating" if state == "inactive" and row[8] == "start" else state
