"""`osrdyne status` against a running controller's API: the table and `--json`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from aiohttp import web
from typer.testing import CliRunner

from osrdyne import Client
from osrdyne.api import ApiServer, make_app
from osrdyne.cli import app
from tests.operations.conftest import ServeApi
from tests.waiting import eventually


async def test_status_renders_the_table_and_the_json(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    http = await serve_api(running, token="t0ken")
    assert (await client.call(pool, "k1", b"x", timeout=60)).ok
    await eventually(lambda: running.controller.activity.last_seen.get("k1"), what="activity")
    runner = CliRunner()
    base = ["status", "--api", str(http.base_url), "--token", "t0ken"]

    raw = await asyncio.to_thread(runner.invoke, app, [*base, "--json"])
    assert raw.exit_code == 0, raw.output
    doc = json.loads(raw.output)
    assert doc["pool"] == pool and doc["groups"]["k1"]["state"] == "active"
    assert doc["groups"]["k1"]["workers"][0]["pid"] > 0

    table = await asyncio.to_thread(runner.invoke, app, base, env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    for column in ("key", "state", "workers", "restarts", "ready", "oldest", "activity"):
        assert column in table.output
    assert "k1" in table.output and "active" in table.output and "ago" in table.output

    refused = await asyncio.to_thread(
        runner.invoke, app, ["status", "--api", str(http.base_url), "--json"]
    )
    assert refused.exit_code == 2  # no token: the API answers 401


async def test_watch_shows_the_pool_until_interrupted(
    make_controller: Any, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    app = make_app(running.controller)
    polls: list[str] = []

    async def count(request: web.Request, response: web.StreamResponse) -> None:
        polls.append(request.path)

    app.on_response_prepare.append(count)
    server = ApiServer(app, host="127.0.0.1", port=0)
    await server.start()
    try:
        assert (await client.call(pool, "watched", b"x", timeout=60)).ok
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "osrdyne",
            "watch",
            "--api",
            f"http://127.0.0.1:{server.port}",
            "--interval",
            "0.2",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "COLUMNS": "250"},
        )
        try:
            # Interrupt only once it has refreshed a few times (it polls /status each time).
            await eventually(lambda: polls.count("/status") >= 3, what="watch refreshing")
        finally:
            process.send_signal(signal.SIGINT)
            out, err = await asyncio.wait_for(process.communicate(), 30)
    finally:
        await server.stop()
    assert process.returncode == 0, err.decode()
    assert "watched" in out.decode() and "active" in out.decode()
