"""The worker SDK's Prometheus metrics: requests by outcome and handler latency, served on
127.0.0.1 when `WORKER_METRICS_PORT` is set (port 0 here: any free port)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from osrdyne import Client, Status
from tests import broker
from tests.waiting import eventually
from worker_sdk import HandlerError, Request, Worker


async def test_worker_metrics_count_outcomes_and_time_handlers(
    make_controller: Any, client: Client, pool: str
) -> None:
    await make_controller(pool, driver={"kind": "noop"})
    key = "measured"
    worker = Worker(broker.worker_settings(pool, key, metrics_port=0))

    @worker.handler()
    async def echo(request: Request) -> bytes:
        return request.body

    @worker.handler("fail")
    async def fail(request: Request) -> None:
        raise HandlerError("no")

    stop = asyncio.Event()
    task = asyncio.create_task(worker.serve(stop), name="in-process measured worker")
    try:
        for _ in range(3):
            assert (await client.call(pool, key, b"x", timeout=60)).ok
        failed = await client.call(pool, key, b"x", path="fail", timeout=60)
        assert failed.status == Status.WORKER_ERROR
        port = await eventually(lambda: worker.metrics.port, what="metrics served")
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("osrdyne_worker_requests_total", (("outcome", "ok"),))] == 3
    assert samples[("osrdyne_worker_requests_total", (("outcome", "failed"),))] == 1
    assert samples[("osrdyne_worker_requests_total", (("outcome", "requeued"),))] == 0
    assert samples[("osrdyne_worker_handler_seconds_count", (("path", ""),))] == 3
    assert samples[("osrdyne_worker_handler_seconds_count", (("path", "fail"),))] == 1
    assert worker.stats["ok"] == 3 and worker.stats["failed"] == 1
