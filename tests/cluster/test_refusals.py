"""No call refused that its deadline could wait for: nodes lost, calls answered.

One long-lived client (3 s deadlines) calls keys of a pool without pause, from a few callers at
once, through four node-loss cycles, the shape of issue 32: a node holding none of the pool's
connections killed and started again, then the node holding every connection (the client's,
the controller's, its workers') killed, and started again. The keys' quorum queues whose
leader was lost elect another: for about a second they nack what is published to them (issue
32 counted 6-10 calls of ~170 a cycle refused, each with 2-3 s of its deadline left). With
publishes retried until the deadline (`wire.RenewingChannel`), none is refused.

A call in flight when the node holding every connection died (its request in a worker's hands,
its direct reply on the way) lost its answer with the connection: the client publishes it again
once reconnected (`Client.resend`), so it does not fail with `ConnectionLost` either. What a node
loss can still cost is a call whose 3 s do not cover the reconnection and the elections:
`RequestTimeout`, counted and printed, not asserted away.

Outcomes are asserted, never timings: the bounds below only end a test that would hang.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from drivers.base import Describes
from osrdyne import Client, exceptions
from tests.cluster.conftest import Cluster, echo_controller, node_of
from tests.conftest import Running
from tests.waiting import eventually

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(900),
    pytest.mark.not_on_rabbitmq4(
        "the client's retries of refused publishes through node losses: test_node_loss and "
        "test_repeated_faults lose nodes on 4.0 with every call counted"
    ),
]

KEYS = [f"key-{i}" for i in range(6)]
CYCLES = 4
CALLERS = 4
#: The calls' deadline, seconds (the issue's figure).
DEADLINE = 3.0


class Load:
    """Callers calling the keys one call after another until stopped; every outcome counted,
    and the keys answered `ok` since the last `mark()`."""

    def __init__(self, client: Client, pool: str) -> None:
        self.client, self.pool = client, pool
        self.outcomes: Counter[str] = Counter()
        self.answered: set[str] = set()
        #: Each key's last outcome and when (monotonic), for the report of a key left unanswered.
        self.last: dict[str, tuple[str, float]] = {}
        self._stop = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._caller(i), name=f"caller {i}") for i in range(CALLERS)
        ]

    def mark(self) -> None:
        self.answered = set()

    def all_answered(self) -> bool:
        return self.answered == set(KEYS)

    async def _caller(self, i: int) -> None:
        n = i
        while not self._stop.is_set():
            key = KEYS[n % len(KEYS)]
            n += CALLERS
            try:
                response = await self.client.call(self.pool, key, b"ping", timeout=DEADLINE)
            except exceptions.ClientError as exc:
                self.outcomes[type(exc).__name__] += 1
                self.last[key] = (f"{type(exc).__name__}: {exc}", time.monotonic())
                # A call that fails before it waits for anything (its channel closed) must
                # not starve the event loop.
                await asyncio.sleep(0.05)
                continue
            outcome = "ok" if response.status == "ok" else f"status {response.status}"
            self.outcomes[outcome] += 1
            self.last[key] = (outcome, time.monotonic())
            if response.status == "ok":
                self.answered.add(key)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def test_no_call_is_refused_through_four_node_losses(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    cluster, pool = healthy_cluster, cluster_pool
    # The controller and its workers on node 1, the client on node 2: node 3 holds none of the
    # pool's connections, only queue leaders.
    # The driver's own restart backoff, as this test had before the settings were shared (a
    # run with 0.2-2 s restarts once left a key unanswered for 120 s after a kill, and so did
    # a run with this backoff on 2026-11-29: its worker held four requests whose replies had
    # failed on a channel not yet restored, unacked on a live one; the worker now gives such
    # a request back to its queue, `handling.RequestHandler._give_back`).
    running = await make_controller(pool, **echo_controller(cluster, quick_restarts=False))
    name = f"refusals {pool}"
    figures: list[dict[str, object]] = []
    async with Client(cluster.amqp_urls, name=name) as client:
        for key in KEYS:
            (await client.call(pool, key, b"warm-up", timeout=60)).raise_for_status()
        load = Load(client, pool)
        try:
            for cycle in range(1, CYCLES + 1):
                busy = await node_of(cluster, name)
                controller_node = await node_of(cluster, f"osrdyne {pool} ")
                idle = next(n for n in (1, 2, 3) if n not in (busy, controller_node))
                for victim in (idle, busy):
                    await asyncio.to_thread(cluster.kill, victim)
                    load.mark()
                    await _answered(load, cluster, running, f"after node {victim} was killed")
                    await asyncio.to_thread(cluster.start, victim)
                    await eventually(
                        lambda n=victim: _running(cluster, n),
                        what=f"node {victim} back",
                        timeout=120,
                    )
                    load.mark()
                    await _answered(load, cluster, running, f"after node {victim} was started")
                row = {
                    "cycle": cycle,
                    "idle": idle,
                    "busy": busy,
                    "outcomes": dict(load.outcomes),
                    "publish retries": client.publish_retries,
                    "channel renewals": client.channel_renewals,
                    "resends": client.resends,
                }
                print("REFUSALS CYCLE", row)
                figures.append(row)
        finally:
            await load.stop()
    print("REFUSALS", figures)
    # No call refused, none answered with an error, none failed because its connection was
    # lost: a call whose direct reply went with the connection is published again once the
    # client is back (`Client.resend`). What is left is a call whose 3 s did not cover the
    # reconnection and the queues' elections: `RequestTimeout`, counted and printed.
    failed = {k: v for k, v in load.outcomes.items() if k not in ("ok", "RequestTimeout")}
    assert not failed, load.outcomes
    print("REFUSALS resends", client.resends)
    assert load.outcomes["ok"] > 0


async def _answered(load: Load, cluster: Cluster, running: Running, when: str) -> None:
    """Every key answered `ok` since the last mark; else fail with what the broker shows of
    the keys (their queues: messages, consumers, members; the consumers' connections) and
    what the controller and its driver say of their groups."""
    try:
        await eventually(load.all_answered, what=f"every key answered {when}", timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await _report(load, cluster, running)}") from None


async def _report(load: Load, cluster: Cluster, running: Running) -> str:
    now = time.monotonic()
    names, driver = running.controller.names, running.controller.driver
    lines = [
        f"outcomes: {dict(load.outcomes)}",
        f"controller: {running.controller.status()}",
        f"driver: {driver.describe() if isinstance(driver, Describes) else driver}",
    ]
    queues = {
        q["name"]: q
        for q in await cluster.api(
            "/queues",
            columns="name,node,leader,members,online,messages_ready,"
            "messages_unacknowledged,consumers,state",
        )
        or []
    }
    consumers = await cluster.api("/consumers") or []
    for key in KEYS:
        outcome, at = load.last.get(key, ("none", now))
        queue = names.request_queue(key)
        lines.append(
            f"{key}{'' if key in load.answered else ' (UNANSWERED)'}: last {outcome!r} "
            f"{now - at:.1f}s ago; queue {queues.get(queue)}"
        )
        for c in consumers:
            if (c.get("queue") or {}).get("name") == queue:
                details = c.get("channel_details") or {}
                lines.append(
                    f"  consumer {c.get('consumer_tag')} on {details.get('connection_name')} "
                    f"({details.get('node')}), prefetch {c.get('prefetch_count')}, "
                    f"active {c.get('active')}"
                )
    return "\n".join(lines)


async def _running(cluster: Cluster, n: int) -> bool:
    try:
        return n in await cluster.running()
    except RuntimeError:
        return False
