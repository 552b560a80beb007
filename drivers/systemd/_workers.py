"""Each group's workers as the last listing and systemd's signals report them (`describe`).

systemd forgets a process's exit status when it restarts it, so the driver subscribes to the
units' property changes (`_bus`) and keeps the last exit of each of its workers as systemd
reports it.
"""

from __future__ import annotations

from typing import Any

from drivers import base
from drivers.systemd import _bus, _unit_names, _units

#: ExecMainCode values (waitid's si_code): exited, killed, killed with a core dump.
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3


class Workers:
    """The workers of one pool's groups, by key and replica."""

    def __init__(self, unit_names: _unit_names.UnitNames) -> None:
        self._names = unit_names
        #: Each group's workers by replica.
        self._workers: dict[str, dict[int, base.WorkerInfo]] = {}
        #: Unit object path -> key and replica, for the property-change signals.
        self._paths: dict[str, tuple[str, int]] = {}

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The units of each group, by replica."""
        return {
            key: tuple(info for _, info in sorted(replicas.items()))
            for key, replicas in self._workers.items()
        }

    def watch(self, units: list[_units.Unit]) -> None:
        """The units whose property changes matter from now on: a listing's (bounded by the
        groups)."""
        self._paths = {u.path: (u.key, u.replica) for u in units if u.key is not None}

    def listed(self, units: list[_units.Unit]) -> None:
        """The workers are those of these keyed, present units (their properties read)."""
        workers: dict[str, dict[int, base.WorkerInfo]] = {}
        for unit in units:
            if unit.key is not None and unit.active_state in _units.PRESENT:
                workers.setdefault(unit.key, {})[unit.replica] = self._info(unit)
        self._workers = workers

    def forget(self, key: str, replicas: set[int] | None = None) -> None:
        """These replicas of `key` are gone (every one: None)."""
        if replicas is None:
            self._workers.pop(key, None)
            return
        for replica in replicas:
            self._workers.get(key, {}).pop(replica, None)

    def _info(self, unit: _units.Unit) -> base.WorkerInfo:
        assert unit.key is not None
        props = unit.properties
        previous = self._workers.get(unit.key, {}).get(unit.replica)
        code = exit_code(props.get("ExecMainCode"), props.get("ExecMainStatus"))
        if code is None and previous is not None:
            code = previous.last_exit  # systemd forgot it when it restarted the worker
        return base.WorkerInfo(
            worker_id=self._names.worker_id(unit.key, unit.replica),
            pid=props.get("MainPID") or None,
            name=unit.name,
            restarts=int(props.get("NRestarts") or 0),
            last_exit=code,
        )

    def on_message(self, message: Any) -> None:
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
        code = exit_code(changed.get("ExecMainCode"), changed.get("ExecMainStatus"))
        if code is not None:
            info.last_exit = code
        if isinstance(changed.get("NRestarts"), int):
            info.restarts = changed["NRestarts"]
        if "MainPID" in changed:
            info.pid = changed["MainPID"] or None


def exit_code(code: Any, status: Any) -> int | None:
    """The last exit as WorkerInfo tells it (negative: the signal that killed it)."""
    if not isinstance(code, int) or not isinstance(status, int):
        return None
    if code == _CLD_EXITED:
        return status
    if code in (_CLD_KILLED, _CLD_DUMPED):
        return -status
    return None
