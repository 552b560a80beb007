"""deploy/compose/ built and run: a request answered by the stack a user's `compose up` makes.

No registry is reachable here, so `scripts/build_base_image.sh` first makes the base images
from Debian packages (a debootstrapped bookworm with python3 standing in for
python:3.11-slim, Debian 13's rabbitmq-server 4.0 for rabbitmq:4.0-management) in osrdyne's own
Docker engine (`scripts/ensure_dockerd.sh`). Then Debian's docker-compose builds the
Dockerfiles of deploy/compose/ unchanged (`BASE_IMAGE` build argument), and brings the
compose file up under a project, network, pool and host ports of the test's own: the broker,
the controller with the docker driver on the engine's socket, and the echo workers it starts
on the compose network. A client on the host calls the stack's broker through its published
port and gets the echo worker's answer. The stack and the workers are removed afterwards.

The first run builds everything (several minutes); later runs reuse the images and layers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from osrdyne import Client
from tests.docker_engine import pool_containers, remove_pool_containers
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "deploy" / "compose" / "docker-compose.yml"
BASE_IMAGE = "osrdyne-base:python3.11-bookworm"
RABBITMQ_IMAGE = "osrdyne-rabbitmq:trixie"
#: The images the compose file builds (deploy/compose/docker-compose.yml, `image:`).
BUILT_IMAGES = ("osrdyne:latest", "osrdyne-echo-worker:latest")
#: Bounds of the slow steps (a loaded two-core machine; the first build installs from PyPI).
SETUP_SECONDS = 1800
COMPOSE_SECONDS = 1200

# Generous: the first run makes the base images and builds osrdyne's.
pytestmark = pytest.mark.timeout(SETUP_SECONDS + 2 * COMPOSE_SECONDS)


def _unavailable(reason: str) -> NoReturn:
    """Fail, with the reason: a component that cannot start fails the run, never skips it
    (deselect its tier instead: `scripts/test.sh --quick`, or `-m "not compose"`)."""
    pytest.fail(reason)


def _script(name: str) -> str:
    """Run scripts/NAME; return the `DOCKER_HOST=...` of its last line."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / name)],
        capture_output=True,
        text=True,
        timeout=SETUP_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"scripts/{name} failed:\n{done.stderr[-4000:]}"
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("DOCKER_HOST=unix://"), done.stdout
    return line.removeprefix("DOCKER_HOST=")


def _compose_command() -> list[str]:
    """Compose v2 (`docker compose`) when the docker CLI has it, else Debian's docker-compose."""
    if shutil.which("docker") and (
        subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose") is None:
        done = subprocess.run(
            ["bash", "-c", "source scripts/_quiet.sh && apt_install docker-compose"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=SETUP_SECONDS,
            check=False,
        )
        assert done.returncode == 0, f"cannot install docker-compose:\n{done.stderr[-4000:]}"
    return ["docker-compose"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Stack:
    """A compose project of the test's own, and where the host reaches it."""

    compose: list[str]
    env: dict[str, str]
    docker_host: str
    pool: str
    amqp_url: str
    api_url: str

    def run(self, *args: str, timeout: float = COMPOSE_SECONDS) -> str:
        done = subprocess.run(
            [*self.compose, *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, (
            f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
            f"{done.stderr[-4000:]}"
        )
        return done.stdout

    def logs(self) -> str:
        try:
            return self.run("logs", "--no-color", "--tail", "60", timeout=120)
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            return f"(no logs: {exc})"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if os.geteuid() != 0:
        _unavailable("starting dockerd and debootstrap need root")
    try:
        docker_host = _script("ensure_dockerd.sh")
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"no Docker engine can run here: {exc}")
    _script("build_base_image.sh")
    compose = _compose_command()
    run_id = uuid.uuid4().hex[:8]
    project = f"osrdynetest{run_id}"
    pool = f"echo-{run_id}"
    amqp_port, management_port, api_port = _free_port(), _free_port(), _free_port()
    env = {
        **os.environ,
        "DOCKER_HOST": docker_host,
        "COMPOSE_FILE": str(COMPOSE_FILE),
        "COMPOSE_PROJECT_NAME": project,
        "OSRDYNE_BASE_IMAGE": BASE_IMAGE,
        "OSRDYNE_RABBITMQ_IMAGE": RABBITMQ_IMAGE,
        # The engine has no bridge of its own: build containers reach PyPI on the host's.
        "OSRDYNE_BUILD_NETWORK": "host",
        "OSRDYNE_DOCKER_SOCKET": docker_host.removeprefix("unix://"),
        "OSRDYNE_NETWORK": project,
        "OSRDYNE_POOL": pool,
        # Published on loopback only: the stack's broker lets guest in.
        "OSRDYNE_AMQP_PORT": f"127.0.0.1:{amqp_port}",
        "OSRDYNE_MANAGEMENT_PORT": f"127.0.0.1:{management_port}",
        "OSRDYNE_API_PORT": f"127.0.0.1:{api_port}",
    }
    made = Stack(
        compose=compose,
        env=env,
        docker_host=docker_host,
        pool=pool,
        amqp_url=f"amqp://guest:guest@127.0.0.1:{amqp_port}/%2F",
        api_url=f"http://127.0.0.1:{api_port}",
    )
    replaced = _image_ids(docker_host)
    # --force-rm (v1's classic builds): a failed step leaves no container behind.
    made.run("build", *(["--force-rm"] if compose == ["docker-compose"] else []))
    _remove_replaced(docker_host, replaced)
    try:
        # Returns once the broker is healthy and the controller's container started.
        made.run("up", "--detach")
        yield made
    finally:
        import docker

        # The driver's worker containers are the engine's, not the project's: remove them
        # first (the network cannot go while they are attached to it).
        client = docker.DockerClient(base_url=docker_host, version="auto", timeout=60)
        try:
            made.run("stop", "osrdyne", timeout=120)
            remove_pool_containers(client, pool)
        finally:
            client.close()
            made.run("down", "--volumes", "--remove-orphans", timeout=300)


def _image_ids(docker_host: str) -> dict[str, str]:
    """The ids of the stack's built images now, by tag."""
    import docker
    import docker.errors

    client = docker.DockerClient(base_url=docker_host, version="auto", timeout=60)
    try:
        ids = {}
        for tag in BUILT_IMAGES:
            with contextlib.suppress(docker.errors.ImageNotFound):
                ids[tag] = client.images.get(tag).id
        return ids
    finally:
        client.close()


def _remove_replaced(docker_host: str, before: dict[str, str]) -> None:
    """Remove the images a rebuild untagged: the engine's vfs storage keeps full copies."""
    import docker
    import docker.errors

    after = _image_ids(docker_host)
    client = docker.DockerClient(base_url=docker_host, version="auto", timeout=60)
    try:
        for tag, old in before.items():
            if after.get(tag) != old:
                # In use by another stack's container (a parallel run): that run's to keep.
                with contextlib.suppress(docker.errors.APIError):
                    client.images.remove(old)
    finally:
        client.close()


def _workers(stack: Stack) -> list[Any]:
    import docker

    client = docker.DockerClient(base_url=stack.docker_host, version="auto", timeout=60)
    try:
        return pool_containers(client, stack.pool, all=False)
    finally:
        client.close()


async def _two_workers(stack: Stack) -> list[Any]:
    """The running worker containers of the stack's pool once there are two, else []."""
    workers = await asyncio.to_thread(_workers, stack)
    return workers if len(workers) == 2 else []


async def _ready(api_url: str) -> bool:
    async with httpx.AsyncClient(timeout=5) as http:
        try:
            return (await http.get(f"{api_url}/ready")).status_code == 200
        except httpx.HTTPError:
            return False


async def test_compose_stack_answers_a_request(stack: Stack) -> None:
    key = "compose/é 1"
    try:
        await eventually(
            lambda: _ready(stack.api_url),
            timeout=300,
            interval=1,
            what="the compose controller's /ready",
        )
        async with Client(stack.amqp_url, name="compose test") as client:
            answer = await client.call(stack.pool, key, b"hi from the host", timeout=300)
            assert answer.ok, answer
            assert answer.body == b"hi from the host"
            who = json.loads((await client.call(stack.pool, key, path="whoami", timeout=60)).body)
        # Two workers, as deploy/compose/osrdyne.toml asks (the first may answer while the
        # driver still creates the second), on the stack's own network.
        workers = await eventually(
            lambda: _two_workers(stack), timeout=300, interval=1, what="two worker containers"
        )
        assert who["key"] == key
        assert who["worker_id"] in {c.name for c in workers}
        assert {c.image.tags[0] for c in workers} == {"osrdyne-echo-worker:latest"}
        assert {n for c in workers for n in c.attrs["NetworkSettings"]["Networks"]} == {
            stack.env["OSRDYNE_NETWORK"]
        }
    except BaseException:
        print(stack.logs())
        raise
