"""Fixtures of the driver tests: driver factories, and the API double for the kubernetes
driver's faults a real API server cannot give on demand (k8s_double.py).

The Docker engine, its worker image and the host's interpreter mounted into containers come
from `tests.docker_engine` (a plugin of tests/conftest.py, shared with the cluster tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drivers import base
from tests.docker_engine import AMQP_URI, REPO, _unavailable, remove_pool_containers


@pytest.fixture
def pool_name(request: pytest.FixtureRequest) -> str:
    """A pool name unique to the test (so tests never see each other's containers)."""
    return f"t-{request.node.name[:20].replace('_', '-').strip('-')}-{uuid.uuid4().hex[:8]}"


DriverFactory = Callable[..., Any]


#: The real echo worker's environment in a driver's workers: this checkout's code, quick
#: activity reports and drains.
ECHO_ENVIRONMENT = {
    "PYTHONPATH": str(REPO),
    "PYTHONDONTWRITEBYTECODE": "1",
    "WORKER_ACTIVITY_INTERVAL": "0.5",
    "WORKER_DRAIN_TIMEOUT": "2",
}


class Drivers:
    """Builds drivers of one kind for a test, with its defaults, and keeps them to close."""

    def __init__(
        self, driver: Callable[..., Any], model: Any, *, pool: str, **defaults: Any
    ) -> None:
        self.driver, self.model, self.pool, self.defaults = driver, model, pool, defaults
        self.made: list[Any] = []
        #: The pools drivers were built for (a test may name its own).
        self.pools: set[str] = set()

    def __call__(
        self, *, pool: str | None = None, amqp_uri: str = AMQP_URI, **settings: Any
    ) -> Any:
        context = base.PoolContext(pool=pool or self.pool, amqp_uri=amqp_uri)
        self.pools.add(context.pool)
        driver = self.driver(context, self.model.model_validate({**self.defaults, **settings}))
        self.made.append(driver)
        return driver

    async def close(self) -> None:
        for driver in self.made:
            await driver.close()


def remove_containers(docker_client: Any, pool: str) -> None:
    """Remove every container of `pool`, whatever state it is in."""
    remove_pool_containers(docker_client, pool)


@pytest.fixture
async def docker_driver(
    docker_host: str, worker_image: str, docker_client: Any, pool_name: str
) -> AsyncIterator[DriverFactory]:
    """Builds DockerDrivers of the test's pool (or of a pool it names); removes the
    containers of every pool it built drivers for afterwards."""
    from drivers import docker

    drivers = Drivers(
        docker.DockerDriver, docker.DockerSettings, pool=pool_name,
        base_url=docker_host, image=worker_image, command=["sleep", "3600"], stop_timeout=1,
    )  # fmt: skip
    yield drivers
    await drivers.close()
    for pool in {pool_name, *drivers.pools}:
        remove_containers(docker_client, pool)


@pytest.fixture
def echo_docker_driver(
    docker_driver: DriverFactory,
    amqp_uri: str,
    host_python: tuple[str, list[dict[str, Any]]],
    pool: str,
) -> DriverFactory:
    """Builds DockerDrivers of the test's broker pool whose containers run the real echo
    worker (the host's interpreter, mounted read-only into the worker image)."""
    python, mounts = host_python

    def make(**settings: Any) -> Any:
        return docker_driver(
            pool=pool,
            amqp_uri=amqp_uri,
            command=[python, "-m", "worker_sdk.examples.echo"],
            environment=ECHO_ENVIRONMENT,
            volumes=mounts,
            **settings,
        )

    return make


@pytest.fixture
async def run_controller(
    pool: str, tmp_path: Path, docker_client: Any
) -> AsyncIterator[Callable[[Any], Any]]:
    """Runs controllers of the test's pool on a given driver (leader awaited); stops them
    and removes the pool's containers afterwards."""
    from osrdyne.controller import Controller
    from tests.conftest import controller_settings

    tasks: list[tuple[Controller, asyncio.Task[None]]] = []

    async def run(driver: Any) -> tuple[Controller, asyncio.Task[None]]:
        controller = Controller(controller_settings(pool, tmp_path), driver=driver)
        task = asyncio.create_task(controller.run(), name=f"ctl {pool}")
        tasks.append((controller, task))
        await asyncio.wait_for(controller.wait_leader(), 30)
        return controller, task

    yield run
    for controller, task in tasks:
        controller.stop()
        if not task.done():
            await asyncio.wait_for(task, 60)
    remove_containers(docker_client, pool)


@pytest.fixture
def k8s_api() -> Iterator[Any]:
    """A fresh API double (k8s_double.py): for the faults a real API server cannot be made to
    give at a chosen moment; the driver runs on a real cluster in tests/kubernetes/."""
    from tests.drivers import k8s_double

    double = k8s_double.ApiServerDouble().start()
    yield double
    double.stop()


@pytest.fixture
async def k8s_driver(k8s_api: Any, pool_name: str) -> AsyncIterator[DriverFactory]:
    """Builds KubernetesDrivers of the test's pool, talking to the API double."""
    from drivers import kubernetes

    drivers = Drivers(
        kubernetes.KubernetesDriver, kubernetes.KubernetesSettings, pool=pool_name,
        host=k8s_api.url, namespace="default", request_timeout=10,
    )  # fmt: skip
    yield drivers
    await drivers.close()


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
    # The drop-in names this checkout's paths (interpreter, binds): a later run from another
    # checkout must not find it in the container's root.
    (dropins / "50-osrdyne-tests.conf").unlink(missing_ok=True)
    host.systemctl("daemon-reload")
    if started_here:
        subprocess.run(["bash", str(ENSURE_SYSTEMD), "stop"], capture_output=True, timeout=120)


@pytest.fixture
async def systemd_driver(systemd_host: SystemdHost, pool_name: str) -> AsyncIterator[DriverFactory]:
    """Builds SystemdDrivers of the test's pool on the container's bus; stops every unit of
    the pool afterwards and checks none is left."""
    from drivers import systemd as systemd_driver_module

    drivers = Drivers(
        systemd_driver_module.SystemdDriver,
        systemd_driver_module.SystemdSettings,
        pool=pool_name,
        bus_address=systemd_host.bus,
    )

    def make(**settings: Any) -> Any:
        settings["environment"] = {**ECHO_ENVIRONMENT, **settings.get("environment", {})}
        return drivers(**settings)

    yield make
    for driver in drivers.made:
        with contextlib.suppress(base.DriverError):  # a test's driver may have no bus
            for key in await driver.list():
                await driver.stop(key)
    await drivers.close()
    # Whatever a test left behind (it failed, or a controller stopped in the middle of a
    # start): every unit of each of its pools goes, with its file.
    for pool in {pool_name, *drivers.pools}:
        head = systemd_driver_module.escape(pool) + "-"
        systemd_host.systemctl("stop", f"osrdyne-worker@{head}*")
        systemd_host.systemctl("reset-failed", f"osrdyne-worker@{head}*")
        stem = systemd_driver_module.file_stem(head)
        for path in Path("/run/osrdyne/workers").glob(f"{stem}*"):
            path.unlink(missing_ok=True)


def listed_units(host: SystemdHost, pattern: str = "osrdyne-worker@*") -> set[str]:
    """The units systemd has loaded whose names match `pattern` (any state)."""
    done = host.systemctl("list-units", "--all", "--plain", "--no-legend", pattern)
    assert done.returncode == 0, done.stderr
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


@pytest.fixture
async def systemd_controller(
    pool: str,
    tmp_path: Path,
    systemd_host: SystemdHost,
    systemd_driver: DriverFactory,
    amqp_uri: str,
) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """Runs controllers of the test's broker pool whose workers are echo workers in units of
    the container's systemd (leader awaited): `environment` added to the workers', `systemd`
    to the driver's section, the other keywords to the controller's settings (`groups`,
    `scaling`, ...). Stops them afterwards; the units outlive a controller, so the
    `systemd_driver` clean-up stops those of the pool."""
    from osrdyne.controller import Controller
    from tests.conftest import controller_settings

    systemd_driver(pool=pool)  # a driver of the pool, for the clean-up to find its units
    running: list[tuple[Any, asyncio.Task[None]]] = []

    async def run(
        *,
        environment: dict[str, str] | None = None,
        systemd: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> Any:
        section = {
            "bus_address": systemd_host.bus,
            "environment": {**ECHO_ENVIRONMENT, **(environment or {})},
            **(systemd or {}),
        }
        settings = controller_settings(
            pool,
            tmp_path,
            amqp={"worker_url": amqp_uri},
            driver={"kind": "systemd", "systemd": section},
            **overrides,
        )
        controller = Controller(settings)
        task = asyncio.create_task(controller.run(), name=f"controller {pool}")
        running.append((controller, task))
        await asyncio.wait_for(controller.wait_leader(), 30)
        return controller

    yield run
    for controller, task in running:
        controller.stop()
        await asyncio.wait_for(task, 60)
