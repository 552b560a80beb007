"""A request queue that the broker cannot count is never deleted with a request in it.

RabbitMQ answers a passive declare of a quorum queue whose Raft member is down with 0 messages,
whatever the queue holds. That is how a queue declared an instant before a broker SIGKILL can
come back (docs/reliability.md), and how an idle group's queue was once deleted with a request
in it. Here the member is stopped for real, on the private node (`ra:stop_server` through
`rabbitmqctl eval`), while a request waits in the queue of a group that has no worker; the
group goes idle and stops again and again, and its queue must stay. (Depending on timing, the
management API then shows the queue's last count or none at all: the controller keeps the
queue either way.)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import httpx
import pytest

from osrdyne import Status
from osrdyne.wire import PoolNames
from tests.conftest import Running
from tests.faults.conftest import Caller
from tests.faults.rabbit_node import NodeError, RabbitNode
from tests.faults.report import Tally
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)


async def _queue(node: RabbitNode, queue: str) -> dict[str, object] | None:
    """The queue as the management API shows it; None when it does not exist."""
    async with httpx.AsyncClient(auth=("guest", "guest"), timeout=10) as http:
        reply = await http.get(f"{node.management_url}/api/queues/%2F/{queue}")
    if reply.status_code == 404:
        return None
    reply.raise_for_status()
    info: dict[str, object] = reply.json()
    return info


async def _exists(node: RabbitNode, queue: str) -> bool:
    return await _queue(node, queue) is not None


async def test_a_queue_whose_raft_member_is_down_is_kept_and_served_later(
    rabbit_node: RabbitNode,
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = rabbit_node
    tally = make_tally(
        "quorum request queue's Raft member down when its idle group stops",
        "the broker counts 0 messages: the queue is kept (the management API counts it, or "
        "cannot), and the request is answered once the member is back",
    )
    amqp = {"url": node.amqp_url, "management_url": node.management_url}
    queue = PoolNames(pool).request_queue("held")
    # No worker will ever consume: the request waits in its queue.
    idle = await make_controller(
        pool,
        amqp=amqp,
        driver={"kind": "noop"},
        groups={"unbind_delay": 1, "stop_delay": 1, "loop_interval": 0.5},
    )
    caller = await make_caller(tally, url=node.amqp_url, reply_queue=f"{pool}-replies")
    sent = await caller.send(pool, "held", b"kept")

    async def held() -> bool:
        info = await _queue(node, queue)
        return info is not None and info.get("messages") == 1

    await eventually(held, what="the request waits in its queue", timeout=30)
    node.queue_member(queue, "stop_server")
    member_stopped = True
    try:
        with caplog.at_level(logging.INFO, logger="osrdyne.controller._effects.tracker"):

            def stops() -> int:
                return sum("unbound for" in r.getMessage() for r in caplog.records)

            # Every unbind_delay + stop_delay the idle group stops and its queue would go.
            await eventually(lambda: stops() >= 2, what="two stops of the group", timeout=60)
        assert await _exists(node, queue), "the request queue was deleted"
        node.queue_member(queue, "restart_server")
        member_stopped = False
        await eventually(held, what="the member back with the request", timeout=30)
    finally:
        if member_stopped:
            with contextlib.suppress(NodeError):  # the queue may be gone: the test fails anyway
                node.queue_member(queue, "restart_server")

    await idle.stop()
    await make_controller(pool, amqp=amqp)  # echo workers this time
    assert not await caller.settle(90)
    assert tally.status_of(sent) == Status.OK
    assert caller.bodies[sent] == b"kept"
