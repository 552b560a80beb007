"""The controller's Prometheus metrics, read through `/metrics` as a scraper would: cold starts,
orphans and their latency, the fast-path estimate, dead letters by reason, groups by state,
driver calls, control-loop passes. Real broker, controller and worker processes."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from osrdyne import Client, Status
from tests.operations.conftest import ServeApi, sample, scrape
from tests.waiting import eventually

#: A "worker" that never consumes: requests stay queued until the broker kills them.
ASLEEP = {"command": [sys.executable, "-c", "import time; time.sleep(3600)"]}


async def test_a_cold_request_is_an_orphan_and_a_cold_start(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    http = await serve_api(running)
    assert (await client.call(pool, "cold", b"hi", timeout=60)).ok

    async def cold_start_counted() -> Any:
        samples = await scrape(http)
        return samples if sample(samples, "osrdyne_cold_start_seconds_count") == 1 else None

    samples = await eventually(cold_start_counted, what="cold start observed")
    assert sample(samples, "osrdyne_orphans_total", outcome="forwarded") == 1
    assert sample(samples, "osrdyne_requests_routed_total", path="orphan") == 1
    assert sample(samples, "osrdyne_orphan_handling_seconds_count") == 1
    assert sample(samples, "osrdyne_cold_start_seconds_sum") > 0
    assert sample(samples, "osrdyne_driver_calls_total", op="start", outcome="ok") == 1
    assert sample(samples, "osrdyne_driver_calls_total", op="list", outcome="ok") >= 1
    assert sample(samples, "osrdyne_control_loop_iteration_seconds_count", loop="queues") >= 1
    assert sample(samples, "osrdyne_control_loop_iteration_seconds_count", loop="groups") >= 1
    assert sample(samples, "osrdyne_activity_events_total", event="ready") == 1
    assert sample(samples, "osrdyne_leader") == 1


@pytest.mark.slow
async def test_fast_path_requests_are_counted_from_the_exchange_statistics(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    http = await serve_api(running)
    assert (await client.call(pool, "warm", b"first", timeout=60)).ok  # orphan path
    for i in range(5):
        assert (await client.call(pool, "warm", f"{i}".encode(), timeout=30)).ok

    async def fast_counted() -> Any:
        samples = await scrape(http)
        fast = sample(samples, "osrdyne_requests_routed_total", path="fast")
        return samples if fast == 5 else None

    # The broker refreshes exchange statistics every few seconds: the estimate lags, then
    # settles at the fast-path requests (the controller read the exchange before leading).
    samples = await eventually(fast_counted, what="5 fast-path requests counted", timeout=60)
    assert sample(samples, "osrdyne_requests_routed_total", path="orphan") == 1
    assert sample(samples, "osrdyne_request_exchange_published") >= 7  # 6 calls + 1 republish


async def test_a_dead_letter_is_counted_by_reason(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool, queues={"message_ttl": 1}, driver={"subprocess": ASLEEP})
    http = await serve_api(running)
    response = await client.call(pool, "sleepy", b"x", timeout=60)
    assert response.status == Status.EXPIRED
    samples = await scrape(http)
    assert sample(samples, "osrdyne_dead_letters_total", reason="expired") == 1
    assert sample(samples, "osrdyne_dead_letters_total", reason="delivery_limit") == 0
    assert sample(samples, "osrdyne_poison_total") == 0


async def test_groups_by_state_and_generation_lag_are_gauged(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    http = await serve_api(running)
    for key in ("a", "b"):
        assert (await client.call(pool, key, b"x", timeout=60)).ok

    async def gauged() -> Any:
        samples = await scrape(http)
        return samples if sample(samples, "osrdyne_worker_groups", state="active") == 2 else None

    samples = await eventually(gauged, what="two active groups gauged")
    assert sample(samples, "osrdyne_worker_groups", state="unbound") == 0
    assert ("osrdyne_generation_lag", (("loop", "queues"),)) in samples
    assert ("osrdyne_generation_lag", (("loop", "groups"),)) in samples
