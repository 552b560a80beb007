"""The second fault too: one client, created once, through repeated node losses.

The operator's scenario of issue 18, four cycles in one run on the three-node cluster: the
controller, its echo workers and one long-lived `osrdyne.Client` (direct reply-to, the
default) all hold their connections on one node; calls go to three keys one after another.
Each cycle SIGKILLs a node holding none of the pool's connections and restarts it (quorum
queue leaders move), then SIGKILLs the node holding every connection (the client, the
controller and the workers move). After each kill the client gets an `ok` again, and then a
run of calls that are all `ok`: a publisher whose channel the broker keeps refusing (negative
confirms after a queue leader moved) moves to a fresh channel instead of failing for good.

Timings are printed (the reliability report in docs/reliability.md quotes them), never
asserted: the bounds below only end a test that would otherwise hang.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from osrdyne import Client, exceptions
from osrdyne.controller import NodeReport
from tests.cluster.conftest import Cluster, echo_controller, node_of
from tests.conftest import Running
from tests.waiting import eventually

#: Minutes of node losses, one after another: the `chaos` tier (tests/components.py).
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

KEYS = ["key-a", "key-b", "key-c"]
CYCLES = 4
#: Seconds of calls, one after another, that must all be `ok` once the keys answer again.
STREAK = 10.0
#: Bound on the wait for the first `ok` after a kill (the issue's figure is 15 s).
RECOVERY_BOUND = 120.0


async def one_call(client: Client, pool: str, key: str, errors: Counter[str]) -> bool:
    """One call; its outcome counted; True for an `ok`."""
    try:
        response = await client.call(pool, key, b"ping", timeout=5)
    except exceptions.ClientError as exc:
        errors[type(exc).__name__] += 1
        return False
    if response.status != "ok":
        errors[f"status {response.status}"] += 1
        return False
    return True


async def recover(client: Client, pool: str, errors: Counter[str]) -> float:
    """Seconds until every key has answered `ok` again (calls one after another over the
    keys; a queue whose leader was on the lost node refuses while it elects another), bounded.
    """
    t0 = time.monotonic()
    answered: set[str] = set()
    i = 0
    while time.monotonic() - t0 < RECOVERY_BOUND:
        key = KEYS[i % len(KEYS)]
        i += 1
        if await one_call(client, pool, key, errors):
            answered.add(key)
            if answered == set(KEYS):
                return time.monotonic() - t0
        else:
            await asyncio.sleep(0.05)
    raise AssertionError(f"keys not answered within {RECOVERY_BOUND}s of the kill: {errors}")


async def streak(client: Client, pool: str) -> tuple[int, Counter[str]]:
    """`STREAK` seconds of calls one after another: how many, and the failures among them."""
    failures: Counter[str] = Counter()
    t0 = time.monotonic()
    calls = 0
    while time.monotonic() - t0 < STREAK:
        await one_call(client, pool, KEYS[calls % len(KEYS)], failures)
        calls += 1
    return calls, failures


async def test_one_client_through_four_cycles_of_node_losses(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    cluster, pool = healthy_cluster, cluster_pool
    await make_controller(pool, **echo_controller(cluster))
    name = f"four-cycles {pool}"
    figures: list[dict[str, object]] = []
    async with Client(cluster.amqp_urls, name=name) as client:
        for key in KEYS:
            (await client.call(pool, key, b"warm-up", timeout=60)).raise_for_status()
        for cycle in range(1, CYCLES + 1):
            busy = await node_of(cluster, name)
            controller_node = await node_of(cluster, f"osrdyne {pool} ")
            idle = next(n for n in (1, 2, 3) if n not in (busy, controller_node))
            row: dict[str, object] = {"cycle": cycle, "idle node": idle, "busy node": busy}

            # A node without connections lost and back: leaders of the keys' queues move.
            await asyncio.to_thread(cluster.kill, idle)
            errors: Counter[str] = Counter()
            row["first ok after idle kill s"] = round(await recover(client, pool, errors), 2)
            await asyncio.to_thread(cluster.start, idle)
            await eventually(
                lambda n=idle: idle_back(cluster, n), what=f"node {idle} back", timeout=120
            )
            row["calls after idle kill"], failures = await streak(client, pool)
            assert not failures, (row, failures)

            # Then the node holding every connection.
            await asyncio.to_thread(cluster.kill, busy)
            row["first ok after busy kill s"] = round(await recover(client, pool, errors), 2)
            row["calls after busy kill"], failures = await streak(client, pool)
            row["errors before recovery"] = dict(errors)
            row["channel renewals"] = client.channel_renewals
            print("CYCLE", row)
            figures.append(row)
            assert not failures, (row, failures)
            await asyncio.to_thread(cluster.start, busy)
            await eventually(
                lambda n=busy: idle_back(cluster, n), what=f"node {busy} back", timeout=120
            )
    print("FOUR CYCLES", figures)


async def idle_back(cluster: Cluster, n: int) -> bool:
    try:
        return n in await cluster.running()
    except RuntimeError:
        return False


async def test_status_shows_each_node_and_the_pools_share_of_it(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    """`/status` lists the three nodes: running, the pool's connections and request-queue
    leaders on each; a node killed shows as down, with the members the pool misses there."""
    cluster, pool = healthy_cluster, cluster_pool
    running = await make_controller(
        pool,
        amqp={"url": cluster.amqp_urls, "management_url": cluster.management_urls},
        groups={"unbind_delay": 600, "stop_delay": 600},
        broker={"check_interval": 0.5},
    )
    async with Client(cluster.amqp_urls, name=f"nodes {pool}") as client:
        for key in KEYS:
            (await client.call(pool, key, b"warm-up", timeout=60)).raise_for_status()

    async def nodes() -> list[NodeReport] | None:
        doc = await running.controller.report()
        found = doc.broker_nodes
        leaders = sum(n.queue_leaders for n in found)
        connections = sum(n.pool_connections or 0 for n in found)
        # The controller's connection and one worker per key.
        return found if leaders == len(KEYS) and connections >= 1 + len(KEYS) else None

    found = await eventually(nodes, what="three nodes with the pool's share", timeout=60)
    assert [n.name for n in found] == [cluster.name(n) for n in (1, 2, 3)]
    assert all(n.running and not n.partitions and n.members_missing == 0 for n in found)
    controller_node = await node_of(cluster, f"osrdyne {pool} ")
    victim = next(n for n in (1, 2, 3) if n != controller_node)
    await asyncio.to_thread(cluster.kill, victim)

    async def down() -> NodeReport | None:
        doc = await running.controller.report()
        node = next((n for n in doc.broker_nodes if n.name == cluster.name(victim)), None)
        # Every request queue has a member on every node: each misses the one there, and
        # none is led from there once its leader moved.
        shown = (
            node is not None
            and not node.running
            and node.members_missing == len(KEYS)
            and node.queue_leaders == 0
        )
        return node if shown else None

    await eventually(down, what=f"node {victim} shown down", timeout=90)


async def test_a_majority_lost_then_regained(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    """Two of the three nodes killed: every quorum queue loses its majority. Calls made then
    are answered with an error (refused, timed out or cut: none hangs); once both nodes are
    back, the same client is served again, every key, then 10 s of calls all `ok`."""
    cluster, pool = healthy_cluster, cluster_pool
    await make_controller(
        pool,
        amqp={"url": cluster.amqp_urls, "management_url": cluster.management_urls},
        groups={"unbind_delay": 600, "stop_delay": 600},
    )
    name = f"majority {pool}"
    async with Client(cluster.amqp_urls, name=name) as client:
        for key in KEYS:
            (await client.call(pool, key, b"warm-up", timeout=60)).raise_for_status()
        survivor = await node_of(cluster, name)
        lost = [n for n in (1, 2, 3) if n != survivor]
        for n in lost:
            await asyncio.to_thread(cluster.kill, n)
        outage: Counter[str] = Counter()
        t0 = time.monotonic()
        answered = 0
        for i in range(6):
            try:
                response = await client.call(pool, KEYS[i % len(KEYS)], b"lost", timeout=3)
                outage[response.status] += 1
            except exceptions.ClientError as exc:
                outage[type(exc).__name__] += 1
            answered += 1
        row: dict[str, object] = {
            "calls while the majority was lost": answered,
            "their outcomes": dict(outage),
            "outage calls s": round(time.monotonic() - t0, 1),
        }
        for n in lost:
            await asyncio.to_thread(cluster.start, n)
        errors: Counter[str] = Counter()
        row["every key ok again after restart s"] = round(await recover(client, pool, errors), 2)
        row["calls after"], failures = await streak(client, pool)
        row["errors before recovery"] = dict(errors)
        print("MAJORITY", row)
        assert answered == 6
        assert not failures, (row, failures)
