"""Fixtures of the driver tests: driver factories and the API-server double.

The Docker engine, its worker image and the host's interpreter mounted into containers come
from `tests.docker_engine` (a plugin of tests/conftest.py, shared with the cluster tests).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drivers import base
from tests.docker_engine import AMQP_URI, REPO, _unavailable


@pytest.fixture
def pool_name(request: pytest.FixtureRequest) -> str:
    """A pool name unique to the test (so tests never see each other's containers)."""
    return f"t-{request.node.name[:20].replace('_', '-').strip('-')}-{uuid.uuid4().hex[:8]}"


DriverFactory = Callable[..., Any]


@pytest.fixture
async def docker_driver(
    docker_host: str, worker_image: str, docker_client: Any, pool_name: str
) -> AsyncIterator[DriverFactory]:
    """Builds DockerDrivers of the test's pool; removes the pool's containers afterwards."""
    from drivers import docker as docker_driver_module

    made: list[Any] = []

    def make(*, pool: str = pool_name, amqp_uri: str = AMQP_URI, **settings: Any) -> Any:
        settings.setdefault("base_url", docker_host)
        settings.setdefault("image", worker_image)
        settings.setdefault("command", ["sleep", "3600"])
        settings.setdefault("stop_timeout", 1)
        driver = docker_driver_module.DockerDriver(
            base.PoolContext(pool=pool, amqp_uri=amqp_uri),
            docker_driver_module.DockerSettings(**settings),
        )
        made.append(driver)
        return driver

    yield make
    for driver in made:
        await driver.close()
    for container in docker_client.containers.list(
        all=True, filters={"label": [f"osrdyne.pool={pool_name}"]}
    ):
        container.remove(force=True)


@pytest.fixture
def k8s_api() -> Iterator[Any]:
    """A fresh API-server double (see k8s_double.py: no cluster runs here)."""
    from tests.drivers import k8s_double

    double = k8s_double.ApiServerDouble().start()
    yield double
    double.stop()


@pytest.fixture
async def k8s_driver(k8s_api: Any, pool_name: str) -> AsyncIterator[DriverFactory]:
    """Builds KubernetesDrivers of the test's pool, talking to the double."""
    from drivers import kubernetes as kubernetes_driver_module

    made: list[Any] = []

    def make(*, pool: str = pool_name, amqp_uri: str = AMQP_URI, **settings: Any) -> Any:
        settings.setdefault("host", k8s_api.url)
        settings.setdefault("namespace", "default")
        settings.setdefault("request_timeout", 10)
        driver = kubernetes_driver_module.KubernetesDriver(
            base.PoolContext(pool=pool, amqp_uri=amqp_uri),
            kubernetes_driver_module.KubernetesSettings.model_validate(settings),
        )
        made.append(driver)
        return driver

    yield make
    for driver in made:
        await driver.close()


# -- a real systemd (scripts/ensure_systemd.sh) --------------------------------------------

ENSURE_SYSTEMD = REPO / "scripts" / "ensure_systemd.sh"
SYSTEMD_PIDFILE = Path("/run/osrdyne-systemd/nspawn.pid")
WORKER_TEMPLATE = REPO / "deploy" / "systemd" / "osrdyne-worker@.service"


class SystemdHost:
    """The systemd of the test container: its bus address, its root on this host, and
    `systemctl` run inside it (nsenter into its PID 1's namespaces)."""

    def __init__(self, bus: str, root: Path, leader: int) -> None:
        self.bus = bus
        self.root = root
        self.leader = leader

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """`command` run inside the container (all its namespaces)."""
        return subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a", *command],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--no-pager", *args)


def _nspawn_running() -> bool:
    try:
        pid = int(SYSTEMD_PIDFILE.read_text())
        return Path(f"/proc/{pid}/comm").read_text().strip() == "systemd-nspawn"
    except (OSError, ValueError):
        return False


def unit_binds(paths: set[Path]) -> str:
    """The checkout and interpreter, bound read-only into a unit: the template's
    `PrivateTmp=yes` hides a checkout under /tmp (a CI clone), `ProtectHome` one under /root."""
    return "".join(f"BindReadOnlyPaths={path}\n" for path in sorted(paths))


@pytest.fixture(scope="session")
def systemd_host() -> Iterator[SystemdHost]:
    """A real systemd as PID 1 of a systemd-nspawn container (started once per session, and
    stopped at the end when this session started it), with the worker template of
    deploy/systemd installed, plus one test drop-in: ExecStart runs the echo worker with this
    interpreter, ProtectHome=read-only since that interpreter lives under /root, and the
    checkout and interpreter bound read-only (a checkout under /tmp is hidden by PrivateTmp)."""
    if os.geteuid() != 0:
        _unavailable("booting systemd in a container needs root")
    if shutil.which("nsenter") is None:
        _unavailable("nsenter (util-linux) is missing")
    started_here = not _nspawn_running()
    binds = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), REPO}
    command = ["bash", str(ENSURE_SYSTEMD)]
    for path in sorted(binds):
        command += ["--bind-ro", str(path)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        _unavailable("scripts/ensure_systemd.sh did not finish within 900 s")
    if done.returncode != 0:
        _unavailable(f"scripts/ensure_systemd.sh failed: {done.stderr[-2000:]}")
    found = dict(
        line.split("=", 1) for line in done.stdout.splitlines() if line.startswith("OSRDYNE_")
    )
    host = SystemdHost(
        found["OSRDYNE_SYSTEMD_BUS"],
        Path(found["OSRDYNE_SYSTEMD_ROOT"]),
        int(found["OSRDYNE_SYSTEMD_LEADER"]),
    )
    units = host.root / "etc" / "systemd" / "system"
    shutil.copy2(WORKER_TEMPLATE, units / WORKER_TEMPLATE.name)
    dropins = units / f"{WORKER_TEMPLATE.name}.d"
    dropins.mkdir(exist_ok=True)
    (dropins / "50-osrdyne-tests.conf").write_text(
        "[Service]\n"
        "ExecStart=\n"
        f"ExecStart={Path(sys.prefix) / 'bin' / 'python'} -m worker_sdk.examples.echo\n"
        "ProtectHome=read-only\n" + unit_binds(binds)
    )
    reload = host.systemctl("daemon-reload")
    assert reload.returncode == 0, reload.stderr
    yield host
    if started_here:
        subprocess.run(["bash", str(ENSURE_SYSTEMD), "stop"], capture_output=True, timeout=120)


@pytest.fixture
async def systemd_driver(
    systemd_host: SystemdHost, pool_name: str, repo: Path
) -> AsyncIterator[DriverFactory]:
    """Builds SystemdDrivers of the test's pool on the container's bus; stops every unit of
    the pool afterwards and checks none is left."""
    from drivers import systemd as systemd_driver_module

    made: list[Any] = []

    def make(*, pool: str = pool_name, amqp_uri: str = AMQP_URI, **settings: Any) -> Any:
        settings.setdefault("bus_address", systemd_host.bus)
        environment = {
            "PYTHONPATH": str(repo),
            "PYTHONDONTWRITEBYTECODE": "1",
            "WORKER_ACTIVITY_INTERVAL": "0.5",
            "WORKER_DRAIN_TIMEOUT": "2",
        }
        settings["environment"] = {**environment, **settings.get("environment", {})}
        driver = systemd_driver_module.SystemdDriver(
            base.PoolContext(pool=pool, amqp_uri=amqp_uri),
            systemd_driver_module.SystemdSettings(**settings),
        )
        made.append(driver)
        return driver

    yield make
    for driver in made:
        with contextlib.suppress(base.DriverError):  # a test's driver may have no bus
            for key in await driver.list():
                await driver.stop(key)
        await driver.close()
    # Whatever a failed test left behind: every unit of the pool goes, with its file.
    head = systemd_driver_module.escape(pool_name) + "-"
    systemd_host.systemctl("stop", f"osrdyne-worker@{head}*")
    systemd_host.systemctl("reset-failed", f"osrdyne-worker@{head}*")
    for path in Path("/run/osrdyne/workers").glob(f"{systemd_driver_module.file_stem(head)}*"):
        path.unlink(missing_ok=True)
