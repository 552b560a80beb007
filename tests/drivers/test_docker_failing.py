"""Failing groups with the docker driver: worker containers that cannot start make their key's
callers answered `start_failed` with the reason, whether the worker reports it (the echo worker
needing a missing file) or only exits (a raw command: its exit status, as the engine saw it
through `describe()`), and a group whose worker can start again serves without an operator.
The real engine, real containers, a real controller."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from osrdyne import Client, Status
from tests.conftest import running_controller
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)


async def test_a_container_that_only_exits_is_answered_with_its_exit_status(
    pool: str,
    tmp_path: Path,
    client: Client,
    docker_driver: Callable[..., Any],
    amqp_uri: str,
    host_python: tuple[str, list[dict[str, Any]]],
) -> None:
    python, mounts = host_python
    driver = docker_driver(
        pool=pool,
        amqp_uri=amqp_uri,
        command=[python, "-c", "import sys; sys.exit(3)"],
        volumes=mounts,
    )
    async with running_controller(
        pool, tmp_path, driver, groups={"failing_after": 2}
    ) as controller:
        answer = await client.call(pool, "raw", b"x", timeout=120)
        assert answer.status == Status.START_FAILED, answer
        assert answer.json()["details"]["reason"] == "a worker exited with status 3 before serving"
        (worker,) = controller.status().groups["raw"].workers or []
        assert worker.restarts >= 2 and worker.last_exit == 3


async def test_a_worker_container_that_cannot_start_says_why_then_serves(
    pool: str,
    tmp_path: Path,
    client: Client,
    docker_driver: Callable[..., Any],
    amqp_uri: str,
    host_python: tuple[str, list[dict[str, Any]]],
    repo: Path,
) -> None:
    python, mounts = host_python
    shared = tmp_path / "shared"
    shared.mkdir()
    required = shared / f"needed-{uuid.uuid4().hex[:6]}"
    driver = docker_driver(
        pool=pool,
        amqp_uri=amqp_uri,
        command=[python, "-m", "worker_sdk.examples.echo"],
        environment={
            "PYTHONPATH": str(repo),
            "PYTHONDONTWRITEBYTECODE": "1",
            "WORKER_ACTIVITY_INTERVAL": "0.5",
            "ECHO_REQUIRE_FILE": str(required),
        },
        volumes=[*mounts, {"source": str(shared), "target": str(shared), "read_only": True}],
    )
    async with running_controller(
        pool, tmp_path, driver, groups={"failing_after": 2}
    ) as controller:
        answer = await client.call(pool, "needs-file", b"x", timeout=120)
        assert answer.status == Status.START_FAILED, answer
        assert "FileNotFoundError" in answer.json()["details"]["reason"]
        assert controller.status().groups["needs-file"].failing_reason is not None

        required.write_text("here")  # the engine's next restart finds it

        async def served() -> Any:
            again = await client.call(pool, "needs-file", b"again", timeout=60)
            return again if again.ok else None

        # The engine's restart back-off doubles from 100 ms (to a minute at most).
        assert (await eventually(served, timeout=120, what="the group serves")).body == b"again"
        await eventually(
            lambda: controller.status().groups["needs-file"].failing_reason is None,
            what="the group no longer failing",
        )
