"""A broker whose management API collects no statistics is refused, said, and declared nothing.

RabbitMQ 4.x deprecates the management API's statistics (`management_metrics_collection`):
an operator who denies every deprecated feature (`deprecated_features.permit.* = false`)
gets a management API that lists queues without depths and nodes without figures; 3.x does
the same with `management_agent.disable_metrics_collector = true`. The controller reads both
(a queue's depth before deleting it, leaderless quorum queues by their missing statistics,
the nodes' limits): on such a broker it would take every idle queue for leaderless and never
retire a group. It refuses the broker at every session instead, says why in `last_error`,
and declares nothing of the pool, so a client is told the pool is not there.

A private node of the suite's release (tests/broker.py: VERSION) without statistics: on 4.0
every deprecated feature denied, on 3.10 the collector disabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from osrdyne import BrokerUnsuitable, Client, PoolNotFound
from osrdyne.controller import Controller
from tests import broker
from tests.conftest import controller_settings
from tests.faults.rabbit_node import NodeError, RabbitNode
from tests.waiting import eventually

# A node of its own (start and close, 15-60 s): run with the private node's tests.
pytestmark = [pytest.mark.broker_node, pytest.mark.timeout(300)]


class StatlessNode(RabbitNode):
    """A private node whose management API collects no statistics."""

    def _write_files(self) -> None:
        super()._write_files()
        if self.version == "3":
            with (self.base / "rabbitmq.conf").open("a") as conf:
                conf.write("management_agent.disable_metrics_collector = true\n")


@pytest.fixture
def statless_node() -> Iterator[RabbitNode]:
    base = Path(tempfile.mkdtemp(prefix="osrdyne-rabbit-nostats-"))
    node = StatlessNode(base, permit=())  # 4.0: every deprecated feature denied
    try:
        node.start()
    except NodeError as exc:
        node.close()
        pytest.fail(f"cannot start a private RabbitMQ node: {exc}")
    try:
        yield node
    finally:
        node.close()


async def test_a_broker_without_statistics_is_refused_and_said(
    statless_node: RabbitNode, pool: str, tmp_path: Path
) -> None:
    node = statless_node
    settings = controller_settings(
        pool, tmp_path, amqp={"url": node.amqp_url, "management_url": node.management_url}
    )
    controller = Controller(settings)
    task = asyncio.create_task(controller.run(), name=f"controller {pool}")
    try:
        said = await eventually(
            lambda: _refusal(controller), what="the refusal said", timeout=60, interval=0.2
        )
        assert "collects no statistics" in said and "management_metrics_collection" in said
        if broker.VERSION == "4":
            assert "RabbitMQ 4." in said
        assert controller.session is None  # never led
        assert controller.sessions >= 1
        # Nothing of the pool was declared: a client is told at once.
        async with Client(node.amqp_url) as client:
            with pytest.raises(PoolNotFound):
                await client.call(pool, "k", b"x", timeout=10)
    finally:
        controller.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 30)
    assert task.done()
    assert BrokerUnsuitable.__name__ in (controller.last_error or "")


async def _refusal(controller: Controller) -> str | None:
    error = controller.last_error
    return error if error and BrokerUnsuitable.__name__ in error else None
