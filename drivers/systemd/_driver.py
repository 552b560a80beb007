"""The systemd driver: each worker group instances of a template unit, through D-Bus.

The group of `key` in `pool` is the unit `osrdyne-worker@<instance>.service` (the template is
a setting; `deploy/systemd/osrdyne-worker@.service` is ours; instance names: `_names`, and
`_unit_names` for one pool's), and one more unit per worker beyond the first.
systemd is the only state: the driver lists the pool's units (`ListUnitsByPatterns`), starts,
restarts and stops them (`StartUnit`, `RestartUnit`, `StopUnit`, `ResetFailedUnit`) and reads
their restarts, exit statuses and states from the units' own properties, so a restarted
controller adopts the units it finds. systemd restarts a worker that dies (`Restart=on-failure`
in the template).

The version of a running unit is the one its environment file (`_environment`) names, unless
the file was written after the unit's main process started (a change the controller wrote but
did not apply: outdated). A unit that systemd gave up on (`failed`: its start limit hit in a
crash loop, or a start that failed) is started again once it has been failed for
`failed_restart_delay` seconds.

What systemd reports of the units is read by `_units`; each group's workers, with the last
exits systemd's signals tell (it forgets them when it restarts a worker), are kept by
`_workers`.

A group is `workers` units, replicas 0 to `workers - 1` of its key (`_names.replica_instance`),
each with its environment file and its own worker id; the controller's group scaler changes
that number while the group runs (`Sizes`): new replicas start at once, the highest ones stop
first (`StopUnit`: SIGTERM, so the worker finishes what it holds; the template's
`TimeoutStopSec=` kills it after). A group grows only into the units `max_units` leaves. A
restarted controller adopts a grown group at its size when its replicas are whole and current;
otherwise the group goes back to `workers` and the scaler grows it again if it needs to (the
sizes' bookkeeping is `drivers.sizing.GroupSizes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from drivers import base, key_locks, names, sizing
from drivers.systemd import (
    _bus,
    _environment,
    _names,
    _settings,
    _unit_names,
    _units,
    _workers,
)
from drivers.systemd._units import RUNNING
from osrdyne import wire

logger = logging.getLogger(__name__)


class SystemdDriver:
    """Runs each worker group as instances of a systemd template unit, one per worker."""

    def __init__(self, context: base.PoolContext, settings: _settings.SystemdSettings) -> None:
        import dbus_fast  # noqa: F401  (fail early, and clearly, when the library is missing)

        self._context = context
        self._settings = settings
        try:
            self._unit_names = _unit_names.UnitNames(
                context.pool, settings.template, Path(settings.environment_directory)
            )
        except ValueError as exc:
            raise base.DriverConfigurationError(str(exc)) from exc
        self._workers = _workers.Workers(self._unit_names)
        self._bus = _bus.Bus(settings, self._workers.on_message)
        self._units = _units.Units(self._bus, self._unit_names)
        self._locks = key_locks.KeyLocks()
        self._outdated: set[str] = set()
        #: The units each group is asked to have (resized away from `workers`, or adopted),
        #: and the groups the last `list()` found.
        self._sizing = sizing.GroupSizes(settings.workers)
        self.version = names.version_hash(
            {
                "pool": context.pool,
                "amqp_uri": context.amqp_uri,
                "template": settings.template,
                "environment": settings.environment,
            }
        )

    # -- names (`_unit_names`) -------------------------------------------------------------

    def unit_name(self, key: str, replica: int = 0) -> str:
        """The unit of replica `replica` of the group of `key`."""
        return self._unit_names.unit(key, replica)

    def environment_file(self, key: str, replica: int = 0) -> Path:
        """The environment file of a unit of `key` (what the template's `%i` opens)."""
        return self._unit_names.environment_file(key, replica)

    def worker_id(self, key: str, replica: int = 0) -> str:
        """The worker id of a unit of `key` (`WORKER_ID`, and in `describe`)."""
        return self._unit_names.worker_id(key, replica)

    def _check_key(self, key: str) -> None:
        problem = wire.key_problem(self._context.names, key) or _environment.value_problem(key)
        if problem is not None:
            raise base.DriverRejected(f"worker key {key!r} cannot have a systemd unit: {problem}")

    # -- the Driver protocol ------------------------------------------------------------

    async def start(self, key: str) -> None:
        """Converge the group of `key` to its size: surplus replicas stopped (the highest
        first), every other one running this version."""
        self._check_key(key)
        async with self._locks.hold(key):
            with _bus.map_errors(f"starting {self.unit_name(key)}"):
                await self._converge(key, self._sizing.of(key))
            self._outdated.discard(key)

    async def stop(self, key: str) -> None:
        self._check_key(key)
        # No resize of it until a listing begun later finds it again.
        self._sizing.stopped(key, at=time.monotonic())
        async with self._locks.hold(key):
            with _bus.map_errors(f"stopping {self.unit_name(key)}"):
                replicas = set(await self._units.loaded_replicas(key)) | {0}
                await self._stop_units(key, replicas)
            self._workers.forget(key)
            self._outdated.discard(key)

    async def list(self) -> set[str]:
        listed_at, began = time.time(), time.monotonic()
        busy = self._locks.held()
        with _bus.map_errors("listing units"):
            loaded, units = await self._units.listed()
            self._workers.watch(units)
            await self._units.read(units)
        await asyncio.to_thread(self._remove_orphan_files, loaded, listed_at, busy)
        now_us = time.time() * 1e6
        groups: dict[str, list[tuple[int, bool]]] = {}  # key -> (replica, whether current)
        for unit in units:
            if unit.key is None:
                continue
            props = {"ActiveState": unit.active_state, **unit.properties}
            if unit.active_state == "failed":
                failed_since = props.get("InactiveEnterTimestamp") or 0
                waited = now_us - failed_since >= self._settings.failed_restart_delay * 1e6
                current = not waited
            else:
                running = unit.active_state in RUNNING
                current = not running or self._current(unit.key, props, unit.replica)
            groups.setdefault(unit.key, []).append((unit.replica, current))
        self._workers.listed(units)
        self._outdated = self._sizing.listing(groups, began=began)
        return set(groups)

    def outdated(self) -> set[str]:
        """Groups of another version, half-changed, or failed long enough (`Upgrades`)."""
        return set(self._outdated)

    def capacity(self) -> int | None:
        """Most groups at once (`Capacity`): `max_groups`, and `max_units` less the units
        groups run beyond their `workers`, over the units of a group."""
        s = self._settings
        caps = [s.max_groups, self._sizing.capacity(s.max_units)]
        return min((cap for cap in caps if cap is not None), default=None)

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The units of each group, by replica, as the last `list()` and systemd's signals
        saw them."""
        return self._workers.describe()

    # -- sizes (the `Sizes` protocol) -----------------------------------------------------

    async def resize(self, key: str, workers: int) -> None:
        """Run `workers` units for `key` (at least 1, at most `MAX_REPLICAS`), growing only
        into the units `max_units` leaves; no-op for a group the last `list()` did not find."""
        if not self._sizing.listed(key):
            return
        current = self._sizing.of(key)
        wanted = min(workers, _names.MAX_REPLICAS)
        count = self._sizing.clamp(key, wanted, self._settings.max_units)
        if count == current:
            return
        self._sizing.ask(key, count)
        async with self._locks.hold(key):
            if not self._sizing.listed(key):  # stopped meanwhile: its units must not come back
                self._sizing.forget(key)
                return
            with _bus.map_errors(f"resizing the group of {key!r} to {count} units"):
                await self._converge(key, count)

    def sizes(self) -> dict[str, int]:
        return self._sizing.sizes()

    async def close(self) -> None:
        # Units outlive the controller on purpose (a restarted controller adopts them).
        await self._bus.close()

    # -- units ----------------------------------------------------------------------------

    async def _converge(self, key: str, size: int) -> None:
        """Stop the replicas of `key` from `size` up (the highest first), then start or
        restart each one below that does not run this version."""
        surplus = {r for r in await self._units.loaded_replicas(key) if r >= size}
        await self._stop_units(key, surplus)
        for replica in range(size):
            await self._start_unit(key, replica)

    async def _start_unit(self, key: str, replica: int) -> None:
        unit = self.unit_name(key, replica)
        state = await self._units.state(unit)
        running = state is not None and state.get("ActiveState") in RUNNING
        if running and self._current(key, state or {}, replica):
            return
        await asyncio.to_thread(self._write_environment, key, replica)
        if state is not None and state.get("ActiveState") == "failed":
            await self._bus.manager("ResetFailedUnit", "s", [unit], missing_ok=True)
        method = "RestartUnit" if running else "StartUnit"
        try:
            await self._bus.manager(method, "ss", [unit, "replace"])
        except BaseException:
            if not running:  # no unit reads it: the key and URI must not linger
                self.environment_file(key, replica).unlink(missing_ok=True)
            raise

    async def _stop_units(self, key: str, replicas: set[int]) -> None:
        """Stop these replicas of `key`, the highest first (SIGTERM: each worker finishes
        what it holds), wait until they are gone, and remove their files."""
        units = [self.unit_name(key, r) for r in sorted(replicas, reverse=True)]
        for unit in units:
            await self._bus.manager("StopUnit", "ss", [unit, "replace"], missing_ok=True)
        for unit in units:
            await self._units.wait_stopped(unit, self._settings.stop_wait)
            # A failed unit stays loaded until reset: reset it, so the instance goes.
            await self._bus.manager("ResetFailedUnit", "s", [unit], missing_ok=True)
        for replica in replicas:
            with contextlib.suppress(FileNotFoundError):
                self.environment_file(key, replica).unlink()
        self._workers.forget(key, replicas)

    def _current(self, key: str, props: dict[str, Any], replica: int = 0) -> bool:
        """Whether a running unit runs this version: its file names it and was not written
        after the unit's main process started."""
        path = self.environment_file(key, replica)
        try:
            written_us = path.stat().st_mtime_ns // 1000
        except OSError:
            return False
        found = _environment.read_environment(path) or {}
        started = props.get("ExecMainStartTimestamp") or 0
        return found.get(_environment.VERSION_ENV) == self.version and (
            not started or written_us <= started
        )

    def _write_environment(self, key: str, replica: int = 0) -> None:
        """Write the environment file of a unit of `key`: 0600, whole or not at all."""
        variables = {
            **self._settings.environment,
            **self._context.environment(key, self.worker_id(key, replica)),
            _environment.VERSION_ENV: self.version,
        }
        _environment.write(
            self._unit_names.directory, self.environment_file(key, replica), variables
        )

    def _remove_orphan_files(self, loaded: set[str], listed_at: float, busy: set[str]) -> None:
        """Remove the pool's environment files that no loaded unit reads: left by a
        controller that died between writing one and starting its unit. A file written
        since the listing began, or of a key being started or stopped then, is kept."""
        stems = {self._unit_names.file_of(name).name.removesuffix(".env") for name in loaded}
        try:
            paths = list(self._unit_names.directory.glob(self._unit_names.files_glob()))
        except OSError:
            return
        for path in paths:
            stem = path.name.removesuffix(".env")
            if stem in stems:
                continue
            try:
                if path.stat().st_mtime >= listed_at - 1:
                    continue
            except OSError:
                continue
            key = (_environment.read_environment(path) or {}).get(wire.WorkerEnv.KEY)
            if key is not None and key in busy:
                continue
            logger.info("removing %s: no unit reads it", path)
            path.unlink(missing_ok=True)
