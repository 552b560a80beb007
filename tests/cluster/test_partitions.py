"""Links lost, nodes alive: partitions of the three-node cluster under load, for real.

Packet filter rules on the loopback interface (tests/cluster/network.py) cut one link while
every node and every other link goes on:

- the controller's node cut from both other nodes (a minority of one: `pause_minority` pauses
  it, and it closes its clients' connections);
- the caller's own connection silenced while its node lives, new connections to that node
  refused (the caller finds out by its heartbeat and moves to another node);
- a one-way cut: what the controller's node sends to the caller's node is dropped, the other
  way goes through;
- the link between the controller's node and the caller's node flapping (cut 3 s, restored
  3 s, five times);
- 10 % of the packets of the caller's connection dropped, both ways, for 20 s;
- fencing: two controllers, the leader's own link silenced while its node lives; the standby
  on another node takes over, and the two never lead at once (sampled from their own roles).

The controller and its workers go to node 1, the caller to node 3 (as in test_node_loss.py).
Requests are persistent and confirmed, replies go to a durable quorum queue: each scenario's
row (sent / ok / errors / lost / duplicated) goes to the reliability report
(docs/reliability.md). Outcomes are asserted, never timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable

import pytest

from osrdyne.controller import Role
from osrdyne.controller._effects.leadership import connection_name
from tests.cluster.conftest import Cluster, connection_port, node_of
from tests.cluster.network import Network
from tests.cluster.test_node_loss import report, start, under_load
from tests.conftest import Running
from tests.faults.conftest import Caller
from tests.faults.report import Tally
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)

#: A heartbeat of 2 s in every URL: a silenced connection is found out within seconds.
HEARTBEAT = 2
#: How long each cut lasts: longer than the heartbeats and the nodes' Erlang tick (8 s).
CUT = 20.0


async def held(seconds: float, heal: Callable[[], None]) -> None:
    try:
        await asyncio.sleep(seconds)
    finally:
        heal()


class Scenario:
    """What every scenario starts from: a controller with echo workers on node 1, a caller
    on node 3, a heartbeat of 2 s in every URL, and the cluster's links to cut."""

    def __init__(
        self,
        cluster: Cluster,
        pool: str,
        network: Network,
        make_controller: Callable[..., Awaitable[Running]],
        make_caller: Callable[..., Awaitable[Caller]],
        make_tally: Callable[..., Tally],
    ) -> None:
        self.cluster, self.pool, self.network = cluster, pool, network
        self.make_controller = make_controller
        self._make_caller, self._make_tally = make_caller, make_tally

    async def start(self, scenario: str, note: str) -> tuple[Running, Caller]:
        """The controller, its warm keys and the caller, the row named `scenario`."""
        tally = self._make_tally(scenario, note)
        self.running, self.caller = await start(
            self.cluster,
            self.pool,
            self.make_controller,
            self._make_caller,
            tally,
            heartbeat=HEARTBEAT,
        )
        return self.running, self.caller

    async def controller_node(self) -> int:
        return await node_of(self.cluster, f"osrdyne {self.pool} ")

    async def caller_link(self) -> tuple[int, int]:
        return await connection_port(self.cluster, self.caller.name)

    async def run(self, fault: Callable[[], Awaitable[None]]) -> None:
        """Load, the fault, more load; the row asserted: nothing lost, every request `ok`."""
        await under_load(self.caller, self.pool, fault)
        await report(self.cluster, self.pool, self.running, self.caller)


@pytest.fixture
def scenario(
    cluster_pool: str,
    healthy_cluster: Cluster,
    network: Network,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> Scenario:
    return Scenario(
        healthy_cluster, cluster_pool, network, make_controller, make_caller, make_tally
    )


async def test_the_controllers_node_cut_from_the_others(scenario: Scenario) -> None:
    running, _ = await scenario.start(
        f"partition: the controller's node cut from both others for {CUT:.0f} s",
        "a minority of one: pause_minority pauses it and closes its clients' connections",
    )
    node, network = await scenario.controller_node(), scenario.network
    sessions = running.controller.sessions

    async def fault() -> None:
        network.isolate(node)
        await held(CUT, network.heal)

    await scenario.run(fault)
    assert running.controller.sessions > sessions  # it moved off the paused node


async def test_a_client_cut_from_its_node_while_the_node_lives(scenario: Scenario) -> None:
    _, caller = await scenario.start(
        f"partition: the caller's connection silenced for {CUT:.0f} s, its node alive",
        "new connections to that node refused too: the caller moves by its heartbeat",
    )
    (node, port), network = await scenario.caller_link(), scenario.network
    epoch = caller.epoch

    async def fault() -> None:
        network.cut_connection(node, port)
        network.refuse_new_connections(node)
        await held(CUT, network.heal)

    await scenario.run(fault)
    assert caller.epoch > epoch  # the caller found out and reconnected


async def test_a_one_way_cut_between_two_nodes(scenario: Scenario) -> None:
    await scenario.start(
        f"partition: one way, the controller's node to the caller's node, for {CUT:.0f} s",
        "what node 1 sends to node 3 is dropped; what node 3 sends to node 1 goes through",
    )
    controller_node, (caller_node, _) = (
        await scenario.controller_node(),
        await scenario.caller_link(),
    )
    assert controller_node != caller_node
    network = scenario.network

    async def fault() -> None:
        network.cut(controller_node, caller_node, one_way=True)
        await held(CUT, network.heal)

    await scenario.run(fault)


async def test_a_link_between_two_nodes_flapping(scenario: Scenario) -> None:
    await scenario.start(
        "partition: the link between the controller's and the caller's nodes flapping "
        "(3 s cut, 3 s up, 5 times)",
        "shorter than the nodes' Erlang tick (8 s): the nodes may never see each other down",
    )
    controller_node, (caller_node, _) = (
        await scenario.controller_node(),
        await scenario.caller_link(),
    )
    network = scenario.network

    async def fault() -> None:
        for _ in range(5):
            network.cut(controller_node, caller_node)
            await held(3.0, network.heal)
            await asyncio.sleep(3.0)

    await scenario.run(fault)


async def test_packets_lost_on_the_callers_link(scenario: Scenario) -> None:
    _, caller = await scenario.start(
        f"lossy link: 10 % of the caller's packets dropped, both ways, for {CUT:.0f} s",
        "TCP retransmits; the heartbeat (2 s) may or may not give up on the connection",
    )
    (node, port), network = await scenario.caller_link(), scenario.network

    async def fault() -> None:
        network.lose_packets(node, port, 0.10)
        await held(CUT, network.heal)
        caller.tally.extra["caller reconnections"] = caller.epoch

    await scenario.run(fault)


class Roles:
    """Both controllers' own roles, sampled every 20 ms: when each led, and whether both
    ever led at once."""

    def __init__(self, *controllers: Running) -> None:
        self.controllers = controllers
        self.both: list[float] = []
        self.led: list[set[int]] = [set() for _ in controllers]
        self._task = asyncio.create_task(self._sample(), name="roles")

    async def _sample(self) -> None:
        t0 = time.monotonic()
        while True:
            leading = [r.controller.role is Role.LEADER for r in self.controllers]
            for i, lead in enumerate(leading):
                if lead:
                    self.led[i].add(int(time.monotonic() - t0))
            if all(leading):
                self.both.append(round(time.monotonic() - t0, 2))
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_the_leaders_link_silenced_the_standby_takes_over_never_both(
    scenario: Scenario,
) -> None:
    leader, caller = await scenario.start(
        f"fencing: the leader's connection silenced for {CUT:.0f} s, its node alive; a "
        "standby on another node",
        "the broker drops the silent leader (its P-leader queue goes), the standby leads",
    )
    cluster, pool, network = scenario.cluster, scenario.pool, scenario.network
    urls = cluster.urls(HEARTBEAT)
    standby = await scenario.make_controller(
        pool,
        wait=False,
        amqp={"url": urls[1:] + urls[:1], "management_url": cluster.management_urls},
        groups={"unbind_delay": 300, "stop_delay": 300},
        driver={
            "kind": "subprocess",
            "subprocess": {"command": [sys.executable, "-m", "worker_sdk.examples.echo"]},
        },
    )
    await eventually(lambda: standby.controller.role is Role.STANDBY, what="a standby")
    c = leader.controller
    node, port = await connection_port(cluster, connection_name(pool, c.instance, c.api_url))
    roles = Roles(leader, standby)
    try:

        async def fault() -> None:
            network.cut_connection(node, port)
            network.refuse_new_connections(node)
            await eventually(
                lambda: standby.controller.role is Role.LEADER,
                what="the standby leading",
                timeout=60,
            )
            await held(CUT, network.heal)

        await scenario.run(fault)
    finally:
        await roles.stop()
        # The row is written when the test ends: with every sample in it.
        caller.tally.extra["both leading (samples)"] = len(roles.both)
    assert roles.led[1], "the standby never led"
    assert not roles.both, f"both controllers led at once, at seconds {roles.both[:20]}"
