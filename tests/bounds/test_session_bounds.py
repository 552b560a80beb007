"""Start-up and stop that never wedge: a controller whose broker stops answering (a TCP proxy
that stops forwarding, as a node paused with SIGSTOP looks) ends its session and retries
instead of hanging, and a controller asked to stop ends within its grace whatever stage it
is in. Real broker, real controller; no timing threshold but the grace the controller
promises (a generous bound on top of it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from osrdyne.controller import Role
from tests.bounds.conftest import AMQP_URL, MANAGEMENT_URL
from tests.conftest import Running
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually

MakeController = Callable[..., Awaitable[Running]]
MakeProxy = Callable[[str], Awaitable[tuple[TcpProxy, str]]]

#: Short bounds, so a test waits seconds, not minutes.
FAST = {"connect_timeout": 1.0, "startup_timeout": 2.0, "stop_grace": 2.0}
#: Margin on top of the grace for the driver's close and the event loop (a bound, not a
#: measure: the grace is what the controller promises).
MARGIN = 15.0


@pytest.mark.slow
async def test_a_broker_that_stops_answering_ends_the_session_and_it_retries(
    pool: str, make_controller: MakeController, make_proxy: MakeProxy
) -> None:
    amqp, amqp_url = await make_proxy(AMQP_URL + "?heartbeat=1")
    amqp.stall()  # handshakes never complete
    running = await make_controller(
        pool, wait=False, amqp={"url": amqp_url, **FAST}, driver={"kind": "noop"}
    )
    controller = running.controller
    await eventually(lambda: controller.sessions >= 3, timeout=60, what="sessions retried")
    assert controller.role is Role.CONNECTING and controller.last_error
    assert "Timeout" in controller.last_error or "timeout" in controller.last_error

    amqp.resume()
    await asyncio.wait_for(controller.wait_leader(), 60)
    before = controller.sessions
    amqp.stall()  # as leader: the heartbeat notices, the session ends, new ones time out
    await eventually(lambda: controller.sessions > before + 1, timeout=60, what="new sessions")
    assert controller.role is not Role.LEADER

    amqp.resume()
    await asyncio.wait_for(controller.wait_leader(), 60)
    await running.stop()


async def test_a_management_api_that_stops_answering_bounds_start_up(
    pool: str, make_controller: MakeController, make_proxy: MakeProxy
) -> None:
    management, management_url = await make_proxy(MANAGEMENT_URL)
    management.stall()  # the policy cannot be applied, nor queues listed
    running = await make_controller(
        pool,
        wait=False,
        amqp={"management_url": management_url, **FAST},
        driver={"kind": "noop"},
    )
    controller = running.controller
    await eventually(lambda: controller.sessions >= 2, timeout=60, what="sessions retried")
    assert controller.role is not Role.LEADER
    management.resume()
    await asyncio.wait_for(controller.wait_leader(), 60)
    doc = await controller.report()
    assert doc.broker is not None and doc.broker.fd_total
    await running.stop()


async def test_stop_ends_within_grace_while_the_broker_does_not_answer(
    pool: str, make_controller: MakeController, make_proxy: MakeProxy
) -> None:
    amqp, amqp_url = await make_proxy(AMQP_URL)
    management, management_url = await make_proxy(MANAGEMENT_URL)
    running = await make_controller(
        pool,
        amqp={"url": amqp_url, "management_url": management_url, **FAST},
        driver={"kind": "noop"},
    )
    # The leader's broker stops answering (no heartbeat set: nothing notices), then a stop.
    amqp.stall()
    management.stall()
    running.controller.stop()
    await asyncio.wait_for(running.task, FAST["stop_grace"] + MARGIN)

    # And a stop during a handshake that never completes.
    stalled = await make_controller(
        f"{pool}-b", wait=False, amqp={"url": amqp_url, **FAST}, driver={"kind": "noop"}
    )
    await eventually(lambda: stalled.controller.sessions >= 1, what="a session started")
    stalled.controller.stop()
    await asyncio.wait_for(stalled.task, FAST["stop_grace"] + MARGIN)
