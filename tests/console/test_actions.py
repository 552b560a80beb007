"""The action endpoints over HTTP and through `osrdyne warm|stop`, against real controllers:
warm and stop of a key, poison replay and drop, refused without the token, from another site,
for an invalid key, and on a standby (with who leads); every action logged with who and
what, never the token."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pytest
from typer.testing import CliRunner

from osrdyne import Client
from osrdyne.controller import Controller
from osrdyne.ops import ApiServer, make_app
from osrdyne.ops.cli import app as cli
from tests.conftest import Running, controller_settings
from tests.console.conftest import Serve
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

TOKEN = "act10n-t0ken"
ACT = {"Authorization": f"Bearer {TOKEN}", "X-Osrdyne-Action": "test"}
MakeController = Callable[..., Awaitable[Running]]
Http = Callable[[str], httpx.AsyncClient]


@pytest.fixture
async def http() -> AsyncIterator[Http]:
    clients: list[httpx.AsyncClient] = []

    def make(base: str) -> httpx.AsyncClient:
        clients.append(httpx.AsyncClient(base_url=base, timeout=60))
        return clients[-1]

    yield make
    for c in clients:
        await c.aclose()


def action_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None)]


async def test_warm_binds_the_queue_and_starts_the_group_and_is_logged(
    make_controller: MakeController,
    serve: Serve,
    http: Http,
    pool: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="osrdyne.ops._actions")
    running = await make_controller(pool)
    api = http(await serve(running, token=TOKEN))
    answer = await api.post("/actions/warm", json={"key": "early"}, headers=ACT)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["ok"] is True and doc["queue"] == "bound" and doc["key"] == "early"

    async def started() -> bool:
        return "early" in await running.controller.driver.list()

    await eventually(started, what="the warmed group started")
    [line] = action_lines(caplog)
    assert line.action == "warm" and line.outcome == "done"  # type: ignore[attr-defined]
    assert line.key == "early" and line.client == "127.0.0.1"  # type: ignore[attr-defined]
    assert line.token.startswith("sha256:")  # type: ignore[attr-defined]
    assert all(TOKEN not in r.getMessage() and TOKEN not in str(vars(r)) for r in caplog.records)

    timeline = (await api.get("/timeline", params={"key": "early"}, headers=ACT)).json()
    kinds = [e["kind"] for e in timeline["events"]]
    assert kinds[:2] == ["warm", "required"] and timeline["since"] is not None


async def test_invalid_keys_unknown_groups_and_bad_bodies_are_refused(
    make_controller: MakeController,
    serve: Serve,
    http: Http,
    pool: str,
) -> None:
    running = await make_controller(pool, driver={"kind": "noop"})
    api = http(await serve(running, token=TOKEN))
    for key in ("bad\x1bkey", "", "x" * 300):
        refused = await api.post("/actions/warm", json={"key": key}, headers=ACT)
        assert refused.status_code == 400, key
        assert refused.json()["status"] == "invalid_key"
    assert running.controller.session is not None
    assert running.controller.session.tracker.state.value.groups == {}

    nobody = await api.post("/actions/stop", json={"key": "nobody"}, headers=ACT)
    assert nobody.status_code == 404
    for body in ({}, {"key": 3}, {"key": "k", "more": 1}, {"key": "k" * 2000}, []):
        bad = await api.post("/actions/warm", json=body, headers=ACT)
        assert bad.status_code == 422, body
    huge = await api.post(
        "/actions/warm", content=b'{"key": "' + b"k" * 100_000 + b'"}', headers=_json(ACT)
    )
    assert huge.status_code == 413
    missing = await api.post("/actions/poison/drop", json={"id": "nope"}, headers=ACT)
    assert missing.status_code == 404


def _json(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "Content-Type": "application/json"}


async def test_actions_that_another_site_could_send_are_refused(
    make_controller: MakeController,
    serve: Serve,
    http: Http,
    pool: str,
) -> None:
    running = await make_controller(pool, driver={"kind": "noop"})
    guarded = http(await serve(running, token=TOKEN))
    body = {"key": "k"}
    assert (await guarded.post("/actions/warm", json=body)).status_code == 401
    no_header = {"Authorization": f"Bearer {TOKEN}"}
    assert (await guarded.post("/actions/warm", json=body, headers=no_header)).status_code == 403
    as_form = await guarded.post("/actions/warm", data={"key": "k"}, headers=ACT)
    assert as_form.status_code == 415  # what an HTML form can send
    for header in (
        {"Origin": "http://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        answer = await guarded.post("/actions/warm", json=body, headers={**ACT, **header})
        assert answer.status_code == 403, header
    assert (await guarded.get("/actions/warm", headers=ACT)).status_code == 405

    # Without a token, a page that rebinds its own name to this address is refused.
    open_ = http(await serve(running))
    header = {"X-Osrdyne-Action": "test"}
    rebound = await open_.post("/actions/stop", json=body, headers={**header, "Host": "evil.test"})
    assert rebound.status_code == 403
    for host in ("127.0.0.1", "localhost:1234", "[::1]:8090"):
        answer = await open_.post("/actions/stop", json=body, headers={**header, "Host": host})
        assert answer.status_code == 404, host  # let through: no group for this key
    same = await open_.post(
        "/actions/stop",
        json=body,
        headers={
            **header,
            "Origin": str(open_.base_url).rstrip("/"),
            "Sec-Fetch-Site": "same-origin",
        },
    )
    assert same.status_code == 404
    session = running.controller.session
    assert session is not None and session.tracker.state.value.groups == {}


async def test_a_standby_refuses_actions_and_says_who_leads(
    serve: Serve, http: Http, pool: str, tmp_path: Path, amqp_url: str
) -> None:
    leader = Controller(controller_settings(pool, tmp_path / "a", driver={"kind": "noop"}))
    leader_api = ApiServer(make_app(leader), host="127.0.0.1", port=0)
    await leader_api.start()
    leader.api_url = leader_api.url
    standby = Controller(controller_settings(pool, tmp_path / "b", driver={"kind": "noop"}))
    tasks = [asyncio.create_task(leader.run(), name="leader")]
    try:
        await asyncio.wait_for(leader.wait_leader(), 30)
        tasks.append(asyncio.create_task(standby.run(), name="standby"))
        await eventually(lambda: standby.role.value == "standby", what="a standby")
        api = http(await serve(Running(standby, tasks[1]), token=TOKEN))

        async def refusal() -> dict[str, Any] | None:
            answer = await api.post("/actions/warm", json={"key": "k"}, headers=ACT)
            assert answer.status_code == 409
            doc: dict[str, Any] = answer.json()
            return doc if doc.get("leader") else None  # the broker names the owner lazily

        doc = await eventually(refusal, what="the refusal pointing at the leader")
        assert doc["role"] == "standby"
        assert doc["leader"] == {"instance": leader.instance, "api": leader_api.url}
        for path, body in (("/actions/stop", {"key": "k"}), ("/actions/poison/drop", {"id": "x"})):
            assert (await api.post(path, json=body, headers=ACT)).status_code == 409, path
        status = (await api.get("/status", headers=ACT)).json()
        assert status["leader"]["instance"] == leader.instance
        assert leader.session is not None and leader.session.tracker.state.value.groups == {}
    finally:
        for controller in (standby, leader):
            controller.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        await leader_api.stop()


async def test_poison_entries_are_listed_replayed_and_dropped(
    make_controller: MakeController,
    serve: Serve,
    http: Http,
    pool: str,
    amqp_url: str,
) -> None:
    running = await make_controller(pool, driver={"kind": "noop"})
    api = http(await serve(running, token=TOKEN))
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{pool}-req-xchg", ensure=False)
        for n in range(2):  # invalid keys without reply_to: kept as poison
            await exchange.publish(aio_pika.Message(b"%d" % n), routing_key=f"bad\x00{n}")

    async def listed() -> list[dict[str, Any]] | None:
        doc = (await api.get("/poison", headers=ACT)).json()
        return doc["entries"] if len(doc["entries"]) == 2 else None

    entries = await eventually(listed, what="two poison entries listed")
    assert {e["key"] for e in entries} == {"bad\x000", "bad\x001"}
    only = (await api.get("/poison", params={"key": "bad\x001"}, headers=ACT)).json()
    assert [e["key"] for e in only["entries"]] == ["bad\x001"]
    first, second = entries
    dropped = await api.post("/actions/poison/drop", json={"id": first["id"]}, headers=ACT)
    assert dropped.status_code == 200 and dropped.json()["key"] == first["key"]
    replayed = await api.post("/actions/poison/replay", json={"id": second["id"]}, headers=ACT)
    assert replayed.status_code == 200
    # The replayed request is refused again (its key is still invalid) and kept again: one
    # entry, a new one; the dropped one is gone for good.

    async def one_new() -> list[dict[str, Any]] | None:
        doc = (await api.get("/poison", headers=ACT)).json()
        ids = [e["id"] for e in doc["entries"]]
        return (
            doc["entries"] if len(ids) == 1 and ids[0] not in (first["id"], second["id"]) else None
        )

    [again] = await eventually(one_new, what="the replayed entry parked again")
    assert again["key"] == second["key"]


async def test_the_console_is_public_its_data_is_not_and_every_answer_is_locked_down(
    make_controller: MakeController,
    serve: Serve,
    http: Http,
    pool: str,
) -> None:
    running = await make_controller(pool, driver={"kind": "noop"})
    api = http(await serve(running, token=TOKEN))
    page = await api.get("/console/")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["X-Frame-Options"] == "DENY"
    script = await api.get("/console/app.js")
    assert script.status_code == 200 and script.headers["Content-Type"].startswith(
        "text/javascript"
    )
    assert "innerHTML" not in script.text
    assert (await api.get("/", follow_redirects=False)).headers["Location"] == "/console/"
    for path in ("/console/nope.js", "/console/..%2Fcli.py", "/console/%2e%2e/_api.py"):
        assert (await api.get(path)).status_code in (401, 404), path
    for path in ("/whoami", "/overview", "/timeline?key=k", "/poison", "/status"):
        refused = await api.get(path)
        assert refused.status_code == 401, path
        assert refused.headers["X-Frame-Options"] == "DENY"
    me = (await api.get("/whoami", headers=ACT)).json()
    assert me["token_required"] is True and me["client"] == "127.0.0.1"
    assert me["token"].startswith("sha256:") and TOKEN not in str(me)
    overview = (await api.get("/overview", headers=ACT)).json()
    counters = overview["counters"]
    assert counters["orphans"] == {"forwarded": 0, "invalid_key": 0} and counters["poison"] == 0
    # The noop driver cannot list: the group loop never asks it (drivers.base.Unlisted).
    assert "list/ok" not in counters.get("driver_calls", {})
    assert overview["cold_start"]["count"] == 0
    assert overview["routed"]["samples"]  # sampled from the start


@pytest.mark.slow
async def test_osrdyne_warm_and_stop(
    make_controller: MakeController, serve: Serve, client: Client, pool: str
) -> None:
    running = await make_controller(pool, groups={"stop_drain": 0.5})
    base = await serve(running, token=TOKEN)
    runner = CliRunner()
    common = ["--api", base, "--token", TOKEN]

    warmed = await asyncio.to_thread(runner.invoke, cli, ["warm", "cli-key", *common, "--wait"])
    assert warmed.exit_code == 0, warmed.output
    assert "warmed 'cli-key': queue bound" in warmed.output
    assert "worker(s) consuming" in warmed.output
    assert (await client.call(pool, "cli-key", b"x", timeout=60)).ok

    invalid = await asyncio.to_thread(runner.invoke, cli, ["warm", "a\x1bb", *common])
    assert invalid.exit_code == 1 and "control characters" in invalid.output
    no_token = await asyncio.to_thread(runner.invoke, cli, ["warm", "k", "--api", base])
    assert no_token.exit_code == 2

    stopped = await asyncio.to_thread(runner.invoke, cli, ["stop", "nobody", *common])
    assert stopped.exit_code == 1 and "no group" in stopped.output
    stopping = await asyncio.to_thread(runner.invoke, cli, ["stop", "cli-key", *common])
    assert stopping.exit_code == 0, stopping.output
    assert "unbound now" in stopping.output
