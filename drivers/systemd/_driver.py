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

systemd forgets a process's exit status when it restarts it, so the driver subscribes to the
units' property changes and keeps the last exit of each of its workers as systemd reports it.

A group is `workers` units, replicas 0 to `workers - 1` of its key (`_names.replica_instance`),
each with its environment file and its own worker id; the controller's group scaler changes
that number while the group runs (`Sizes`): new replicas start at once, the highest ones stop
first (`StopUnit`: SIGTERM, so the worker finishes what it holds; the template's
`TimeoutStopSec=` kills it after). A group grows only into the units `max_units` leaves. A
restarted controller adopts a grown group at its size when its replicas are whole and current;
otherwise the group goes back to `workers` and the scaler grows it again if it needs to.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from drivers import base, names
from drivers.systemd import _bus, _environment, _names, _settings, _unit_names
from osrdyne import wire

logger = logging.getLogger(__name__)

#: Active states of a unit that count as a running (or starting, or failed) group.
_PRESENT = frozenset({"active", "activating", "reloading", "deactivating", "failed"})
_RUNNING = frozenset({"active", "activating", "reloading"})
#: ExecMainCode values (waitid's si_code): exited, killed, killed with a core dump.
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3
#: A listing's units (an alias: `list` is a method of the driver).
_Units = list["_Unit"]


@dataclasses.dataclass
class _Unit:
    """What one listing saw of a unit of the pool."""

    name: str
    path: str
    active_state: str
    sub_state: str
    key: str | None = None
    replica: int = 0
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)


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
        self._bus = _bus.Bus(settings, self._on_message)
        self._locks: dict[str, asyncio.Lock] = {}
        self._outdated: set[str] = set()
        #: Each group's workers by replica, as the last `list()` and the signals saw them.
        self._workers: dict[str, dict[int, base.WorkerInfo]] = {}
        #: Unit object path -> key and replica, for the property-change signals.
        self._paths: dict[str, tuple[str, int]] = {}
        #: The keys the last `list()` found.
        self._listed: set[str] = set()
        #: Units of each group resized away from `workers` (the `Sizes` protocol), or adopted.
        self._sizes: dict[str, int] = {}
        #: When each key was last stopped (monotonic): a listing begun before does not make
        #: it resizable again.
        self._stopped: dict[str, float] = {}
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
        async with self._lock(key):
            with _bus.map_errors(f"starting {self.unit_name(key)}"):
                await self._converge(key, self._size(key))
            self._outdated.discard(key)

    async def stop(self, key: str) -> None:
        self._check_key(key)
        self._sizes.pop(key, None)
        self._listed.discard(key)  # no resize of it until a listing finds it again
        self._stopped[key] = time.monotonic()
        async with self._lock(key):
            with _bus.map_errors(f"stopping {self.unit_name(key)}"):
                replicas = set(await self._loaded_replicas(key)) | {0}
                await self._stop_units(key, replicas)
            self._workers.pop(key, None)
            self._outdated.discard(key)

    async def list(self) -> set[str]:
        listed_at, began = time.time(), time.monotonic()
        busy = {key for key, lock in self._locks.items() if lock.locked()}
        with _bus.map_errors("listing units"):
            loaded, units = await self._units()
        await asyncio.to_thread(self._remove_orphan_files, loaded, listed_at, busy)
        now_us = time.time() * 1e6
        groups: dict[str, dict[int, bool]] = {}  # key -> replica -> whether it is current
        workers: dict[str, dict[int, base.WorkerInfo]] = {}
        for unit in units:
            if unit.key is None or unit.active_state not in _PRESENT:
                continue
            props = {"ActiveState": unit.active_state, **unit.properties}
            if unit.active_state == "failed":
                failed_since = props.get("InactiveEnterTimestamp") or 0
                waited = now_us - failed_since >= self._settings.failed_restart_delay * 1e6
                current = not waited
            else:
                running = unit.active_state in _RUNNING
                current = not running or self._current(unit.key, props, unit.replica)
            groups.setdefault(unit.key, {})[unit.replica] = current
            workers.setdefault(unit.key, {})[unit.replica] = self._worker_info(unit)
        self._workers = workers
        self._stopped = {k: at for k, at in self._stopped.items() if at >= began}
        self._listed = set(groups) - set(self._stopped)
        self._sizes, self._outdated = plan_sizes(groups, self._sizes, self._settings.workers)
        return set(groups)

    def outdated(self) -> set[str]:
        """Groups of another version, half-changed, or failed long enough (`Upgrades`)."""
        return set(self._outdated)

    def capacity(self) -> int | None:
        """Most groups at once (`Capacity`): `max_groups`, and `max_units` less the units
        groups run beyond their `workers`, over the units of a group."""
        s = self._settings
        caps = [] if s.max_groups is None else [s.max_groups]
        if s.max_units is not None:
            extras = sum(max(0, n - s.workers) for n in self.sizes().values())
            caps.append(max(0, s.max_units - extras) // s.workers)
        return min(caps, default=None)

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The units of each group, by replica, as the last `list()` and systemd's signals
        saw them."""
        return {
            key: tuple(info for _, info in sorted(replicas.items()))
            for key, replicas in self._workers.items()
        }

    # -- sizes (the `Sizes` protocol) -----------------------------------------------------

    def _size(self, key: str) -> int:
        return self._sizes.get(key, self._settings.workers)

    async def resize(self, key: str, workers: int) -> None:
        """Run `workers` units for `key` (at least 1, at most `MAX_REPLICAS`), growing only
        into the units `max_units` leaves; no-op for a group the last `list()` did not find."""
        if key not in self._listed:
            return
        s = self._settings
        current, count = self._size(key), min(max(1, workers), _names.MAX_REPLICAS)
        if count > current and s.max_units is not None:
            used = sum(self.sizes().values())
            count = current + min(count - current, max(0, s.max_units - used))
        if count == current:
            return
        self._sizes[key] = count
        async with self._lock(key):
            if key not in self._listed:  # stopped meanwhile: its units must not come back
                self._sizes.pop(key, None)
                return
            with _bus.map_errors(f"resizing the group of {key!r} to {count} units"):
                await self._converge(key, count)

    def sizes(self) -> dict[str, int]:
        return {key: self._size(key) for key in self._listed}

    async def close(self) -> None:
        # Units outlive the controller on purpose (a restarted controller adopts them).
        await self._bus.close()

    # -- units ----------------------------------------------------------------------------

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    async def _converge(self, key: str, size: int) -> None:
        """Stop the replicas of `key` from `size` up (the highest first), then start or
        restart each one below that does not run this version."""
        surplus = {r for r, state in (await self._loaded_replicas(key)).items() if r >= size}
        await self._stop_units(key, surplus)
        for replica in range(size):
            await self._start_unit(key, replica)

    async def _start_unit(self, key: str, replica: int) -> None:
        unit = self.unit_name(key, replica)
        state = await self._state(unit)
        running = state is not None and state.get("ActiveState") in _RUNNING
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
            await self._wait_stopped(unit)
            # A failed unit stays loaded until reset: reset it, so the instance goes.
            await self._bus.manager("ResetFailedUnit", "s", [unit], missing_ok=True)
        for replica in replicas:
            with contextlib.suppress(FileNotFoundError):
                self.environment_file(key, replica).unlink()
            self._workers.get(key, {}).pop(replica, None)

    async def _loaded_replicas(self, key: str) -> dict[int, str]:
        """The active state of each unit of `key` systemd has loaded, by replica."""
        patterns = self._unit_names.key_patterns(key)
        reply = await self._bus.manager("ListUnitsByPatterns", "asas", [[], patterns])
        found: dict[int, str] = {}
        for row in reply[0] if reply else []:
            replica = self._unit_names.replica_of(key, row[0])
            if replica is not None:
                found[replica] = row[3]
        return found

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

    def _worker_info(self, unit: _Unit) -> base.WorkerInfo:
        assert unit.key is not None
        props = unit.properties
        previous = self._workers.get(unit.key, {}).get(unit.replica)
        exit_code = _exit_code(props.get("ExecMainCode"), props.get("ExecMainStatus"))
        if exit_code is None and previous is not None:
            exit_code = previous.last_exit  # systemd forgot it when it restarted the worker
        pid = props.get("MainPID") or None
        return base.WorkerInfo(
            worker_id=self.worker_id(unit.key, unit.replica),
            pid=pid,
            name=unit.name,
            restarts=int(props.get("NRestarts") or 0),
            last_exit=exit_code,
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

    async def _units(self) -> tuple[set[str], _Units]:
        """The names of the pool's loaded units (any state), and those present (running,
        starting, stopping or failed) with their service properties."""
        # systemd matches with FNM_NOESCAPE: the backslashes of the name are literal.
        patterns = [self._unit_names.pool_pattern()]
        reply = await self._bus.manager("ListUnitsByPatterns", "asas", [[], patterns])
        rows: _bus.Body = reply[0] if reply else []
        units: _Units = [
            _Unit(name=row[0], path=row[6], active_state=_active_state(row), sub_state=row[4])
            for row in rows
        ]
        loaded = {u.name for u in units}
        units = [u for u in units if u.active_state in _PRESENT]
        for unit in units:
            unit.key, unit.replica = self._unit_names.key_of(unit.name) or (None, 0)
        # The units whose property changes matter: this listing's (bounded by the groups).
        self._paths = {u.path: (u.key, u.replica) for u in units if u.key is not None}
        limit = asyncio.Semaphore(16)

        async def read(unit: _Unit) -> None:
            async with limit:
                unit.properties = await self._bus.properties(unit.path)
                if unit.active_state == "failed":  # since when: a Unit property
                    general = await self._bus.properties(unit.path, _bus.UNIT)
                    unit.properties["InactiveEnterTimestamp"] = general.get(
                        "InactiveEnterTimestamp"
                    )

        await asyncio.gather(*(read(u) for u in units if u.key is not None))
        return loaded, units

    async def _state(self, unit: str) -> dict[str, Any] | None:
        """The unit's properties, or None when systemd has not loaded it."""
        reply = await self._bus.manager("GetUnit", "s", [unit], missing_ok=True)
        if reply is None:
            return None
        path: str = reply[0]
        state = await self._bus.properties(path, _bus.UNIT)
        return {**state, **await self._bus.properties(path)} if state else None

    async def _wait_stopped(self, unit: str) -> None:
        deadline = time.monotonic() + self._settings.stop_wait
        while True:
            state = await self._state(unit)
            if state is None or state.get("ActiveState") in ("inactive", "failed"):
                return
            if time.monotonic() >= deadline:
                raise base.DriverUnavailable(
                    f"{unit} did not stop within {self._settings.stop_wait:g}s "
                    f"(state {state.get('ActiveState')}/{state.get('SubState')})"
                )
            await asyncio.sleep(0.1)

    def _on_message(self, message: Any) -> None:
        """Keep the last exit of each worker as systemd reports it (it forgets it when it
        restarts the worker)."""
        if message.member != "PropertiesChanged" or message.path not in self._paths:
            return
        body = message.body
        if len(body) < 2 or body[0] != _bus.SERVICE or not isinstance(body[1], dict):
            return
        changed = {name: variant.value for name, variant in body[1].items()}
        key, replica = self._paths[message.path]
        info = self._workers.get(key, {}).get(replica)
        if info is None:
            return
        exit_code = _exit_code(changed.get("ExecMainCode"), changed.get("ExecMainStatus"))
        if exit_code is not None:
            info.last_exit = exit_code
        if isinstance(changed.get("NRestarts"), int):
            info.restarts = changed["NRestarts"]
        if "MainPID" in changed:
            info.pid = changed["MainPID"] or None


def plan_sizes(
    groups: dict[str, dict[int, bool]], sizes: dict[str, int], workers: int
) -> tuple[dict[str, int], set[str]]:
    """What a listing means for the groups' sizes, from each listed group's replicas (and
    whether each is current) and the sizes asked so far: the sizes of the listed groups (a
    grown group nobody sized, e.g. before a controller restart, adopted at its size when its
    replicas are contiguous and current), and the groups `start` must converge (a unit of
    another version, one failed long enough, or replicas other than 0 to size - 1: a
    half-done resize)."""
    planned = {key: n for key, n in sizes.items() if key in groups}
    for key, found in groups.items():
        if key not in planned and len(found) > workers:
            if all(found.values()) and set(found) == set(range(len(found))):
                planned[key] = len(found)
    outdated = {
        key
        for key, found in groups.items()
        if not all(found.values()) or set(found) != set(range(planned.get(key, workers)))
    }
    return planned, outdated


def _active_state(row: _bus.Body) -> str:
    """A listed unit's active state, `activating` for an inactive one whose start job waits
    (StartUnit returns once the job is queued: the unit is being started)."""
    state: str = row[3]
    return "activating" if state == "inactive" and row[8] == "start" else state


def _exit_code(code: Any, status: Any) -> int | None:
    """The last exit as WorkerInfo tells it (negative: the signal that killed it)."""
    if not isinstance(code, int) or not isinstance(status, int):
        return None
    if code == _CLD_EXITED:
        return status
    if code in (_CLD_KILLED, _CLD_DUMPED):
        return -status
    return None
