"""The reason a worker gives for its failed start is untrusted text that reaches callers,
operators' terminals and logs: it is bounded, its secrets masked and its control characters
gone, on the worker's side before it is sent and on the controller's side again, whatever a
forged report holds."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import aio_pika
import pytest

from osrdyne import Client, PoolNames, Status, wire
from osrdyne.ops import logs
from tests import broker
from tests.conftest import Running, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

HOSTILE = (
    "boom amqp://osrdyne:s3cret-pw@broker:5672/ password=hunter2 api_key: 'k-123' "
    "\x1b[31mred\x1b[0m\nforged log line\r\u202eevil\u202c " + "x" * 5000
)


def test_clean_reason_masks_bounds_and_flattens() -> None:
    cleaned = wire.clean_reason(HOSTILE)
    assert cleaned is not None
    for secret in ("s3cret-pw", "hunter2", "k-123"):
        assert secret not in cleaned
    assert "amqp://osrdyne:***@broker" in cleaned and "password=***" in cleaned
    assert len(cleaned) <= wire.MAX_REASON_CHARS
    assert logs.escape_controls(cleaned) == cleaned  # no control or bidi character left
    assert cleaned.endswith("…")
    assert wire.clean_reason(b"\xff\xfe bytes") == "\ufffd\ufffd bytes"
    assert wire.clean_reason(None) is None
    assert wire.clean_reason(" \n\t ") is None


async def test_the_worker_reports_a_clean_reason_then_exits(
    pool: str, amqp_url: str, make_controller: Callable[..., Awaitable[Running]], tmp_path: Path
) -> None:
    """The echo worker run by hand with the protocol's environment, needing a file whose name
    holds a password, a newline and an escape sequence: its `start-failed` report is clean."""
    await make_controller(pool)  # declares the pool's exchanges
    names = PoolNames(pool)
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(names.activity_exchange, routing_key="k")
        env = {
            **os.environ,
            **wire.worker_environment(names=names, key="k", worker_id="w-1", amqp_uri=amqp_url),
            "WORKER_QUEUE_WAIT_TIMEOUT": "1",
            "ECHO_REQUIRE_FILE": str(tmp_path / "token=abc123 \x1b[2J\nmissing"),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "worker_sdk.examples.echo", env=env
        )
        assert await asyncio.wait_for(process.wait(), 60) != 0
        events: dict[str, aio_pika.abc.AbstractIncomingMessage] = {}

        async def received() -> bool:
            message = await queue.get(fail=False, no_ack=True)
            if message is not None:
                events[str((message.headers or {}).get("x-event"))] = message
            return "start-failed" in events

        await eventually(received, what="the start-failed report")
    headers = events["start-failed"].headers or {}
    reason = wire.text(headers.get("x-reason"))
    assert headers.get("x-worker-id") == "w-1"
    assert reason is not None and reason.startswith("FileNotFoundError: the echo worker needs")
    assert "abc123" not in reason and "token=***" in reason
    assert logs.escape_controls(reason) == reason


async def test_a_forged_report_reaches_callers_cleaned(
    pool: str,
    amqp_url: str,
    make_controller: Callable[..., Awaitable[Running]],
    client: Client,
    tmp_path: Path,
) -> None:
    """Reports for a group that exists (its worker cannot start) with a hostile reason: the
    callers and the status document get it bounded and masked."""
    running = await make_controller(
        pool,
        groups={"failing_after": 2, "failing_window": 60},
        driver={
            "kind": "subprocess",
            "subprocess": {
                "env": {"ECHO_REQUIRE_FILE": str(tmp_path / "never")},
                "restart_backoff": 5,  # the forged reports come first
            },
        },
    )
    call = asyncio.create_task(client.call(pool, "k", b"x", timeout=60))
    session = running.controller.session
    assert session is not None
    await eventually(lambda: "k" in session.tracker.state.value.groups, what="the group")
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(PoolNames(pool).activity_exchange)
        for reason in (HOSTILE, broker.RawText(HOSTILE.encode() + b"\xff")):
            headers = {"x-event": "start-failed", "x-worker-id": "intruder", "x-reason": reason}
            await exchange.publish(aio_pika.Message(b"", headers=headers), routing_key="k")
    answer = await call
    assert answer.status == Status.START_FAILED
    failing = running.controller.status().groups["k"].failing_reason
    for shown in (answer.json()["details"]["reason"], answer.json()["error"], failing):
        assert shown is not None
        assert "hunter2" not in shown and "s3cret-pw" not in shown
        assert logs.escape_controls(shown) == shown
    assert len(answer.json()["details"]["reason"]) <= wire.MAX_REASON_CHARS
