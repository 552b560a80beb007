"""Structured logs: lines about a request or a group carry pool, key, correlation id and
generation as JSON fields; the AMQP password never reaches a log line, `last_error`, or the
status document."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from osrdyne import Client
from osrdyne.ops import logs
from tests.operations.conftest import ServeApi
from tests.waiting import eventually

SECRET = "pw-never-print-me"


@pytest.fixture
def json_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Configure JSON logs as `osrdyne run --json` does, into a buffer; restore afterwards."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    quieted = [logging.getLogger(n) for n in ("aiormq", "aio_pika", "httpx", "aiohttp.access")]
    saved_levels = [logger.level for logger in quieted]
    logs.configure(level="INFO", json_format=True)
    buffer = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(buffer)

    def lines() -> list[dict[str, Any]]:
        return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]

    yield lines
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)
    for logger, level in zip(quieted, saved_levels, strict=True):
        logger.setLevel(level)


async def test_request_and_group_lines_carry_their_fields(
    json_lines: Callable[[], list[dict[str, Any]]],
    make_controller: Any,
    client: Client,
    pool: str,
) -> None:
    await make_controller(pool)
    response = await client.call(pool, "fielded", b"x", timeout=60)
    assert response.ok

    def line(fragment: str) -> dict[str, Any] | None:
        return next((d for d in json_lines() if fragment in d["event"]), None)

    orphan = await eventually(lambda: line("starting its worker group"), what="orphan line")
    assert orphan["pool"] == pool and orphan["key"] == "fielded"
    assert orphan["correlation_id"] == response.correlation_id
    assert isinstance(orphan["generation"], int) and orphan["level"] == "info"
    queue = await eventually(lambda: line("request queue of 'fielded'"), what="queue line")
    assert queue["pool"] == pool and queue["key"] == "fielded" and "generation" in queue
    group = await eventually(lambda: line("worker group 'fielded': start"), what="group line")
    assert group["pool"] == pool and group["key"] == "fielded"
    ready = await eventually(lambda: line("worker of key 'fielded': ready"), what="ready line")
    assert ready["pool"] == pool and ready["worker_id"]


async def test_a_stopped_controller_says_it_stops_not_that_it_connects(
    json_lines: Callable[[], list[dict[str, Any]]], make_controller: Any, pool: str
) -> None:
    running = await make_controller(pool)
    before = len(json_lines())
    await running.stop()
    roles = [
        d["event"]
        for d in json_lines()[before:]
        if d["event"].startswith(f"controller of pool {pool!r}:")
    ]
    assert roles == [
        f"controller of pool {pool!r}: stopped after 1 sessions; closing its driver and API"
    ]


async def test_the_amqp_password_is_never_printed(
    json_lines: Callable[[], list[dict[str, Any]]],
    make_controller: Any,
    serve_api: ServeApi,
    pool: str,
) -> None:
    url = f"amqp://guest:{SECRET}@127.0.0.1:1/%2F"  # nothing listens: every session fails
    running = await make_controller(pool, wait=False, amqp={"url": url})
    http = await serve_api(running)
    await eventually(lambda: running.controller.sessions >= 2, what="two failed sessions")
    logging.getLogger("osrdyne.test").warning("connecting to %s", url)  # any logger, any line
    status = (await http.get("/status")).text
    await running.stop()
    text = "\n".join(json.dumps(d) for d in json_lines())
    assert "session 1 of pool" in text and "guest:***@127.0.0.1:1" in text
    assert SECRET not in text
    assert SECRET not in status and SECRET not in str(running.controller.last_error)
    assert SECRET not in repr(running.controller.status())


async def test_the_cli_does_not_print_the_password_of_an_unreachable_broker() -> None:
    from typer.testing import CliRunner

    from osrdyne.ops.cli import app

    url = f"amqp://guest:{SECRET}@127.0.0.1:1/%2F"
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["call", "demo", "k", "--url", url, "--timeout", "3"]
    )
    assert result.exit_code == 2
    assert "cannot reach the broker" in result.output
    assert SECRET not in result.output
