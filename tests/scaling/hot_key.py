"""A hot key under load until its group is grown, then quiet until it is back to one worker:
what every driver that sizes groups must do with a real controller and real workers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from osrdyne import Client
from osrdyne.controller import Controller
from tests.waiting import eventually

#: Worker settings for the scaling tests: the echo worker with a 50 ms handler, one at a time.
WORKER_ENV = {
    "WORKER_ACTIVITY_INTERVAL": "0.5",
    "WORKER_DRAIN_TIMEOUT": "5",
    "WORKER_CONCURRENCY": "1",
    "ECHO_DELAY": "0.05",
}
SCALING = {"min_workers": 1, "scale_in_window": 3, "interval": 0.5}


async def grow_and_shrink(
    controller: Controller,
    client: Client,
    pool: str,
    *,
    key: str,
    most: int,
    drained: Callable[[], Any],
    timeout: float = 60,
) -> None:
    """Load `key` until its group runs `most` workers, then stop the load and wait until it
    is back to one and `drained()` holds; every call answered once, `ok`, with its body."""
    driver: Any = controller.driver
    first = await client.call(pool, key, b"first", timeout=timeout)
    assert (first.status, first.body) == ("ok", b"first")
    await eventually(lambda: driver.sizes().get(key) == 1, timeout=timeout, what="listed")

    answers: dict[int, tuple[str, bytes]] = {}
    sent = 0
    load_on = True

    async def caller() -> None:
        nonlocal sent
        while load_on:
            n = sent
            sent += 1
            response = await client.call(pool, key, f"{n}".encode(), timeout=120)
            assert n not in answers
            answers[n] = (response.status, response.body)

    callers = [asyncio.create_task(caller(), name=f"caller {lane}") for lane in range(24)]
    try:
        await eventually(lambda: driver.sizes().get(key) == most, timeout=timeout, what="grown")
    finally:
        load_on = False
        done = await asyncio.gather(*callers, return_exceptions=True)
    assert [r for r in done if r is not None] == []
    assert len(answers) == sent
    assert all((status, body) == ("ok", f"{n}".encode()) for n, (status, body) in answers.items())

    # The load is gone: back to one worker after the window, the others drained away.
    await eventually(lambda: driver.sizes().get(key) == 1, timeout=timeout, what="shrunk")
    await eventually(drained, timeout=timeout, what="extra workers gone")
    last = await client.call(pool, key, b"last", timeout=timeout)
    assert (last.status, last.body) == ("ok", b"last")
    with contextlib.suppress(AssertionError):  # a duplicate answer would arrive late
        await eventually(lambda: client.late_replies, timeout=1)
    assert client.late_replies == 0

    registry = controller.metrics.registry
    grew = sum(
        registry.get_sample_value("osrdyne_scaling_decisions_total", {"reason": r}) or 0
        for r in ("backlog", "arrival", "busy", "maximum")
    )
    shrank = registry.get_sample_value("osrdyne_scaling_decisions_total", {"reason": "idle"})
    assert grew >= 1 and (shrank or 0) >= 1
