"""Fixtures of the driver tests: a real Docker engine, a test image, the API-server double.

The Docker engine is osrdyne's own (`scripts/ensure_dockerd.sh`: vfs storage, no bridge, no
iptables). No registry is reachable, so the worker image is `docker import`ed from a
busybox-static root filesystem, and containers run the host's own interpreter and virtualenv
through read-only bind mounts, with `network_mode=host` to reach the local broker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drivers import base

REPO = Path(__file__).resolve().parents[2]
ENSURE_DOCKERD = REPO / "scripts" / "ensure_dockerd.sh"
TEST_IMAGE = "osrdyne-test-worker:busybox"
BUSYBOX = Path("/bin/busybox")
AMQP_URI = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def _unavailable(reason: str) -> None:
    """Fail in CI (the engine must work there), skip with the reason elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_host() -> str:
    """The URL of a running Docker engine of our own, started if needed."""
    if os.geteuid() != 0:
        _unavailable("starting dockerd needs root")
    try:
        done = subprocess.run(
            ["bash", str(ENSURE_DOCKERD)], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        _unavailable("scripts/ensure_dockerd.sh did not finish within 600 s")
    if done.returncode != 0:
        _unavailable(f"scripts/ensure_dockerd.sh failed: {done.stderr[-2000:]}")
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("DOCKER_HOST="), done.stdout
    return line.removeprefix("DOCKER_HOST=")


@pytest.fixture(scope="session")
def docker_client(docker_host: str) -> Iterator[Any]:
    import docker

    client = docker.DockerClient(base_url=docker_host, version="auto", timeout=60)
    yield client
    client.close()


def _ensure_busybox_static() -> None:
    ok = subprocess.run(["dpkg", "-s", "busybox-static"], capture_output=True).returncode == 0
    if not ok:
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "busybox-static"],
        ):
            subprocess.run(
                command,
                check=True,
                capture_output=True,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                timeout=600,
            )


@pytest.fixture(scope="session")
def worker_image(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A busybox image (made with `docker import`) to run the host's interpreter in."""
    import docker.errors

    try:
        docker_client.images.get(TEST_IMAGE)
        return TEST_IMAGE
    except docker.errors.ImageNotFound:
        pass
    try:
        _ensure_busybox_static()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"cannot install busybox-static: {exc}")
    root = tmp_path_factory.mktemp("rootfs")
    (root / "bin").mkdir()
    (root / "tmp").mkdir()
    (root / "etc").mkdir()
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for applet in ("sh", "sleep", "cat", "env", "ls", "echo", "true"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    tarball = root.parent / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        for entry in sorted(root.iterdir()):
            tar.add(entry, arcname=entry.name)
    repository, tag = TEST_IMAGE.split(":")
    docker_client.api.import_image_from_file(str(tarball), repository=repository, tag=tag)
    return TEST_IMAGE


@pytest.fixture(scope="session")
def amqp_uri() -> str:
    return AMQP_URI


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def host_python() -> tuple[str, list[dict[str, Any]]]:
    """The interpreter to run in containers, and the read-only mounts it needs."""
    real_python = Path(sys.executable).resolve()
    sources = {Path(sys.base_prefix).resolve(), Path(sys.prefix), REPO}
    sources |= {Path(p) for p in ("/lib", "/lib64", "/usr/lib") if Path(p).exists()}
    # Keep the outermost paths only (mounting both /a and /a/b read-only is redundant).
    outer = [p for p in sources if not any(q != p and q in p.parents for q in sources)]
    mounts = [{"source": str(p), "target": str(p), "read_only": True} for p in sorted(outer)]
    assert real_python.exists()
    return str(Path(sys.prefix) / "bin" / "python"), mounts


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


@pytest.fixture(scope="session")
def systemd_host() -> Iterator[SystemdHost]:
    """A real systemd as PID 1 of a systemd-nspawn container (started once per session, and
    stopped at the end when this session started it), with the worker template of
    deploy/systemd installed, plus one test drop-in: ExecStart runs the echo worker with this
    interpreter, and ProtectHome=read-only since that interpreter lives under /root."""
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
        "ProtectHome=read-only\n"
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
