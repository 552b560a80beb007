"""Failing groups with the kubernetes driver: a group whose pod is in a crash loop (restarts
growing, its last termination's exit code) makes its key's callers answered `start_failed`
with that exit status, and a worker that serves ends it. No cluster runs here: the API server
is the double (k8s_double.py), and the test plays the kubelet, reporting the pod's restarts
as a real one would; the controller and the broker are real."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from drivers.kubernetes._core import CONTAINER
from osrdyne import Client, PoolNames, Status
from tests.conftest import raw_connection, running_controller
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


def crash_looping_pod(deployment: dict[str, Any], *, restarts: int) -> dict[str, Any]:
    """The Deployment's pod as the kubelet reports it after `restarts` exits with status 3."""
    template = deployment["spec"]["template"]
    name = deployment["metadata"]["name"] + "-7d4b9-x2x8q"
    terminated = {"exitCode": 3, "reason": "Error"} if restarts else None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            **{k: template["metadata"][k] for k in ("labels", "annotations")},
        },
        "spec": template["spec"],
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": CONTAINER,
                    "image": template["spec"]["containers"][0]["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": restarts,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": terminated} if terminated else {},
                }
            ],
        },
    }


async def test_a_pod_in_a_crash_loop_is_answered_with_its_exit_status(
    pool: str,
    tmp_path: Path,
    client: Client,
    amqp_url: str,
    k8s_api: Any,
    k8s_driver: Callable[..., Any],
) -> None:
    driver = k8s_driver(pool=pool, image="registry.invalid/worker:1")
    async with running_controller(
        pool, tmp_path, driver, groups={"failing_after": 2}
    ) as controller:
        call = asyncio.create_task(client.call(pool, "crashing", b"x", timeout=60))
        (deployment,) = await eventually(
            lambda: k8s_api.of_kind("deployments"), what="the group's Deployment"
        )
        k8s_api.put_pod(crash_looping_pod(deployment, restarts=0))
        await eventually(lambda: "crashing" in driver.describe(), what="its pod described")
        k8s_api.put_pod(crash_looping_pod(deployment, restarts=2))

        answer = await call
        assert answer.status == Status.START_FAILED, answer
        assert answer.json()["details"]["reason"] == "a worker exited with status 3 before serving"
        group = controller.status().groups["crashing"]
        assert group.failing_reason is not None and group.restarts == 2

        # A worker of the group serves (the image fixed, the next restart starts): it says so.
        async with raw_connection(amqp_url) as connection:
            channel = await connection.channel()
            exchange = await channel.get_exchange(PoolNames(pool).activity_exchange)
            ready = {"x-event": "ready", "x-worker-id": deployment["metadata"]["name"]}
            await exchange.publish(aio_pika.Message(b"", headers=ready), routing_key="crashing")
        await eventually(
            lambda: controller.status().groups["crashing"].failing_reason is None,
            what="the group no longer failing",
        )
