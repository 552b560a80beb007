"""The systemd driver, against a real systemd: PID 1 of a systemd-nspawn container that
`scripts/ensure_systemd.sh` boots (no systemd runs as PID 1 on these machines), reached on
its system bus from this host. Workers are units of deploy/systemd/osrdyne-worker@.service
(one test drop-in: this interpreter as ExecStart) and reach the broker on the shared network.

The instance names are checked against the real `systemd-escape`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers import base, names, registry
from drivers import systemd as sd
from drivers.systemd import _environment as sd_environment
from drivers.systemd import _names as sd_names
from osrdyne import Client
from osrdyne.exceptions import PoolNotFound
from tests import waiting
from tests.drivers.conftest import (
    SystemdHost,
    listed_units,
    unit_binds,
)

pytestmark = pytest.mark.timeout(300)

HOSTILE_KEYS = [
    "a",
    "infra/42",
    "Infra/42 é — spaces & ünïcode",
    '"$HOME" ${WORKER_POOL} $$ `id` \\ \' %i %% *?[x]',
    "-leading-dash",
    ".hidden",
    "../../etc/passwd",
    "a-b",
    "ax2db",
    "a\\x2db",
    "0xff",
    "key with trailing space ",
    "k" * 255,
    "é" * 127,
    "x/" * 127,
]

needs_systemd_escape = pytest.mark.skipif(
    shutil.which("systemd-escape") is None, reason="systemd-escape (package systemd) is missing"
)


def systemd_escape(*args: str) -> str:
    """What `systemd-escape ARGS... -- TEXT` prints for one TEXT (its last argument)."""
    done = subprocess.run(["systemd-escape", *args], capture_output=True, check=True, timeout=30)
    out: str = done.stdout.decode("utf-8", "surrogateescape")
    return out.removesuffix("\n")


# -- names ---------------------------------------------------------------------------------


@needs_systemd_escape
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"], min_codepoint=1), min_size=1))
@pytest.mark.slow
def test_escape_is_systemd_escape_and_round_trips(text: str) -> None:
    escaped = systemd_escape("--", text)
    assert sd.escape(text) == escaped
    assert sd.unescape(escaped) == text
    back = systemd_escape("--unescape", "--", escaped)
    assert back == text


@needs_systemd_escape
def test_readable_instances_are_systemd_escape_of_pool_and_key() -> None:
    limit = sd.MAX_UNIT_NAME - len("osrdyne-worker@.service")
    for key in ["a", "infra/42", "Infra/42 é — spaces & ünïcode", ".hidden", "a-b"]:
        instance = sd.instance_name("core", key, limit=limit)
        unit = systemd_escape("--template=osrdyne-worker@.service", "--", f"core/{key}")
        assert f"osrdyne-worker@{instance}.service" == unit
        unescaped = systemd_escape("--unescape", "--", instance)
        assert unescaped == f"core/{key}"


def test_long_and_glob_ambiguous_keys_are_hashed() -> None:
    limit = sd.MAX_UNIT_NAME - len("osrdyne-worker@.service")
    for key in ["k" * 255, "é" * 127, "0xff", "ax2db", "x/" * 127]:
        instance = sd.instance_name("core", key, limit=limit)
        assert sd.HASH_MARK in instance and instance.endswith(sd.key_hash(key)), instance
        assert len(instance) <= limit
        assert (
            sd.unescape(instance.removeprefix("core-"), leading=False) is None
        )  # never read as a key
    # 'a-b' and 'ax2db' would open the same file ('ax2db.env') if both were readable.
    assert sd.instance_name("core", "a-b", limit=limit) == "core-a\\x2db"
    assert sd.file_stem(sd.instance_name("core", "a-b", limit=limit)) != sd.file_stem(
        sd.instance_name("core", "ax2db", limit=limit)
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.sampled_from(list("ax2dbf0/-\\.é ")) | st.characters(min_codepoint=32),
            min_size=1,
            max_size=80,
        ),
        min_size=2,
        max_size=6,
        unique=True,
    )
)
def test_distinct_keys_get_distinct_units_and_environment_files(keys: list[str]) -> None:
    limit = sd.MAX_UNIT_NAME - len("osrdyne-worker@.service")
    instances = {sd.instance_name("core", key, limit=limit) for key in keys}
    assert len(instances) == len(keys)
    assert len({sd.file_stem(i) for i in instances}) == len(keys)
    for instance in instances:
        assert len(instance) <= limit
        assert sd_names.UNIT_NAME_CHARS.match(instance)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(
                alphabet=st.sampled_from(list("ax2dbf0/-\\.é ")) | st.characters(min_codepoint=32),
                min_size=1,
                max_size=120,
            ),
            st.sampled_from([0, 1, 2, 9, 10, 99, 100, sd_names.MAX_REPLICAS - 1]),
        ),
        min_size=2,
        max_size=6,
        unique=True,
    )
)
def test_replicas_get_distinct_bounded_units_and_files(units: list[tuple[str, int]]) -> None:
    """Every replica of every key: its own instance and environment file, within the limit,
    and read back as that replica of an instance of its key's group."""
    limit = sd.MAX_UNIT_NAME - len("osrdyne-worker@.service")
    instances = {sd_names.replica_instance("core", k, r, limit=limit) for k, r in units}
    assert len(instances) == len(units)
    assert len({sd.file_stem(i) for i in instances}) == len(units)
    for key, replica in units:
        instance = sd_names.replica_instance("core", key, replica, limit=limit)
        assert len(instance) <= limit and sd_names.UNIT_NAME_CHARS.match(instance)
        first, found = sd_names.split_replica(instance)
        assert found == replica
        assert first == sd_names.instance_name(
            "core", key, limit=limit - bool(replica) * sd_names.REPLICA_ROOM
        )
        if replica:
            pattern = sd_names.replicas_glob("core", key, limit=limit)
            assert fnmatch.fnmatchcase(instance, pattern)


def test_replica_zero_keeps_the_name_of_a_group_of_one_unit() -> None:
    """Units started before groups had several keep their names (a new controller adopts
    them); the others carry their replica after the hash mark."""
    limit = sd.MAX_UNIT_NAME - len("osrdyne-worker@.service")
    for key in HOSTILE_KEYS:
        assert sd_names.replica_instance("core", key, 0, limit=limit) == sd.instance_name(
            "core", key, limit=limit
        )
    assert sd_names.replica_instance("core", "hot", 3, limit=limit) == "core-hot\\x2f3"
    for replica in (-1, sd_names.MAX_REPLICAS):
        with pytest.raises(ValueError, match="replica"):
            sd_names.replica_instance("core", "hot", replica, limit=limit)


def test_hostile_keys_get_distinct_valid_names() -> None:
    limit = sd.MAX_UNIT_NAME - len("osrdyne-worker@.service")
    instances = [sd.instance_name("core", key, limit=limit) for key in HOSTILE_KEYS]
    assert len(set(instances)) == len(HOSTILE_KEYS)
    assert len({sd.file_stem(i) for i in instances}) == len(HOSTILE_KEYS)
    for instance in instances:
        assert sd_names.UNIT_NAME_CHARS.match(instance) and "/" not in sd.file_stem(instance)
        assert not sd.file_stem(instance).startswith(".")


def test_pools_that_cannot_name_units_are_refused() -> None:
    context = base.PoolContext(pool="box2d", amqp_uri="amqp://localhost")
    with pytest.raises(base.DriverConfigurationError, match="hex digits"):
        sd.SystemdDriver(context, sd.SystemdSettings())
    context = base.PoolContext(pool="p-" * 60, amqp_uri="amqp://localhost")
    with pytest.raises(base.DriverConfigurationError, match="too long"):
        sd.SystemdDriver(context, sd.SystemdSettings())


@pytest.mark.parametrize(
    "options",
    [
        {"bus_address": "tcp:host=10.0.0.1,port=1"},
        {"bus_address": "unix:path=relative"},
        {"bus_address": "unix:path=/a;unix:path=/b"},
        {"template": "osrdyne-worker.service"},
        {"template": "../evil@.service"},
        {"template": "a@b@.service"},
        {"environment_directory": "relative/dir"},
        {"environment_directory": "/run/../etc"},
        {"environment": {"BAD NAME": "x"}},
        {"environment": {"X": "line\nbreak"}},
        {"environment": {"X": "\ufffe"}},
        {"max_groups": 0},
        {"max_units": 0},
        {"workers": 0},
        {"workers": 10000},
        {"workers": 3, "max_units": 2},
        {"unknown": 1},
    ],
)
def test_settings_refuse_hostile_values(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        registry.parse_sections({"systemd": options})


def test_a_bad_unit_cap_is_refused_with_the_option_named() -> None:
    with pytest.raises(ValueError, match=r"max_units \(2\) is below workers \(3\)"):
        registry.parse_sections({"systemd": {"workers": 3, "max_units": 2}})


def test_capacity_is_the_groups_the_caps_leave_room_for() -> None:
    context = base.PoolContext(pool="core", amqp_uri="amqp://localhost")
    assert sd.SystemdDriver(context, sd.SystemdSettings()).capacity() is None
    assert sd.SystemdDriver(context, sd.SystemdSettings(max_groups=4)).capacity() == 4
    units = sd.SystemdSettings(workers=2, max_units=7)
    assert sd.SystemdDriver(context, units).capacity() == 3
    both = sd.SystemdSettings(workers=2, max_units=7, max_groups=2)
    assert sd.SystemdDriver(context, both).capacity() == 2


def test_registered_and_its_defaults_work() -> None:
    assert registry.KINDS["systemd"].settings is sd.SystemdSettings
    driver = registry.make_driver(
        "systemd", {}, base.PoolContext(pool="core", amqp_uri="amqp://localhost")
    )
    assert isinstance(driver, sd.SystemdDriver)
    for protocol in (base.Describes, base.Upgrades, base.Capacity, base.Sizes):
        assert isinstance(driver, protocol), protocol


# -- against the real systemd ------------------------------------------------------------


#: This module's waits: their bound, and their pace (a poll may run systemctl in the container).
eventually = functools.partial(waiting.eventually, timeout=60, interval=0.2)


async def test_start_list_describe_stop_with_hostile_keys(
    systemd_driver: Any, systemd_host: SystemdHost, pool_name: str
) -> None:
    driver = systemd_driver()
    keys = ['"$HOME" ${WORKER_POOL} `id` \\ \'', "0xff", "k" * 255]
    # Started at once (as the group loop does), then again: idempotent.
    await asyncio.gather(*(driver.start(key) for key in keys))
    await asyncio.gather(*(driver.start(key) for key in keys))
    assert await driver.list() == set(keys)
    assert driver.outdated() == set()
    units = listed_units(systemd_host)
    files = set()
    for key in keys:
        unit = driver.unit_name(key)
        assert unit in units
        assert len(unit) <= sd.MAX_UNIT_NAME
        path = driver.environment_file(key)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        variables = sd_environment.read_environment(path)
        assert variables is not None and variables["WORKER_KEY"] == key
        assert variables["WORKER_POOL"] == pool_name
        files.add(path)
        # The unit's own environment (read by systemd from the file) holds exactly this key.
        environ = await worker_environ(systemd_host, unit)
        assert environ["WORKER_KEY"] == key
        assert environ["WORKER_ID"] == names.object_name(pool_name, key)
    # One file per instance, and no file holds another group's key.
    assert len(files) == len(keys)
    for path in files:
        text = path.read_text()
        assert sum(sd_environment.quote(k) in text for k in keys) == 1
    described = driver.describe()
    assert set(described) == set(keys)
    for key, (info,) in described.items():
        assert info.name == driver.unit_name(key)
        assert info.restarts == 0

    # A fresh driver (a restarted controller) adopts the units, hashed names included.
    other = systemd_driver()
    assert await other.list() == set(keys)

    await asyncio.gather(*(driver.stop(key) for key in keys))
    await asyncio.gather(*(driver.stop(key) for key in keys))  # idempotent
    assert not any(driver.environment_file(key).exists() for key in keys)
    assert await driver.list() == set()
    await eventually(
        lambda: not any(driver.unit_name(k) in listed_units(systemd_host) for k in keys),
        what="the stopped units to go",
    )


def _main_pid(host: SystemdHost, unit: str) -> int:
    done = host.systemctl("show", "-p", "MainPID", "--value", unit)
    return int(done.stdout.strip() or 0)


def _environ(host: SystemdHost, pid: int) -> dict[str, str]:
    """The environment of process `pid` of the container (its own pid namespace)."""
    done = subprocess.run(
        ["nsenter", "-t", str(host.leader), "-a", "cat", f"/proc/{pid}/environ"],
        capture_output=True,
        timeout=30,
    )
    pairs = [item.split(b"=", 1) for item in done.stdout.split(b"\0") if b"=" in item]
    return {k.decode(): v.decode() for k, v in pairs}


async def worker_environ(host: SystemdHost, unit: str, *, other_than: int = 0) -> dict[str, str]:
    """The environment of the unit's worker, once it runs (a main process that has not yet
    called exec still shows systemd's own environment), and is not process `other_than`."""

    def read() -> dict[str, str] | None:
        pid = _main_pid(host, unit)
        if not pid or pid == other_than:
            return None
        environ = _environ(host, pid)
        return {**environ, "PID": str(pid)} if "WORKER_KEY" in environ else None

    found: dict[str, str] = await eventually(read, what=f"the worker of {unit}")
    return found


async def test_a_group_runs_one_unit_per_worker_and_shrinks_from_the_highest(
    systemd_driver: Any, systemd_host: SystemdHost
) -> None:
    """`Sizes` on the real systemd: a group of three is three units of its key, each with its
    file and worker id; `max_units` bounds the growth; a fresh driver (a restarted
    controller) adopts the group at its size; shrinking stops the highest replicas, and
    stopping the group stops every one of them."""
    driver = systemd_driver(max_units=4)
    hot, hashed = "hot", "k" * 255
    await asyncio.gather(driver.start(hot), driver.start(hashed))
    await driver.resize("absent", 3)  # no group: nothing
    assert await driver.list() == {hot, hashed}
    assert driver.sizes() == {hot: 1, hashed: 1}

    await driver.resize(hot, 3)
    await driver.resize(hashed, 5)  # max_units leaves it no room
    assert driver.sizes() == {hot: 3, hashed: 1}
    assert driver.capacity() == 2  # the groups there are: no room for a new key
    assert await driver.list() == {hot, hashed} and driver.outdated() == set()
    units = listed_units(systemd_host)
    assert {driver.unit_name(hot, r) for r in range(3)} <= units
    assert driver.unit_name(hashed, 1) not in units
    described = driver.describe()[hot]
    assert [info.name for info in described] == [driver.unit_name(hot, r) for r in range(3)]
    assert len({info.worker_id for info in described}) == 3
    for replica, info in enumerate(described):
        assert len(info.name or "") <= sd.MAX_UNIT_NAME
        environ = await worker_environ(systemd_host, driver.unit_name(hot, replica))
        assert (environ["WORKER_KEY"], environ["WORKER_ID"]) == (hot, info.worker_id)
        assert info.worker_id == driver.worker_id(hot, replica)

    adopting = systemd_driver(max_units=4)
    assert await adopting.list() == {hot, hashed}
    assert adopting.sizes() == {hot: 3, hashed: 1} and adopting.outdated() == set()

    await driver.resize(hot, 2)
    assert driver.unit_name(hot, 2) not in listed_units(systemd_host)
    assert not driver.environment_file(hot, 2).exists()
    assert {driver.unit_name(hot, r) for r in range(2)} <= listed_units(systemd_host)
    await driver.resize(hashed, 2)  # room again
    assert await driver.list() == {hot, hashed} and driver.outdated() == set()
    assert driver.sizes() == {hot: 2, hashed: 2}
    assert [len(workers) for workers in map(driver.describe().get, (hot, hashed))] == [2, 2]

    await asyncio.gather(driver.stop(hot), driver.stop(hashed))
    await driver.resize(hot, 2)  # a stopped group is not brought back by a late resize
    assert driver.sizes() == {}
    assert await driver.list() == set()
    for key in (hot, hashed):
        assert not any(driver.environment_file(key, r).exists() for r in range(3))
    await eventually(
        lambda: (
            not {driver.unit_name(k, r) for k in (hot, hashed) for r in range(3)}
            & listed_units(systemd_host)
        ),
        what="the stopped units to go",
    )


async def test_an_environment_file_without_its_unit_is_removed(
    systemd_driver: Any, pool_name: str
) -> None:
    """A controller that died between writing a group's file and starting its unit leaves
    the file (with the broker URI in it): the next listing removes it, and only it."""
    driver = systemd_driver()
    await driver.start("kept")
    driver._write_environment("orphan")
    orphan = driver.environment_file("orphan")
    os.utime(orphan, (orphan.stat().st_atime - 60, orphan.stat().st_mtime - 60))
    other_pool = systemd_driver(pool=pool_name + "x")  # another pool's file is not ours
    other_pool._write_environment("orphan")
    other = other_pool.environment_file("orphan")
    os.utime(other, (other.stat().st_atime - 60, other.stat().st_mtime - 60))
    assert await driver.list() == {"kept"}
    assert not orphan.exists()
    assert driver.environment_file("kept").exists()
    assert other.exists()
    other.unlink()


async def test_a_killed_worker_is_restarted_by_systemd_and_counted(
    systemd_driver: Any, systemd_host: SystemdHost
) -> None:
    driver = systemd_driver()
    key = "crash/me"
    await driver.start(key)
    unit = driver.unit_name(key)
    first = await eventually(lambda: _main_pid(systemd_host, unit), what="the worker's process")
    await driver.list()
    killed = systemd_host.systemctl("kill", "--kill-whom=main", "--signal=SIGKILL", unit)
    assert killed.returncode == 0, killed.stderr

    async def restarted() -> base.WorkerInfo | None:
        await driver.list()
        (info,) = driver.describe().get(key, (None,))
        return info if info is not None and info.restarts >= 1 and info.pid else None

    info = await eventually(restarted, what="systemd to restart the worker")
    assert info.restarts == 1
    assert info.last_exit == -9  # SIGKILL, as systemd reported it
    assert info.pid != first
    assert await driver.list() == {key}
    assert driver.outdated() == set()


async def test_a_new_version_restarts_the_unit_with_its_new_environment(
    systemd_driver: Any, systemd_host: SystemdHost
) -> None:
    key = "upgrade"
    old = systemd_driver(environment={"FLAVOUR": "old"})
    await old.start(key)
    unit = old.unit_name(key)
    first = await eventually(lambda: _main_pid(systemd_host, unit), what="the worker's process")
    new = systemd_driver(environment={"FLAVOUR": "new"})
    assert new.version != old.version
    assert await new.list() == {key}
    assert new.outdated() == {key}
    await new.start(key)
    environ = await worker_environ(systemd_host, unit, other_than=first)
    assert environ["FLAVOUR"] == "new"
    assert await new.list() == {key}
    assert new.outdated() == set()
    assert await old.list() == {key} and old.outdated() == {key}


async def test_a_crash_loop_ends_failed_and_is_started_again_after_the_delay(
    systemd_driver: Any, systemd_host: SystemdHost
) -> None:
    """A worker that cannot even start (PYTHONHOME pointing nowhere: exit 1 at once) is
    restarted by systemd until the template's start limit, then left failed; the driver
    still lists the group, tells its last exit, and asks for a new start (outdated) only once
    it has been failed for `failed_restart_delay`."""
    key = "crash-loop"
    patient = systemd_driver(environment={"PYTHONHOME": "/nonexistent"})
    await patient.start(key)
    unit = patient.unit_name(key)

    def failed() -> bool:
        done = systemd_host.systemctl("show", "-p", "ActiveState", "--value", unit)
        return done.stdout.strip() == "failed"

    await eventually(failed, what="systemd to give up on the crash loop")
    assert await patient.list() == {key}
    ((info,),) = patient.describe().values()
    assert info.last_exit == 1
    assert info.restarts >= 1
    waiting = systemd_driver(environment={"PYTHONHOME": "/nonexistent"}, failed_restart_delay=3600)
    assert await waiting.list() == {key}
    assert waiting.outdated() == set()
    eager = systemd_driver(environment={"PYTHONHOME": "/nonexistent"}, failed_restart_delay=0)
    assert await eager.list() == {key}
    assert eager.outdated() == {key}
    await eager.start(key)  # resets the failed unit and starts it again
    assert not failed()
    await eager.stop(key)
    assert not eager.environment_file(key).exists()


async def test_failures_are_answered(systemd_driver: Any, tmp_path: Path) -> None:
    missing = systemd_driver(template="osrdyne-missing@.service")
    with pytest.raises(base.DriverRejected, match="osrdyne-missing@"):
        await missing.start("k")
    assert not missing.environment_file("k").exists()  # a start that failed leaves no file
    nowhere = systemd_driver(bus_address=f"unix:path={tmp_path}/no-bus")
    with pytest.raises(base.DriverUnavailable):
        await nowhere.list()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(base.DriverRejected, match="writable by it alone"):
        await systemd_driver(environment_directory=str(shared)).start("k")
    with pytest.raises(base.DriverRejected, match="noncharacter"):
        await systemd_driver().start("bad\ufdd0key")
    with pytest.raises(base.DriverRejected, match="empty"):
        await systemd_driver().start("")


# -- end to end ----------------------------------------------------------------------------


async def test_a_controller_with_the_systemd_driver_answers_two_keys(
    pool: str, client: Client, systemd_host: SystemdHost, systemd_controller: Any
) -> None:
    """Done-when of issue 21: two keys answered by units of the real systemd, shown by
    `systemctl list-units 'osrdyne-worker@*'`, gone once their groups stop."""
    keys = ["Infra/42 é — spaces & ünïcode", "second"]
    controller = await systemd_controller(groups={"unbind_delay": 3, "stop_delay": 3})
    driver = controller.driver
    for key in keys:
        answer = await client.call(pool, key, b"hi " + key.encode(), timeout=90)
        assert answer.ok, answer
        assert answer.body == b"hi " + key.encode()
        who = json.loads((await client.call(pool, key, path="whoami", timeout=60)).body)
        assert who["key"] == key
    units = listed_units(systemd_host)
    assert {driver.unit_name(k) for k in keys} <= units

    # Idle groups stop (two stages): their units and environment files go.
    def gone() -> bool:
        if {driver.unit_name(k) for k in keys} & listed_units(systemd_host):
            return False
        return not any(driver.environment_file(k).exists() for k in keys)

    await eventually(gone, what="the idle groups' units and files to go", timeout=120)


async def test_a_unit_that_cannot_start_is_answered_with_the_reason_then_serves_again(
    pool: str, client: Client, systemd_host: SystemdHost, systemd_controller: Any
) -> None:
    """Issue 35 on the systemd driver: the echo worker needs a file that is missing in the
    container, so each start of its unit reports why and exits; the caller is answered
    `start_failed` with that reason instead of at its deadline. The file created in the
    container, the next start serves, and the group is no longer failing."""
    required = f"/run/osrdyne-needed-{pool}"
    controller = await systemd_controller(
        groups={"failing_after": 2},
        environment={"ECHO_REQUIRE_FILE": required},
        systemd={"failed_restart_delay": 1},
    )
    try:
        answer = await client.call(pool, "needs-file", b"x", timeout=120)
        assert answer.status == "start_failed", answer
        assert "FileNotFoundError" in answer.json()["details"]["reason"]
        assert controller.status().groups["needs-file"].failing_reason is not None

        assert systemd_host.run("touch", required).returncode == 0

        async def served() -> Any:
            again = await client.call(pool, "needs-file", b"again", timeout=60)
            return again if again.ok else None

        assert (await eventually(served, what="the group serves", timeout=180)).body == b"again"
        await eventually(
            lambda: controller.status().groups["needs-file"].failing_reason is None,
            what="the group no longer failing",
        )
    finally:
        systemd_host.run("rm", "-f", required)


async def test_the_controller_unit_runs_a_pool_on_systemd(
    pool: str,
    client: Client,
    systemd_host: SystemdHost,
    systemd_driver: Any,
    amqp_uri: str,
    repo: Path,
) -> None:
    """deploy/systemd/osrdyne@.service itself, in the container, as its user `osrdyne`, with
    `kind = "systemd"` on the container's own system bus: the polkit rule of deploy/systemd
    gives it the worker units (and only them). One test drop-in: this interpreter and
    checkout as ExecStart, ProtectHome=read-only since the interpreter lives under /root."""
    driver = systemd_driver(pool=pool)  # its clean-up stops what the controller started
    etc = systemd_host.root / "etc"
    shutil.copy2(
        repo / "deploy" / "systemd" / "osrdyne-polkit.rules",
        etc / "polkit-1" / "rules.d" / "50-osrdyne.rules",
    )
    if systemd_host.run("id", "osrdyne").returncode != 0:
        made = systemd_host.run(
            "useradd", "--system", "--user-group", "--no-create-home", "osrdyne"
        )
        assert made.returncode == 0, made.stderr
    uid = int(systemd_host.run("id", "-u", "osrdyne").stdout)
    gid = int(systemd_host.run("id", "-g", "osrdyne").stdout)
    workers = Path("/run/osrdyne/workers")  # the same directory inside (a bind mount)
    os.chown(workers, uid, gid)  # as deploy/systemd/osrdyne-tmpfiles.conf makes it
    units = etc / "systemd" / "system"
    shutil.copy2(repo / "deploy" / "systemd" / "osrdyne@.service", units / "osrdyne@.service")
    dropins = units / "osrdyne@.service.d"
    dropins.mkdir(exist_ok=True)
    (dropins / "50-osrdyne-tests.conf").write_text(
        "[Service]\n"
        "ProtectHome=read-only\n"
        f"Environment=PYTHONPATH={repo} PYTHONDONTWRITEBYTECODE=1\n"
        "ExecStart=\n"
        f"ExecStart={Path(sys.prefix) / 'bin' / 'python'} -m osrdyne run "
        "--config /etc/osrdyne/%i.toml\n"
        + unit_binds({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), repo})
    )
    environment = {
        "PYTHONPATH": str(repo),
        "PYTHONDONTWRITEBYTECODE": "1",
        "WORKER_ACTIVITY_INTERVAL": "0.5",
    }
    config = {
        "pool": pool,
        "amqp": {"url": amqp_uri},
        "api": {"enabled": False},
        "driver": {"kind": "systemd", "systemd": {"environment": environment}},
    }
    (etc / "osrdyne").mkdir(exist_ok=True)
    (etc / "osrdyne" / f"{pool}.toml").write_text(tomli_w.dumps(config))
    unit = f"osrdyne@{pool}.service"
    assert systemd_host.systemctl("daemon-reload").returncode == 0
    started = systemd_host.systemctl("start", unit)
    assert started.returncode == 0, started.stderr
    try:
        key = "through/the controller unit"

        async def declared() -> bool:
            try:
                await client.call(pool, "ping", path="whoami", timeout=120)
            except PoolNotFound:
                return False
            return True

        await eventually(declared, what="the controller to declare its pool", timeout=120)
        answer = await client.call(pool, key, b"hello", timeout=120)
        assert answer.ok, answer
        assert answer.body == b"hello"
        assert driver.unit_name(key) in listed_units(systemd_host)
        shown = systemd_host.systemctl("show", "-p", "ActiveState,User", unit)
        assert shown.stdout.split() == ["User=osrdyne", "ActiveState=active"], shown.stdout
        # The file was written by the controller's user, for systemd (root) to read.
        written = driver.environment_file(key).stat()
        assert (written.st_uid, stat.S_IMODE(written.st_mode)) == (uid, 0o600)
    finally:
        stopped = systemd_host.systemctl("stop", unit)
        log = systemd_host.systemctl("status", "--lines=30", unit)
        (etc / "osrdyne" / f"{pool}.toml").unlink()
        # The test's drop-in names this checkout's paths: none of it outlives the test.
        (dropins / "50-osrdyne-tests.conf").unlink()
        systemd_host.systemctl("daemon-reload")
        os.chown(workers, 0, 0)
        assert stopped.returncode == 0, log.stdout
    # The worker's unit outlives the controller (the next one adopts it).
    assert driver.unit_name(key) in listed_units(systemd_host)


def test_worker_template_is_hardened_and_reads_its_instance_file() -> None:
    template = Path(__file__).resolve().parents[2] / "deploy/systemd/osrdyne-worker@.service"
    text = template.read_text()
    for line in [
        "EnvironmentFile=/run/osrdyne/workers/%i.env",
        "Restart=on-failure",
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
    ]:
        assert line in text.splitlines(), line
    assert sd.SystemdSettings().environment_directory == "/run/osrdyne/workers"
