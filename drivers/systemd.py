"""Worker groups as instances of a systemd template unit, driven through systemd's D-Bus API.

The group of `key` in `pool` is the unit `osrdyne-worker@<instance>.service` (the template is
a setting; `deploy/systemd/osrdyne-worker@.service` is ours). systemd is the only state: the
driver lists the pool's units (`ListUnitsByPatterns`), starts, restarts and stops them
(`StartUnit`, `RestartUnit`, `StopUnit`, `ResetFailedUnit`) and reads their restarts, exit
statuses and states from the units' own properties, so a restarted controller adopts the
units it finds. systemd restarts a worker that dies (`Restart=on-failure` in the template).

Instance names follow `systemd-escape`'s rules, for people reading `systemctl list-units`:
the instance is `escape(pool) + "-" + escape(key)`, and since `escape` turns every `-` into
`\\x2d`, the first bare `-` ends the pool (`systemd-escape --unescape` gives `pool/key`). Two
things make some keys take a *hashed* form instead, `escape(pool)-<start of escape(key)>\\x2f
<32 hex digits of sha256(key)>` (`escape` turns `/` into `-`, never into `\\x2f`, so a hashed
name is never a readable one):

- the unit name would pass 190 characters (systemd takes 255, but PrivateTmp= and the like
  put the unit name inside longer file names);
- systemd opens a unit's `EnvironmentFile=` through `glob()`, where a backslash escapes the
  next character: `EnvironmentFile=/run/osrdyne/workers/%i.env` opens the instance *without
  its backslashes* (`core\\x2dx` -> `corex2dx.env`). That file name must tell instances apart,
  so an instance is used only when putting a backslash back before every `x` and two hex
  digits of the file name gives the instance again; a key whose escaped form holds a bare
  `x` and two hex digits (`0xff`) is hashed. A pool whose own escaped name fails that test
  (`box2d`) is refused: its files could be another pool's.

The worker's environment (the protocol's `WORKER_*`, `environment`, and the driver's version)
reaches the unit through that per-instance file, written by the driver (mode 0600, atomically)
before each start and removed after the unit stops; never `systemctl set-environment`, which
every unit would see. The version of a running unit is the one its file names, unless the file
was written after the unit's main process started (a change the controller wrote but did not
apply: outdated). A unit that systemd gave up on (`failed`: its start limit hit in a crash
loop, or a start that failed) is started again once it has been failed for
`failed_restart_delay` seconds.

systemd forgets a process's exit status when it restarts it, so the driver subscribes to the
units' property changes and keeps the last exit of each of its groups as systemd reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic import Field

from drivers import base, names
from osrdyne import wire

if TYPE_CHECKING:
    from dbus_fast.aio import MessageBus

logger = logging.getLogger(__name__)

#: Longest unit name the driver makes. systemd accepts 255 characters, but then fails to
#: start the unit in its hardened forms: PrivateTmp= makes `/tmp/systemd-private-<boot id,
#: 32>-<unit>-XXXXXX`, one path component of at most 255 ("File name too long").
MAX_UNIT_NAME = 190
#: Hex digits of sha256(key) in a hashed instance name (128 bits).
HASH_DIGITS = 32
#: Marks a hashed instance name: the escape of '/', which systemd-escape never writes.
HASH_MARK = "\\x2f"
#: The variable of the environment file naming the driver's version of the group.
VERSION_ENV = "OSRDYNE_WORKER_VERSION"

_SYSTEMD = "org.freedesktop.systemd1"
_MANAGER_PATH = "/org/freedesktop/systemd1"
_MANAGER = "org.freedesktop.systemd1.Manager"
_UNIT = "org.freedesktop.systemd1.Unit"
_SERVICE = "org.freedesktop.systemd1.Service"
_PROPERTIES = "org.freedesktop.DBus.Properties"
_NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"
_LOAD_FAILED = "org.freedesktop.systemd1.LoadFailed"
_UNAVAILABLE_ERRORS = frozenset(
    {
        "org.freedesktop.DBus.Error.NoReply",
        "org.freedesktop.DBus.Error.Timeout",
        "org.freedesktop.DBus.Error.TimedOut",
        "org.freedesktop.DBus.Error.Disconnected",
        "org.freedesktop.DBus.Error.NoServer",
        "org.freedesktop.DBus.Error.ServiceUnknown",
        "org.freedesktop.DBus.Error.NameHasNoOwner",
        "org.freedesktop.DBus.Error.LimitsExceeded",
    }
)
#: Active states of a unit that count as a running (or starting, or failed) group.
_PRESENT = frozenset({"active", "activating", "reloading", "deactivating", "failed"})
_RUNNING = frozenset({"active", "activating", "reloading"})
#: ExecMainCode values (waitid's si_code): exited, killed, killed with a core dump.
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3

_UNIT_NAME_CHARS = re.compile(r"^[A-Za-z0-9:_.\\-]+$")
_TEMPLATE = re.compile(r"^[A-Za-z0-9:_.\\-]{1,100}@\.service$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_BUS_ADDRESS = re.compile(r"^unix:(path=/[^;,=\s]{1,200}|abstract=[^;,=\s]{1,100})$")
_ESCAPE_TOKEN = re.compile(r"\\x[0-9a-f]{2}|.", re.DOTALL)
_GLOB_ESCAPED = re.compile(r"x[0-9a-f]{2}")
# C0 controls and DEL: systemd drops an environment value holding one (tab and newline it
# keeps, but osrdyne's own values never need them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: A D-Bus reply's body, and a listing's units (aliases: `list` is a method of the driver).
_Body = list[Any]
_Units = list["_Unit"]

_ENV_LINE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\["\\$`])*)"$')


# -- names -------------------------------------------------------------------------------


def escape(text: str, *, leading: bool = True) -> str:
    """`text` escaped as `systemd-escape TEXT` does (its default, non-path mode).

    Every byte outside ASCII letters, digits and `:_.` becomes `\\xNN` (lowercase hex), `/`
    becomes `-`, and a leading `.` is escaped too (unless `leading` is False: `text` then
    stands after something else, as a key does after its pool).
    """
    out: list[str] = []
    for i, byte in enumerate(text.encode("utf-8", "surrogatepass")):
        char = chr(byte)
        if char == "/":
            out.append("-")
        elif (
            byte < 128
            and (char.isalnum() or char in ":_.")
            and not (leading and i == 0 and char == ".")
        ):
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    return "".join(out)


def unescape(escaped: str, *, leading: bool = True) -> str | None:
    """The text whose `escape` is exactly `escaped`, or None when it is not one (a hashed
    instance, a needless or malformed escape, bytes that are not UTF-8)."""
    raw = bytearray()
    for token in _ESCAPE_TOKEN.findall(escaped):
        if len(token) == 4:
            raw.append(int(token[2:], 16))
        elif token == "-":
            raw.append(ord("/"))
        elif token.isascii():
            raw.append(ord(token))
        else:
            return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    return text if escape(text, leading=leading) == escaped else None


def file_stem(instance: str) -> str:
    """The name systemd's `glob()` opens for `%i` of `instance`: its backslashes dropped."""
    return instance.replace("\\", "")


def _glob_safe(escaped: str) -> bool:
    """Whether `file_stem` is reversible on `escaped`: putting a backslash back before every
    `x` and two hex digits of its stem gives it again. Names that pass this test have
    distinct stems, hence distinct environment files."""
    stem = file_stem(escaped)
    return _GLOB_ESCAPED.sub(lambda m: "\\" + m[0], stem) == escaped


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_DIGITS]


def instance_name(pool: str, key: str, *, limit: int) -> str:
    """The instance naming the group of `key` in `pool`, at most `limit` characters.

    Readable (`escape(pool)-escape(key)`) when that fits and is glob-safe, else hashed
    (`escape(pool)-<glob-safe start of escape(key)>\\x2f<sha256(key)[:32]>`). Raises
    ValueError when the pool leaves no room for a hashed name or is not glob-safe itself.
    """
    if "/" in pool or not pool:
        raise ValueError(f"pool name {pool!r} cannot name systemd units")
    head = escape(pool) + "-"
    if not _glob_safe(head):
        raise ValueError(
            f"pool name {pool!r} cannot name systemd units: its escaped form {head!r} holds "
            "an 'x' and two hex digits, which systemd's EnvironmentFile= glob would confuse "
            "with an escape"
        )
    tail = HASH_MARK + key_hash(key)
    room = limit - len(head) - len(tail)
    if room < 0:
        raise ValueError(f"pool name {pool!r} is too long for systemd unit names")
    readable = escape(f"{pool}/{key}")  # = head + escape(key, leading=False)
    if len(readable) <= limit and _glob_safe(readable):
        return readable
    start = ""
    for token in _ESCAPE_TOKEN.findall(escape(key, leading=False)):
        if len(start) + len(token) > room or not _glob_safe(head + start + token):
            break
        start += token
    return head + start + tail


# -- settings ----------------------------------------------------------------------------


class SystemdSettings(pydantic.BaseModel):
    """Settings of the systemd driver (`[driver.systemd]` in the controller's configuration)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    bus_address: str | None = Field(
        default=None,
        description="D-Bus address of the bus systemd listens on, 'unix:path=/...' or "
        "'unix:abstract=...'. None: the system bus (DBUS_SYSTEM_BUS_ADDRESS, else "
        "unix:path=/run/dbus/system_bus_socket).",
    )
    template: str = Field(
        default="osrdyne-worker@.service",
        description="The template unit whose instances are the worker groups (installed "
        "on the machine: deploy/systemd/osrdyne-worker@.service).",
    )
    environment_directory: str = Field(
        default="/run/osrdyne/workers",
        description="Directory of the per-instance environment files; must be the one the "
        "template's EnvironmentFile= names (created 0700 if missing).",
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment of the workers; the protocol's WORKER_* variables "
        "are always set by the driver and win over these.",
    )
    max_groups: int | None = Field(
        default=None,
        ge=1,
        description="Most units at once; new keys beyond it are answered `overloaded` "
        "(reason `driver_capacity`). None: no cap of the driver's own.",
    )
    call_timeout: float = Field(default=30.0, gt=0, le=600, description="Seconds per D-Bus call.")
    stop_wait: float = Field(
        default=90.0,
        gt=0,
        le=3600,
        description="Seconds `stop` waits for a unit to go (the template's TimeoutStopSec= "
        "kills the worker before).",
    )
    failed_restart_delay: float = Field(
        default=30.0,
        ge=0,
        description="A unit systemd left failed (crash loop past its start limit, failed "
        "start) is started again after this many seconds.",
    )

    @pydantic.field_validator("bus_address")
    @classmethod
    def _check_bus_address(cls, value: str | None) -> str | None:
        if value is not None and not _BUS_ADDRESS.match(value):
            raise ValueError(
                "bus_address must be one 'unix:path=/absolute/path' or 'unix:abstract=name'"
            )
        return value

    @pydantic.field_validator("template")
    @classmethod
    def _check_template(cls, value: str) -> str:
        if not _TEMPLATE.match(value):
            raise ValueError(
                "template must be a template service name like 'osrdyne-worker@.service' "
                "(letters, digits and ':_.\\-' before the '@')"
            )
        return value

    @pydantic.field_validator("environment_directory")
    @classmethod
    def _check_directory(cls, value: str) -> str:
        path = Path(value)
        if not path.is_absolute() or ".." in path.parts or _CONTROL.search(value):
            raise ValueError("environment_directory must be an absolute path without '..'")
        if len(value) > 200:
            raise ValueError("environment_directory is longer than 200 characters")
        return value

    @pydantic.field_validator("environment")
    @classmethod
    def _check_environment(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name")
            problem = _value_problem(text)
            if problem is not None:
                raise ValueError(f"environment variable {name}: {problem}")
        return value


def _value_problem(text: str) -> str | None:
    """Why systemd would drop `text` as an environment value, or None."""
    if _CONTROL.search(text):
        return "holds a control character"
    try:
        text.encode()
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    for char in text:
        point = ord(char)
        if 0xFDD0 <= point <= 0xFDEF or (point & 0xFFFE) == 0xFFFE:
            return "holds a Unicode noncharacter, which systemd refuses"
    if len(text.encode()) > 65536:
        return "is longer than 64 KiB"
    return None


def _quote(text: str) -> str:
    """`text` as a double-quoted EnvironmentFile value (systemd's own parser reads it back)."""
    return '"' + re.sub(r'(["\\$`])', r"\\\1", text) + '"'


def _read_environment(path: Path) -> dict[str, str] | None:
    """The variables of one of the driver's environment files, or None when unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found: dict[str, str] = {}
    for line in lines:
        match = _ENV_LINE.match(line)
        if match:
            found[match[1]] = re.sub(r"\\(.)", r"\1", match[2])
    return found


# -- the driver --------------------------------------------------------------------------


@dataclasses.dataclass
class _Unit:
    """What one listing saw of a unit of the pool."""

    name: str
    path: str
    active_state: str
    sub_state: str
    key: str | None = None
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)


class SystemdDriver:
    """Runs each worker group as one instance of a systemd template unit."""

    def __init__(self, context: base.PoolContext, settings: SystemdSettings) -> None:
        import dbus_fast  # noqa: F401  (fail early, and clearly, when the library is missing)

        self._context = context
        self._settings = settings
        self._prefix = settings.template.removesuffix(".service")  # 'osrdyne-worker@'
        self._limit = MAX_UNIT_NAME - len(self._prefix) - len(".service")
        try:
            instance_name(context.pool, "k", limit=self._limit)  # the pool can name units
        except ValueError as exc:
            raise base.DriverConfigurationError(str(exc)) from exc
        #: Every instance of the pool starts with it (the escaped pool has no bare '-').
        self._head = escape(context.pool) + "-"
        self._directory = Path(settings.environment_directory)
        self._bus: MessageBus | None = None
        self._connecting = asyncio.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        self._outdated: set[str] = set()
        self._workers: dict[str, base.WorkerInfo] = {}
        #: Unit object path -> key, for the property-change signals.
        self._paths: dict[str, str] = {}
        self.version = names.version_hash(
            {
                "pool": context.pool,
                "amqp_uri": context.amqp_uri,
                "template": settings.template,
                "environment": settings.environment,
            }
        )

    # -- names --------------------------------------------------------------------------

    def unit_name(self, key: str) -> str:
        """The unit of the group of `key`."""
        return f"{self._prefix}{instance_name(self._context.pool, key, limit=self._limit)}.service"

    def environment_file(self, key: str) -> Path:
        """The environment file of the group of `key` (what the template's `%i` opens)."""
        return self._directory / (file_stem(self._instance(self.unit_name(key))) + ".env")

    def _instance(self, unit: str) -> str:
        return unit.removeprefix(self._prefix).removesuffix(".service")

    def _key_of(self, unit: str) -> str | None:
        """The key of one of the pool's units: read from a readable name, else from its
        environment file (a hashed name); None when it is not one of the pool's."""
        if not unit.startswith(self._prefix) or not unit.endswith(".service"):
            return None
        instance = self._instance(unit)
        if not instance.startswith(self._head) or not _UNIT_NAME_CHARS.match(instance):
            return None
        rest = instance[len(self._head) :]
        key = unescape(rest, leading=False)
        if key is None:
            found = _read_environment(self._directory / (file_stem(instance) + ".env"))
            key = (found or {}).get(wire.WorkerEnv.KEY)
        if key is None or self.unit_name(key) != unit:
            return None
        return key

    def _check_key(self, key: str) -> None:
        problem = wire.key_problem(self._context.names, key) or _value_problem(key)
        if problem is not None:
            raise base.DriverRejected(f"worker key {key!r} cannot have a systemd unit: {problem}")

    # -- the Driver protocol ------------------------------------------------------------

    async def start(self, key: str) -> None:
        self._check_key(key)
        unit = self.unit_name(key)
        async with self._lock(key):
            with _map_errors(f"starting {unit}"):
                state = await self._state(unit)
                running = state is not None and state.get("ActiveState") in _RUNNING
                if running and self._current(key, state or {}):
                    return
                await asyncio.to_thread(self._write_environment, key)
                if state is not None and state.get("ActiveState") == "failed":
                    await self._manager("ResetFailedUnit", "s", [unit], missing_ok=True)
                method = "RestartUnit" if running else "StartUnit"
                try:
                    await self._manager(method, "ss", [unit, "replace"])
                except BaseException:
                    if not running:  # no unit reads it: the key and URI must not linger
                        self.environment_file(key).unlink(missing_ok=True)
                    raise
                self._outdated.discard(key)

    async def stop(self, key: str) -> None:
        self._check_key(key)
        unit = self.unit_name(key)
        async with self._lock(key):
            with _map_errors(f"stopping {unit}"):
                await self._manager("StopUnit", "ss", [unit, "replace"], missing_ok=True)
                await self._wait_stopped(unit)
                # A failed unit stays loaded until reset: reset it, so the instance goes.
                await self._manager("ResetFailedUnit", "s", [unit], missing_ok=True)
            with contextlib.suppress(FileNotFoundError):
                self.environment_file(key).unlink()
            self._workers.pop(key, None)
            self._outdated.discard(key)

    async def list(self) -> set[str]:
        listed_at = time.time()
        busy = {key for key, lock in self._locks.items() if lock.locked()}
        with _map_errors("listing units"):
            loaded, units = await self._units()
        await asyncio.to_thread(self._remove_orphan_files, loaded, listed_at, busy)
        now_us = time.time() * 1e6
        groups: set[str] = set()
        outdated: set[str] = set()
        workers: dict[str, base.WorkerInfo] = {}
        for unit in units:
            if unit.key is None or unit.active_state not in _PRESENT:
                continue
            groups.add(unit.key)
            props = {"ActiveState": unit.active_state, **unit.properties}
            if unit.active_state == "failed":
                failed_since = props.get("InactiveEnterTimestamp") or 0
                if now_us - failed_since >= self._settings.failed_restart_delay * 1e6:
                    outdated.add(unit.key)
            elif unit.active_state in _RUNNING and not self._current(unit.key, props):
                outdated.add(unit.key)
            workers[unit.key] = self._worker_info(unit)
        self._outdated = outdated
        self._workers = workers
        return groups

    def outdated(self) -> set[str]:
        """Groups of another version, half-changed, or failed long enough (`Upgrades`)."""
        return set(self._outdated)

    def capacity(self) -> int | None:
        """Most groups at once (`Capacity`): `max_groups`."""
        return self._settings.max_groups

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The unit of each group as the last `list()` and systemd's signals saw it."""
        return {key: (info,) for key, info in self._workers.items()}

    async def close(self) -> None:
        # Units outlive the controller on purpose (a restarted controller adopts them).
        bus, self._bus = self._bus, None
        if bus is not None:
            bus.disconnect()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    bus.wait_for_disconnect(),  # type: ignore[no-untyped-call]
                    self._settings.call_timeout,
                )

    # -- units ----------------------------------------------------------------------------

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _current(self, key: str, props: dict[str, Any]) -> bool:
        """Whether a running unit runs this version: its file names it and was not written
        after the unit's main process started."""
        path = self.environment_file(key)
        try:
            written_us = path.stat().st_mtime_ns // 1000
        except OSError:
            return False
        found = _read_environment(path) or {}
        started = props.get("ExecMainStartTimestamp") or 0
        return found.get(VERSION_ENV) == self.version and (not started or written_us <= started)

    def _write_environment(self, key: str) -> None:
        """Write the group's environment file: 0600, whole or not at all."""
        worker_id = names.object_name(self._context.pool, key)
        variables = {
            **self._settings.environment,
            **self._context.environment(key, worker_id),
            VERSION_ENV: self.version,
        }
        for name, value in variables.items():
            problem = _value_problem(value)
            if problem is not None:
                raise base.DriverRejected(f"the worker's {name} {problem}")
        body = "".join(f"{name}={_quote(value)}\n" for name, value in variables.items())
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = self._directory.stat()
        if found.st_mode & 0o022 or found.st_uid not in (os.geteuid(), 0):
            # Whoever may write there could swap a unit's file, hence its environment.
            raise base.DriverRejected(
                f"{self._directory} must be owned by the controller's user (or root) and "
                f"writable by it alone (mode {found.st_mode & 0o777:o}, owner uid "
                f"{found.st_uid})"
            )
        target = self.environment_file(key)
        fd, temporary = tempfile.mkstemp(dir=self._directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(body)
                file.flush()
                os.fsync(file.fileno())
            os.chmod(temporary, 0o600)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    def _worker_info(self, unit: _Unit) -> base.WorkerInfo:
        assert unit.key is not None
        props = unit.properties
        previous = self._workers.get(unit.key)
        exit_code = _exit_code(props.get("ExecMainCode"), props.get("ExecMainStatus"))
        if exit_code is None and previous is not None:
            exit_code = previous.last_exit  # systemd forgot it when it restarted the worker
        pid = props.get("MainPID") or None
        return base.WorkerInfo(
            worker_id=names.object_name(self._context.pool, unit.key),
            pid=pid,
            name=unit.name,
            restarts=int(props.get("NRestarts") or 0),
            last_exit=exit_code,
        )

    def _remove_orphan_files(self, loaded: set[str], listed_at: float, busy: set[str]) -> None:
        """Remove the pool's environment files that no loaded unit reads: left by a
        controller that died between writing one and starting its unit. A file written
        since the listing began, or of a key being started or stopped then, is kept."""
        stems = {file_stem(self._instance(name)) for name in loaded}
        try:
            paths = list(self._directory.glob(f"{file_stem(self._head)}*.env"))
        except OSError:
            return
        for path in paths:
            stem = path.name.removesuffix(".env")
            if stem in stems or not stem.startswith(file_stem(self._head)):
                continue
            try:
                if path.stat().st_mtime >= listed_at - 1:
                    continue
            except OSError:
                continue
            key = (_read_environment(path) or {}).get(wire.WorkerEnv.KEY)
            if key is not None and key in busy:
                continue
            logger.info("removing %s: no unit reads it", path)
            path.unlink(missing_ok=True)

    async def _units(self) -> tuple[set[str], _Units]:
        """The names of the pool's loaded units (any state), and those present (running,
        starting, stopping or failed) with their service properties."""
        # systemd matches with FNM_NOESCAPE: the backslashes of the name are literal.
        pattern = self._prefix + self._head + "*.service"
        reply = await self._manager("ListUnitsByPatterns", "asas", [[], [pattern]])
        rows: _Body = reply[0] if reply else []
        units: _Units = [
            _Unit(name=row[0], path=row[6], active_state=row[3], sub_state=row[4]) for row in rows
        ]
        loaded = {u.name for u in units}
        units = [u for u in units if u.active_state in _PRESENT]
        for unit in units:
            unit.key = self._key_of(unit.name)
        # The units whose property changes matter: this listing's (bounded by the groups).
        self._paths = {u.path: u.key for u in units if u.key is not None}
        limit = asyncio.Semaphore(16)

        async def read(unit: _Unit) -> None:
            async with limit:
                unit.properties = await self._properties(unit.path)
                if unit.active_state == "failed":  # since when: a Unit property
                    general = await self._properties(unit.path, _UNIT)
                    unit.properties["InactiveEnterTimestamp"] = general.get(
                        "InactiveEnterTimestamp"
                    )

        await asyncio.gather(*(read(u) for u in units if u.key is not None))
        return loaded, units

    async def _state(self, unit: str) -> dict[str, Any] | None:
        """The unit's properties, or None when systemd has not loaded it."""
        reply = await self._manager("GetUnit", "s", [unit], missing_ok=True)
        if reply is None:
            return None
        path: str = reply[0]
        state = await self._properties(path, _UNIT)
        return {**state, **await self._properties(path)} if state else None

    async def _properties(self, path: str, interface: str = _SERVICE) -> dict[str, Any]:
        reply = await self._call(path, _PROPERTIES, "GetAll", "s", [interface], missing_ok=True)
        if not reply:
            return {}
        return {name: variant.value for name, variant in reply[0].items()}

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

    # -- D-Bus ----------------------------------------------------------------------------

    async def _manager(
        self, method: str, signature: str, body: _Body, *, missing_ok: bool = False
    ) -> _Body | None:
        return await self._call(
            _MANAGER_PATH, _MANAGER, method, signature, body, missing_ok=missing_ok
        )

    async def _call(
        self,
        path: str,
        interface: str,
        member: str,
        signature: str,
        body: _Body,
        *,
        missing_ok: bool = False,
    ) -> _Body | None:
        """One method call to systemd; None when the unit is missing and `missing_ok`."""
        from dbus_fast import Message, MessageType
        from dbus_fast.errors import DBusError

        bus = await self._connect()
        message = Message(
            destination=_SYSTEMD,
            path=path,
            interface=interface,
            member=member,
            signature=signature,
            body=body,
        )
        async with asyncio.timeout(self._settings.call_timeout):
            reply = await bus.call(message)
        if reply.message_type == MessageType.ERROR:
            text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
            error = DBusError(reply.error_name or "org.freedesktop.DBus.Error.Failed", text)
            if missing_ok and error.type in (_NO_SUCH_UNIT, _LOAD_FAILED):
                return None
            if missing_ok and member == "ResetFailedUnit":
                return None  # nothing to reset
            raise error
        body_out: _Body = reply.body
        return body_out

    async def _connect(self) -> MessageBus:
        """The bus connection, (re)made when missing or lost, subscribed to unit changes."""
        if self._bus is not None and self._bus.connected:
            return self._bus
        async with self._connecting:
            if self._bus is not None and self._bus.connected:
                return self._bus
            from dbus_fast import BusType, Message, MessageType
            from dbus_fast.aio import MessageBus
            from dbus_fast.errors import DBusError

            bus = MessageBus(bus_address=self._settings.bus_address, bus_type=BusType.SYSTEM)
            rule = (
                f"type='signal',sender='{_SYSTEMD}',interface='{_PROPERTIES}',"
                "member='PropertiesChanged',path_namespace='/org/freedesktop/systemd1/unit'"
            )
            async with asyncio.timeout(self._settings.call_timeout):
                await bus.connect()
                bus.add_message_handler(self._on_message)
                for reply in (
                    await bus.call(
                        Message(
                            destination="org.freedesktop.DBus",
                            path="/org/freedesktop/DBus",
                            interface="org.freedesktop.DBus",
                            member="AddMatch",
                            signature="s",
                            body=[rule],
                        )
                    ),
                    # systemd only sends unit signals to clients that subscribed.
                    await bus.call(
                        Message(
                            destination=_SYSTEMD,
                            path=_MANAGER_PATH,
                            interface=_MANAGER,
                            member="Subscribe",
                        )
                    ),
                ):
                    if reply.message_type == MessageType.ERROR:
                        bus.disconnect()
                        raise DBusError(
                            reply.error_name or "org.freedesktop.DBus.Error.Failed",
                            str(reply.body[0] if reply.body else ""),
                        )
            self._bus = bus
            return bus

    def _on_message(self, message: Any) -> None:
        """Keep the last exit of a group's worker as systemd reports it (it forgets it when
        it restarts the worker)."""
        if message.member != "PropertiesChanged" or message.path not in self._paths:
            return
        body = message.body
        if len(body) < 2 or body[0] != _SERVICE or not isinstance(body[1], dict):
            return
        changed = {name: variant.value for name, variant in body[1].items()}
        key = self._paths[message.path]
        info = self._workers.get(key)
        if info is None:
            return
        exit_code = _exit_code(changed.get("ExecMainCode"), changed.get("ExecMainStatus"))
        if exit_code is not None:
            info.last_exit = exit_code
        if isinstance(changed.get("NRestarts"), int):
            info.restarts = changed["NRestarts"]
        if "MainPID" in changed:
            info.pid = changed["MainPID"] or None


def _exit_code(code: Any, status: Any) -> int | None:
    """The last exit as WorkerInfo tells it (negative: the signal that killed it)."""
    if not isinstance(code, int) or not isinstance(status, int):
        return None
    if code == _CLD_EXITED:
        return status
    if code in (_CLD_KILLED, _CLD_DUMPED):
        return -status
    return None


@contextlib.contextmanager
def _map_errors(action: str) -> Iterator[None]:
    """Turn D-Bus and connection failures into `DriverError`s."""
    from dbus_fast.errors import AuthError, DBusError

    try:
        yield
    except base.DriverError:
        raise
    except DBusError as exc:
        message = f"{action}: systemd refused: {exc.type}: {exc.text}"
        if exc.type in _UNAVAILABLE_ERRORS:
            raise base.DriverUnavailable(message) from exc
        raise base.DriverRejected(message) from exc
    except (OSError, EOFError, AuthError, TimeoutError) as exc:
        raise base.DriverUnavailable(f"{action}: systemd's bus is unreachable: {exc!r}") from exc
