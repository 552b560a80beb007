"""The Docker engine of the tests: osrdyne's own dockerd, a worker image, the host's Python.

A pytest plugin (loaded by tests/conftest.py) so that every test package can run containers:
the driver tests and the cluster tests (workers in containers failing over between nodes).
The Docker engine is osrdyne's own (`scripts/ensure_dockerd.sh`: vfs storage, no bridge, no
iptables). No registry is reachable, so the worker image is `docker import`ed from a
busybox-static root filesystem, and containers run the host's own interpreter and virtualenv
through read-only bind mounts, with `network_mode=host` to reach the local broker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
ENSURE_DOCKERD = REPO / "scripts" / "ensure_dockerd.sh"
TEST_IMAGE = "osrdyne-test-worker:busybox"
BUSYBOX = Path("/bin/busybox")
AMQP_URI = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def pool_containers(client: Any, pool: str, *, all: bool = True, label: str = "") -> list[Any]:
    """The containers of `pool` (any state with `all`; also labelled `label` when given),
    each as the engine describes it now. Those removed between the engine's list and their
    description are left out: the SDK's `containers.list` describes each container it
    listed and raises NotFound for one removed meanwhile (a driver shrinking its group,
    another test cleaning up), which failed a CI run."""
    import docker.errors

    labels = [f"osrdyne.pool={pool}", *([label] if label else [])]
    found = []
    for listed in client.api.containers(all=all, filters={"label": labels}):
        try:
            found.append(client.containers.get(listed["Id"]))
        except docker.errors.NotFound:
            continue
    return found


def remove_pool_containers(client: Any, pool: str) -> None:
    """Remove every container of `pool`, whatever its state (one already gone is no error)."""
    import docker.errors

    for listed in client.api.containers(all=True, filters={"label": [f"osrdyne.pool={pool}"]}):
        try:
            client.api.remove_container(listed["Id"], force=True)
        except docker.errors.NotFound:
            continue


def _unavailable(reason: str) -> NoReturn:
    """Fail, with the reason: a component that cannot start fails the run, never skips it
    (deselect its tier instead: `scripts/test.sh --quick`, or `-m "not docker"`)."""
    pytest.fail(reason)


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
