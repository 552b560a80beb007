"""The group cap and the broker's limits, end to end: a real broker, a real controller, real
echo workers. A new key beyond the cap is answered `overloaded` at once (with its reason),
exactly `max_groups` groups run through a burst, keys with a group keep working, and a new
key is admitted again once a group has stopped. The broker's limits show in `/status`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from osrdyne import Client, Status
from tests.conftest import Running
from tests.waiting import eventually

MakeController = Callable[..., Awaitable[Running]]


def overloaded(answer: Any, reason: str) -> bool:
    if answer.status != Status.OVERLOADED:
        return False
    body = answer.json()
    return bool(body["status"] == "overloaded" and body["details"]["reason"] == reason)


async def test_a_burst_gets_exactly_max_groups_then_admission_after_a_stop(
    pool: str, make_controller: MakeController, client: Client
) -> None:
    running = await make_controller(
        pool, groups={"max_groups": 2, "stop_drain": 0.5}, queues={"type": "classic"}
    )
    controller = running.controller
    keys = [f"burst-{i}" for i in range(8)]
    answers = await asyncio.gather(*(client.call(pool, k, k.encode(), timeout=90) for k in keys))
    served = [k for k, a in zip(keys, answers, strict=True) if a.ok]
    refused = [a for a in answers if not a.ok]
    assert len(served) == 2, [a.status for a in answers]
    assert all(overloaded(a, "max_groups") for a in refused), [a.body for a in refused]
    assert refused[0].json()["details"]["limit"] == 2
    assert await controller.driver.list() == set(served)

    # Keys with a group keep working; a new one is still refused.
    again = await client.call(pool, served[0], b"again", timeout=60)
    assert again.ok and again.body == b"again"
    assert overloaded(await client.call(pool, "late", timeout=60), "max_groups")
    doc = await controller.report()
    assert doc.admission is not None
    assert (doc.admission.groups, doc.admission.refusing) == (2, "max_groups")
    assert doc.admission.refused["max_groups"] == 7

    # One group stops, workers and queue: its place is free again. (Stopped again if a late
    # activity report of its worker, for the request above, made it Active again.)
    async def stopped() -> bool:
        if served[0] in controller.leading().tracker.state.value.groups:
            controller.leading().stop(served[0], by="test")
        admission = controller.status().admission
        return admission is not None and admission.groups == 1

    await eventually(stopped, timeout=90, interval=0.5, what="group stopped")
    assert served[0] not in await controller.driver.list()
    late = await client.call(pool, "late", b"in", timeout=90)
    assert late.ok and late.body == b"in"
    assert await controller.driver.list() == {served[1], "late"}


async def test_broker_limits_show_in_status_and_refuse_before_the_headroom(
    pool: str, make_pool: Callable[[], str], make_controller: MakeController, client: Client
) -> None:
    running = await make_controller(pool, queues={"type": "classic"})
    doc = await running.controller.report()
    broker = doc.broker
    assert broker is not None and broker.error is None
    assert broker.fd_total and broker.fd_used and broker.fd_used < broker.fd_total
    assert broker.proc_total and broker.proc_used and broker.queues is not None
    assert broker.read_at is not None and not broker.mem_alarm
    assert doc.admission is not None and doc.admission.broker_room
    assert doc.admission.refusing is None and doc.admission.max_groups == 1000
    metrics = running.controller.metrics
    await eventually(
        lambda: metrics.broker_limit.labels("fd")._value.get() == broker.fd_total,
        what="fd limit gauge",
    )

    # A headroom larger than the broker has: every new key is refused, at once.
    tight_pool = make_pool()  # a pool of its own, deleted after the test like `pool`
    tight = await make_controller(
        tight_pool, broker={"fd_headroom": broker.fd_total}, queues={"type": "classic"}
    )
    answer = await client.call(tight_pool, "new", timeout=60)
    assert overloaded(answer, "broker_fd"), answer.body
    tight_doc = await tight.controller.report()
    assert tight_doc.admission is not None and tight_doc.admission.refusing == "broker_fd"
    assert tight_doc.admission.broker_room == 0
    assert await tight.controller.driver.list() == set()
    refusals = tight.controller.metrics.admission_refusals.labels("broker_fd")._value.get()
    assert refusals == 1


async def test_an_operators_warm_beyond_the_cap_is_answered_503_with_the_reason(
    pool: str, make_controller: MakeController, serve: Any
) -> None:
    running = await make_controller(pool, groups={"max_groups": 1}, driver={"kind": "noop"})
    base = await serve(running)
    headers = {"X-Osrdyne-Action": "test"}
    async with httpx.AsyncClient(base_url=base, timeout=60) as api:
        first = await api.post("/actions/warm", json={"key": "one"}, headers=headers)
        assert first.status_code == 200, first.text
        again = await api.post("/actions/warm", json={"key": "one"}, headers=headers)
        assert again.status_code == 200  # a key with a group is always admitted
        refused = await api.post("/actions/warm", json={"key": "two"}, headers=headers)
    assert refused.status_code == 503
    body = refused.json()
    assert (body["status"], body["reason"]) == ("overloaded", "max_groups")
    assert set(running.controller.leading().tracker.state.value.groups) == {"one"}
