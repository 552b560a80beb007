"""The controller's HTTP API against a running controller: health and readiness, the status
document through a group's life (Active -> Unbound -> stopped), queue depth and oldest message
age, the scaling pulse under a backlog, and the bearer token."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from osrdyne import Client
from tests.operations.conftest import ServeApi
from tests.waiting import eventually

NOOP = {"kind": "noop"}  # queues are made, nobody consumes: requests wait


@contextlib.asynccontextmanager
async def waiting_call(client: Client, pool: str, key: str) -> AsyncIterator[None]:
    """A call left waiting in its queue while the block runs (cancelled afterwards)."""
    task = asyncio.create_task(client.call(pool, key, b"x", timeout=120))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def group(http: httpx.AsyncClient, key: str) -> dict[str, Any] | None:
    doc = (await http.get("/status")).json()
    found: dict[str, Any] | None = doc["groups"].get(key)
    return found


@pytest.mark.slow
async def test_health_ready_and_the_status_of_an_active_group(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    http = await serve_api(running)
    assert (await http.get("/health")).json() == {"status": "alive"}
    assert (await http.get("/ready")).status_code == 200
    assert (await client.call(pool, "k", b"x", timeout=60)).ok

    async def consumed() -> Any:
        g = await group(http, "k")
        return g if g and g.get("consumers") == 1 and g.get("last_activity") else None

    g = await eventually(consumed, what="group k consumed, with activity")
    assert g["state"] == "active" and g["queue"] == "active" and g["running"] is True
    assert g["messages"] == 0 and g["messages_ready"] == 0 and g["messages_unacknowledged"] == 0
    assert g["oldest_message_age"] is None  # quorum queues do not report it
    assert g["restarts"] == 0
    [worker] = g["workers"]
    assert isinstance(worker["pid"], int) and worker["adopted"] is False
    doc = (await http.get("/status")).json()
    assert doc["pool"] == pool and doc["role"] == "leader" and doc["driver"] == "subprocess"
    gens = doc["generations"]
    assert gens["tracker"] >= 1 and gens["queues"] >= 1 and gens["groups"] >= 1


@pytest.mark.slow
async def test_status_follows_a_group_from_active_to_unbound_to_stopped(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool, groups={"unbind_delay": 1.5, "stop_delay": 1.5})
    http = await serve_api(running)
    assert (await client.call(pool, "brief", b"x", timeout=60)).ok
    seen: list[str] = []

    async def gone() -> bool:
        g = await group(http, "brief")
        if g is None:
            return True
        if not seen or seen[-1] != g["state"]:
            seen.append(g["state"])
        return False

    await eventually(gone, interval=0.05, what="group stopped and gone from the status")
    assert seen[0] == "active"
    assert "unbound" in seen and seen.index("unbound") > 0
    assert await running.controller.driver.list() == set()
    assert (await http.get("/status")).json()["groups"] == {}


@pytest.mark.slow
async def test_oldest_message_age_of_a_classic_queue(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool, driver=NOOP, queues={"type": "classic"})
    http = await serve_api(running)
    async with waiting_call(client, pool, "queued"):

        async def aged() -> Any:
            # The management API refreshes the head timestamp and the counts separately.
            g = await group(http, "queued")
            ready = g and g.get("oldest_message_age") is not None and g["messages_ready"] == 1
            return g if ready else None

        g = await eventually(aged, what="oldest message age and one ready message reported")
    assert g["oldest_message_age"] >= 0
    assert g["consumers"] == 0


@pytest.mark.slow
async def test_the_scaling_pulse_turns_503_with_a_backlog(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool, driver=NOOP, api={"scaling_backlog_per_consumer": 0})
    http = await serve_api(running)
    calm = await http.get("/pulse/scaling")
    assert calm.status_code == 200 and calm.json()["status"] == "ok"
    async with waiting_call(client, pool, "backlog"):

        async def behind() -> httpx.Response | None:
            response = await http.get("/pulse/scaling")
            return response if response.status_code == 503 else None

        response = await eventually(behind, what="pulse reports the backlog")
    doc = response.json()
    assert doc["status"] == "behind" and doc["threshold"] == 0 and doc["behind"] == 1
    assert doc["groups"] == {
        "backlog": {"messages_ready": 1, "consumers": 0, "backlog_per_consumer": None}
    }


async def test_the_bearer_token_is_required_but_for_health(
    controller: Any, serve_api: ServeApi
) -> None:
    http = await serve_api(controller, token="s3cret")
    assert (await http.get("/health")).status_code == 200
    for path in ("/ready", "/status", "/metrics", "/pulse/scaling"):
        assert (await http.get(path)).status_code == 401, path
        wrong = {"Authorization": "Bearer nope"}
        assert (await http.get(path, headers=wrong)).status_code == 401, path
        right = {"Authorization": "Bearer s3cret"}
        assert (await http.get(path, headers=right)).status_code in (200, 503), path


@pytest.mark.slow
async def test_status_pages_filters_and_sorts_groups_from_memory(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    """Six groups (noop driver: their requests wait); a page, a filter, an order, the summary
    alone; a query that is not one is answered 400."""
    running = await make_controller(pool, driver=NOOP)
    http = await serve_api(running)
    keys = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    async with contextlib.AsyncExitStack() as calls:
        for n, key in enumerate(keys):
            for _ in range(n + 1):  # `zeta` has the most waiting requests
                await calls.enter_async_context(waiting_call(client, pool, key))

        async def counted() -> dict[str, Any] | None:
            doc: dict[str, Any] = (await http.get("/status", params={"sort": "messages"})).json()
            groups = list(doc["groups"].values())
            ready = doc["groups_matching"] == 6 and all(
                (g["messages"] or 0) == n for g, n in zip(groups, [6, 5, 4, 3, 2, 1], strict=True)
            )
            return doc if ready else None

        doc = await eventually(counted, what="six groups counted", timeout=60)
        assert list(doc["groups"]) == ["zeta", "epsilon", "delta", "gamma", "beta", "alpha"]
        assert doc["queues_read_at"] is not None and doc["queues_error"] is None
        assert doc["group_counts"] == {"active": 6}

        page = (await http.get("/status", params={"limit": 2, "offset": 1})).json()
        assert list(page["groups"]) == ["beta", "delta"] and page["groups_matching"] == 6
        found = (await http.get("/status", params={"key": "eta"})).json()
        assert sorted(found["groups"]) == ["beta", "zeta"] and found["groups_matching"] == 2
        assert (await http.get("/status", params={"state": "unbound"})).json()["groups"] == {}
        summary = (await http.get("/status", params={"limit": 0})).json()
        assert summary["groups"] == {} and summary["group_counts"] == {"active": 6}
        reverse = (await http.get("/status", params={"descending": "true"})).json()
        assert list(reverse["groups"])[0] == "zeta"
        # The console's columns, filters and counts, all served the same way.
        fewest = {"sort": "ready", "descending": "true", "limit": 1}
        assert list((await http.get("/status", params=fewest)).json()["groups"]) == ["alpha"]
        nobody = (await http.get("/status", params={"sort": "consumers"})).json()
        assert list(nobody["groups"]) == sorted(keys)  # ties go by key
        any_case = (await http.get("/status", params={"key": "ETA"})).json()
        assert sorted(any_case["groups"]) == ["beta", "zeta"]
        exact = (await http.get("/status", params={"key": "beta", "exact": "true"})).json()
        assert list(exact["groups"]) == ["beta"]
        assert (await http.get("/status", params={"key": "Beta", "exact": "true"})).json()[
            "groups"
        ] == {}
        healthy = (await http.get("/status", params={"health": "ok", "limit": 0})).json()
        assert healthy["groups_matching"] == 6 and healthy["groups_stalled"] == 0
        for bad in (
            {"limit": -1},
            {"sort": "evil"},
            {"state": "x"},
            {"health": "x"},
            {"nope": "1"},
        ):
            answer = await http.get("/status", params=bad)
            assert answer.status_code == 400 and "bad status query" in answer.json()["error"]
