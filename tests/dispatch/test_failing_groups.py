"""A group whose workers cannot start answers its callers with the reason, at once, and serves
again once a worker starts, without an operator. Real broker, real controller, real worker
processes: the echo worker made to fail at start-up (`ECHO_REQUIRE_FILE`), and a raw worker
that only exits."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika

from osrdyne import Client, PoolNames, Status
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

#: Small thresholds and back-offs: a failing group is told in a few worker starts.
FAST_FAILING: dict[str, Any] = {"failing_after": 2, "failing_window": 60}


def subprocess_driver(**more: Any) -> dict[str, Any]:
    return {"kind": "subprocess", "subprocess": {"restart_backoff_max": 0.5, **more}}


def counted(running: Running, name: str, **labels: str) -> float:
    return running.controller.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_worker_that_cannot_start_is_answered_with_its_reason_then_serves_again(
    make_controller: Callable[..., Awaitable[Running]],
    client: Client,
    pool: str,
    tmp_path: Path,
) -> None:
    required = tmp_path / f"dataset-{uuid.uuid4().hex[:6]}"
    running = await make_controller(
        pool,
        groups=FAST_FAILING,
        driver=subprocess_driver(
            env={
                "WORKER_ACTIVITY_INTERVAL": "0.5",
                "ECHO_REQUIRE_FILE": str(required),
                # A secret in the worker's environment never reaches a caller.
                "WORKER_AMQP_PASSWORD_HINT": "unused",
            }
        ),
    )
    # The first caller waits in the queue while its workers fail; it is answered once the
    # group is failing, with the reason, long before its own deadline.
    first = await client.call(pool, "broken", b"hello", timeout=60)
    assert first.status == Status.START_FAILED, first
    error = first.json()
    assert error["status"] == "start_failed"
    assert error["key"] == "broken"
    assert "FileNotFoundError" in error["details"]["reason"]
    assert str(required) in error["error"]
    # Within three worker start times: answered once the second or third start failed.
    assert 2 <= error["details"]["failed_starts"] <= 3

    # Later callers are answered by the controller at once, each with the same reason.
    later = await asyncio.gather(*(client.call(pool, "broken", b"x", timeout=60) for _ in range(5)))
    assert {a.status for a in later} == {Status.START_FAILED}
    # Counted once acked, which may come after the caller has its answer.
    await eventually(
        lambda: counted(running, "osrdyne_start_failed_answers_total", outcome="answered") >= 6,
        what="six answers counted",
    )

    # Operators see it: /status, the metric, the key's history.
    status = running.controller.status()
    group = status.groups["broken"]
    assert group.health is not None and group.health.value == "failing"
    assert group.failing_reason is not None and "FileNotFoundError" in group.failing_reason
    report = await running.controller.report()
    assert report.groups_failing == 1
    assert counted(running, "osrdyne_groups_failing") == 1
    assert counted(running, "osrdyne_failed_starts_total", source="report") >= 2
    kinds = [e.kind.value for e in running.controller.history.events("broken")]
    assert "failing" in kinds

    # Restored: the driver's next restart starts a worker, which serves; nobody intervenes.
    required.write_text("here now")
    answer = await eventually(
        lambda: _answered_ok(client, pool, "broken"), what="the group serves again", timeout=30
    )
    assert answer.body == b"again"
    # The worker may answer before the controller has heard its `ready`.
    await eventually(
        lambda: running.controller.status().groups["broken"].failing_reason is None,
        what="the group no longer failing",
    )
    assert counted(running, "osrdyne_groups_failing") == 0
    kinds = [e.kind.value for e in running.controller.history.events("broken")]
    assert "serving_again" in kinds


async def _answered_ok(client: Client, pool: str, key: str) -> Any:
    answer = await client.call(pool, key, b"again", timeout=30)
    return answer if answer.ok else None


async def test_requests_waiting_in_the_queue_are_all_answered(
    make_controller: Callable[..., Awaitable[Running]],
    client: Client,
    pool: str,
    tmp_path: Path,
) -> None:
    await make_controller(
        pool,
        groups=FAST_FAILING,
        driver=subprocess_driver(env={"ECHO_REQUIRE_FILE": str(tmp_path / "never")}),
    )
    answers = await asyncio.gather(
        *(client.call(pool, "waiting", str(i).encode(), timeout=60) for i in range(10))
    )
    assert [a.status for a in answers] == [Status.START_FAILED] * 10


async def test_a_raw_worker_that_only_exits_is_answered_with_its_exit_status(
    make_controller: Callable[..., Awaitable[Running]],
    client: Client,
    pool: str,
) -> None:
    running = await make_controller(
        pool,
        groups=FAST_FAILING,
        driver=subprocess_driver(command=[sys.executable, "-c", "import sys; sys.exit(3)"]),
    )
    answer = await client.call(pool, "raw", b"x", timeout=60)
    assert answer.status == Status.START_FAILED, answer
    assert answer.json()["details"]["reason"] == "a worker exited with status 3 before serving"
    assert counted(running, "osrdyne_failed_starts_total", source="exit") >= 2


async def test_a_failing_group_answers_no_caller_once_it_is_gone(
    make_controller: Callable[..., Awaitable[Running]],
    client: Client,
    pool: str,
    amqp_url: str,
) -> None:
    """A request without reply_to is acked (nobody to tell), and a failing group that nobody
    calls goes like any idle group: unbound, stopped, forgotten."""
    running = await make_controller(
        pool,
        # Stopped past the management API's first statistics of its queue (5 s): a queue it
        # cannot count yet is kept, and the group required again.
        groups={**FAST_FAILING, "unbind_delay": 2.0, "stop_delay": 4.0},
        driver=subprocess_driver(command=[sys.executable, "-c", "raise SystemExit(4)"]),
    )
    assert (await client.call(pool, "idle", b"x", timeout=60)).status == Status.START_FAILED
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange, ensure=False)
        await exchange.publish(aio_pika.Message(b"no reply_to"), routing_key="idle")
    await eventually(
        lambda: counted(running, "osrdyne_start_failed_answers_total", outcome="no_reply_to"),
        what="the request without reply_to acked",
    )
    await eventually(
        lambda: "idle" not in running.controller.status().groups, what="the group gone", timeout=60
    )
    assert counted(running, "osrdyne_groups_failing") == 0
