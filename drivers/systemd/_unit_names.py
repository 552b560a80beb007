"""The units of one pool by name: the unit, environment file and worker id of each replica of
a key, and the key and replica a listed unit stands for.

`_names` makes instance names from a pool and a key; this room ties them to a template and an
environment directory, and reads a unit's key back: from its name when it is readable, else
from its environment file (a hashed name), always checked by naming the unit again.
"""

from __future__ import annotations

from pathlib import Path

from drivers import names
from drivers.systemd import _environment, _names
from osrdyne import wire


class UnitNames:
    """Names of the units of `pool`, instances of `template`, with files in `directory`."""

    def __init__(self, pool: str, template: str, directory: Path) -> None:
        self.pool = pool
        self.prefix = template.removesuffix(".service")  # 'osrdyne-worker@'
        self.limit = _names.MAX_UNIT_NAME - len(self.prefix) - len(".service")
        # Raises ValueError when the pool cannot name units, the replicas' included.
        _names.replica_instance(pool, "k", _names.MAX_REPLICAS - 1, limit=self.limit)
        #: Every instance of the pool starts with it (the escaped pool has no bare '-').
        self.head = _names.escape(pool) + "-"
        self.directory = directory

    def unit(self, key: str, replica: int = 0) -> str:
        """The unit of replica `replica` of the group of `key`."""
        instance = _names.replica_instance(self.pool, key, replica, limit=self.limit)
        return f"{self.prefix}{instance}.service"

    def environment_file(self, key: str, replica: int = 0) -> Path:
        """The environment file of a unit of `key` (what the template's `%i` opens)."""
        return self.file_of(self.unit(key, replica))

    def file_of(self, unit: str) -> Path:
        return self.directory / (_names.file_stem(self.instance(unit)) + ".env")

    def worker_id(self, key: str, replica: int = 0) -> str:
        """The worker id of a unit of `key` (its `WORKER_ID`)."""
        return names.object_name(self.pool, key, suffix=str(replica) if replica else "")

    def instance(self, unit: str) -> str:
        return unit.removeprefix(self.prefix).removesuffix(".service")

    def pool_pattern(self) -> str:
        """Every unit of the pool matches it (fnmatch, backslashes literal)."""
        return self.prefix + self.head + "*.service"

    def key_patterns(self, key: str) -> list[str]:
        """Every unit of `key` matches one of them (other keys' units may too)."""
        others = _names.replicas_glob(self.pool, key, limit=self.limit)
        return [self.unit(key), f"{self.prefix}{others}.service"]

    def files_glob(self) -> str:
        """Every environment file of the pool matches it."""
        return _names.file_stem(self.head) + "*.env"

    def key_of(self, unit: str) -> tuple[str, int] | None:
        """The key and replica of one of the pool's units: the key read from a readable
        name, else from its environment file (a hashed name); None when it is not one of
        the pool's."""
        if not unit.startswith(self.prefix) or not unit.endswith(".service"):
            return None
        instance = self.instance(unit)
        if not instance.startswith(self.head) or not _names.UNIT_NAME_CHARS.match(instance):
            return None
        first, replica = _names.split_replica(instance)
        key = _names.unescape(first[len(self.head) :], leading=False)
        if key is None:
            found = _environment.read_environment(self.file_of(unit))
            key = (found or {}).get(wire.WorkerEnv.KEY)
        if key is None or self.unit(key, replica) != unit:
            return None
        return key, replica

    def replica_of(self, key: str, unit: str) -> int | None:
        """The replica `unit` is of `key`'s group, or None when it is another key's."""
        _, replica = _names.split_replica(self.instance(unit))
        return replica if self.unit(key, replica) == unit else None
