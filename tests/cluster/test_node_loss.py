"""A node of the three-node cluster lost under load: nothing lost, every request answered.

One controller (in this process), echo workers (processes) and a counting caller all get the
three addresses. The controller and its workers go to node 1 (the addresses in order), the
caller to node 3 (its own order reversed), so each scenario says whose node it takes away:

- node 2 SIGKILLed while requests flow to warm keys and to cold keys first asked after the
  kill (request-queue leaders and replicas lost, not a client connection);
- the node holding the controller's connection (and its workers') SIGKILLed: the controller
  starts a new session on another node and leads again (its leader queue moves with it);
- a rolling restart, every node stopped and started one after the other, under load;
- the controller's node paused (SIGSTOP) for longer than the heartbeat and the Erlang tick:
  a partition as its clients and the other nodes see it; then resumed;
- workers in containers (the docker driver, the project's dockerd): the node holding their
  connections SIGKILLed, brought back, then the node they moved to SIGKILLed too; the same
  containers serve throughout, having failed over in-process through the address list the
  driver gave them.

Replies go to a durable quorum queue (replicated): a request and its answer both survive any
one node. Each scenario writes its row (sent / ok / errors / lost / duplicated) to the
reliability report (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, echo_controller
from tests.conftest import Running
from tests.docker_engine import pool_containers, remove_pool_containers
from tests.faults.conftest import Caller
from tests.faults.report import Tally
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)

WARM = ["warm-a", "warm-b", "warm-c"]
COLD = ["cold-a", "cold-b", "cold-c"]
#: The pause scenario: a heartbeat every 2 s (a silent node left after 3 x 3 = 9 s), a pause
#: longer than that and than the nodes' Erlang tick (8 s, scripts/ensure_cluster.sh).
HEARTBEAT = 2
PAUSE = 20.0


async def start(
    cluster: Cluster,
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    tally: Tally,
    *,
    heartbeat: int | None = None,
    driver: dict[str, Any] | None = None,
) -> tuple[Running, Caller]:
    """A controller with echo workers on the cluster, a caller on node 3, warm keys warm;
    `heartbeat` in every URL (so the workers' too) when given; subprocess workers unless
    `driver` says otherwise."""
    settings = echo_controller(cluster, heartbeat=heartbeat, unbind_delay=300, stop_delay=300)
    if driver is not None:
        settings["driver"] = driver
    running = await make_controller(pool, **settings)
    urls = cluster.urls(heartbeat)
    caller = await make_caller(tally, url=list(reversed(urls)), reply_queue=f"{pool}-replies")
    for key in WARM:
        await caller.send(pool, key, b"warm-up")
    assert not await caller.settle(60, grace=0), "warm-up not answered"
    return running, caller


async def load(caller: Caller, pool: str, keys: list[str], stop: asyncio.Event) -> None:
    """A request every 40 ms, round robin over `keys` (which may grow), until `stop`."""
    i = 0
    while not stop.is_set():
        await caller.send(pool, keys[i % len(keys)], f"{i}".encode(), retry_for=120)
        i += 1
        await asyncio.sleep(0.04)


async def under_load(
    caller: Caller, pool: str, fault: Callable[[], Awaitable[None]], *, cold: bool = True
) -> None:
    """Load on the warm keys; the fault; cold keys joining the load after it; then 40 more
    requests; load stopped and every request waited for (bounded)."""
    keys = list(WARM)
    stop = asyncio.Event()
    task = asyncio.create_task(load(caller, pool, keys, stop), name="cluster load")
    try:
        await asyncio.sleep(2)
        await fault()
        if cold:
            keys.extend(COLD)
        after = len(caller.tally.sent)
        await eventually(
            lambda: len(caller.tally.sent) >= after + 40, what="load after the fault", timeout=120
        )
    finally:
        stop.set()
        await task
    await caller.settle(120, grace=2)


async def report(cluster: Cluster, pool: str, running: Running, caller: Caller) -> None:
    """Assert the row: nothing lost, every request answered `ok` (late at worst)."""
    tally = caller.tally
    tally.extra["publish retries"] = caller.publish_retries
    tally.extra["controller sessions"] = running.controller.sessions
    row = tally.row()
    print("ROW", row, "SLOWEST", caller.slowest())
    if row["lost"] or row["errors"]:
        print("DIAG", await cluster.queues(pool))
        print("DIAG", caller.describe(tally.pending()))
        print("DIAG role", running.controller.role, running.controller.last_error)
    assert row["lost"] == 0, row
    assert row["errors"] == {}, row
    assert row["ok"] == row["sent"], row


async def test_a_node_sigkilled_under_load_over_warm_and_cold_keys(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    cluster, pool = healthy_cluster, cluster_pool
    tally = make_tally(
        "cluster: a node SIGKILLed under load (3 warm keys, 3 cold keys first asked after)",
        "node 2 holds request-queue leaders and replicas, no client connection",
    )
    running, caller = await start(cluster, pool, make_controller, make_caller, tally)

    async def fault() -> None:
        await asyncio.to_thread(cluster.kill, 2)

    await under_load(caller, pool, fault)
    await report(cluster, pool, running, caller)
    # Three replicas each, leaders spread: the queues lived on without node 2.
    queues = {q["name"]: q for q in await cluster.queues(pool)}
    request_queues = [q for name, q in queues.items() if "-req-" in name]
    assert len(request_queues) == len(WARM + COLD)
    assert all(q["type"] == "quorum" and len(q["members"]) == 3 for q in request_queues)
    assert all(queues[f"{pool}-{s}"]["type"] == "quorum" for s in ("orphan", "dl", "poison"))


async def test_the_node_of_the_controller_sigkilled_under_load(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    cluster, pool = healthy_cluster, cluster_pool
    tally = make_tally(
        "cluster: the node of the controller's connection SIGKILLed under load",
        "the controller, its leader queue and its workers move to another node",
    )
    running, caller = await start(cluster, pool, make_controller, make_caller, tally)
    prefix = f"osrdyne {pool} "
    node = await eventually(
        lambda: cluster.node_of_connection(prefix), what="the controller's connection"
    )
    assert node != await cluster.node_of_connection(caller.name)
    sessions = running.controller.sessions
    assert running.controller.status().broker_node == f"127.0.0.1:{cluster.amqp_port(node)}"

    async def fault() -> None:
        await asyncio.to_thread(cluster.kill, node)

    await under_load(caller, pool, fault)
    await report(cluster, pool, running, caller)
    assert running.controller.sessions > sessions
    moved = await eventually(
        lambda: cluster.node_of_connection(prefix), what="the controller on another node"
    )
    assert moved != node
    assert running.controller.session is not None  # it leads again
    # /status names the node the controller is on now.
    assert running.controller.status().broker_node == f"127.0.0.1:{cluster.amqp_port(moved)}"


@pytest.mark.chaos
async def test_a_rolling_restart_of_the_three_nodes_under_load(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    cluster, pool = healthy_cluster, cluster_pool
    tally = make_tally(
        "cluster: rolling restart (rabbitmqctl stop + start, nodes 1, 2, 3) under load",
        "every client connection moves at least once",
    )
    running, caller = await start(cluster, pool, make_controller, make_caller, tally)
    t0 = time.monotonic()

    async def fault() -> None:
        for n in (1, 2, 3):
            await asyncio.to_thread(cluster.stop, n)
            await asyncio.to_thread(cluster.start, n)
            await eventually(
                lambda n=n: _running(cluster, n),  # type: ignore[misc]
                what=f"node {n} back",
                timeout=90,
                interval=0.5,
            )
        tally.extra["restart seconds"] = round(time.monotonic() - t0)

    await under_load(caller, pool, fault, cold=False)
    await report(cluster, pool, running, caller)
    assert running.controller.sessions >= 2
    assert caller.epoch >= 1  # the caller's own node went too


@pytest.mark.chaos
async def test_the_node_of_the_controller_paused_longer_than_the_heartbeat(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    """The node comes back from its freeze with its metadata partitioned from the others
    (`running_partitioned_network`; RabbitMQ 3.10 heals nothing until it is restarted): the
    cold keys' workers, started after the pause with the three addresses in order, reach it
    first and do not find their queues there (NOT_FOUND). They move to the next address after
    `queue_missing_move_after` (10 s), and every request is answered; before, they waited
    there (21 of 532 unanswered at the end, 2026-11-27; under autoheal 41 of 432)."""
    cluster, pool = healthy_cluster, cluster_pool
    tally = make_tally(
        "cluster: the controller's node paused (SIGSTOP 20 s; heartbeat 2 s: silent node "
        "left after 9 s; Erlang tick 8 s)",
        "a partition as the others see it; the node resumed after",
    )
    running, caller = await start(
        cluster, pool, make_controller, make_caller, tally, heartbeat=HEARTBEAT
    )
    prefix = f"osrdyne {pool} "
    node = await eventually(
        lambda: cluster.node_of_connection(prefix), what="the controller's connection"
    )
    sessions = running.controller.sessions

    async def fault() -> None:
        cluster.pause(node)
        try:
            await asyncio.sleep(PAUSE)
        finally:
            cluster.resume(node)

    await under_load(caller, pool, fault)
    await report(cluster, pool, running, caller)
    assert running.controller.sessions > sessions


async def workers_node(cluster: Cluster, pool: str) -> set[int]:
    """The nodes holding the connections of the pool's workers (named `worker <id> (<pool>)`)."""
    found = set()
    for c in await cluster.api("/connections", columns="node,client_properties"):
        name = (c.get("client_properties") or {}).get("connection_name", "")
        if name.startswith("worker ") and name.endswith(f"({pool})"):
            found.add(cluster.number(c["node"]))
    return found


async def test_workers_in_containers_fail_over_twice(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
    docker_host: str,
    docker_client: Any,
    worker_image: str,
    host_python: tuple[str, list[dict[str, Any]]],
    repo: Any,
) -> None:
    cluster, pool = healthy_cluster, cluster_pool
    tally = make_tally(
        "cluster: docker workers' node SIGKILLed, restarted, then their new node SIGKILLed",
        "containers of the docker driver, given the three addresses, fail over twice",
    )
    python, mounts = host_python
    driver = {
        "kind": "docker",
        "docker": {
            "base_url": docker_host,
            "image": worker_image,
            "command": [python, "-m", "worker_sdk.examples.echo"],
            "environment": {
                "PYTHONPATH": str(repo),
                "PYTHONDONTWRITEBYTECODE": "1",
                "WORKER_ACTIVITY_INTERVAL": "0.5",
                "WORKER_DRAIN_TIMEOUT": "5",
            },
            "volumes": mounts,
            "stop_timeout": 2,
        },
    }
    try:
        running, caller = await start(
            cluster, pool, make_controller, make_caller, tally, driver=driver
        )
        before = {c.id for c in pool_containers(docker_client, pool, all=False)}
        assert len(before) == len(WARM)
        for fault_number in (1, 2):
            nodes = await eventually(
                lambda: workers_node(cluster, pool), what="the workers' connections"
            )
            assert len(nodes) == 1, nodes  # every worker took the first address that answered
            (node,) = nodes

            async def fault(node: int = node) -> None:
                await asyncio.to_thread(cluster.kill, node)

            await under_load(caller, pool, fault, cold=False)
            moved = await eventually(
                lambda node=node: _moved(cluster, pool, node),  # type: ignore[misc]
                what=f"the workers off node {node} (fault {fault_number})",
            )
            assert node not in moved
            await asyncio.to_thread(cluster.restore)  # the lost node back before the next fault
            await eventually(
                lambda: _all_back(cluster), what="three running nodes", timeout=120, interval=0.5
            )
        await report(cluster, pool, running, caller)
        # The same containers all along: they failed over in-process, nobody restarted them.
        after = {c.id for c in pool_containers(docker_client, pool, all=False)}
        assert after == before
        assert all(c.attrs["RestartCount"] == 0 for c in pool_containers(docker_client, pool))
    finally:
        remove_pool_containers(docker_client, pool)


async def _moved(cluster: Cluster, pool: str, lost: int) -> set[int] | None:
    nodes = await workers_node(cluster, pool)
    return nodes if nodes and lost not in nodes and len(nodes) == 1 else None


async def _all_back(cluster: Cluster) -> bool:
    try:
        return await cluster.running() == {1, 2, 3}
    except RuntimeError:
        return False


async def _running(cluster: Cluster, n: int) -> bool:
    try:
        return n in await cluster.running()
    except RuntimeError:
        return False
