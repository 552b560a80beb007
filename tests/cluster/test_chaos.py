"""Random faults on the cluster, a history of every call checked after: a short schedule in CI,
a long one opt-in (`--soak`, OSRDYNE_CHAOS_SECONDS, default 1800; OSRDYNE_CHAOS_SEED; the
report also written to OSRDYNE_CHAOS_REPORT when set).

Every 20-40 s one fault, drawn at random: SIGKILL of a random node, SIGKILL of the node holding
the client's connection, SIGSTOP of a random node for 15 s (longer than the heartbeat), a node
cut from both others (packet filter, tests/cluster/network.py), the client's own link silenced
while its node lives, a one-way cut between two nodes, or 10 % of the client's packets lost;
each lasts 5-15 s (the pause 15 s). Meanwhile one client, created once, calls six keys one after
another (a new key now and then: cold starts during faults).

The history: every call by request id, when it was sent, what ended it (`ok`, an error status,
or a client error: refused, timed out, connection lost) and when. Checked: every call ended
(none lost, none hanging), no answer came twice (late replies: an answer after its call had
ended, the only way a request handled twice shows here), and the client is served again after
the last fault. Printed and recorded in docs/reliability.md: calls, ok, errors by kind, the
latest end past a deadline, and for each fault the seconds to the first `ok` and to the last
error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from osrdyne import Client, exceptions
from tests.cluster.conftest import Cluster, connection_port, echo_controller
from tests.cluster.network import Network
from tests.conftest import Running
from tests.waiting import eventually

pytestmark = pytest.mark.chaos

SECONDS = float(os.environ.get("OSRDYNE_CHAOS_SECONDS", "1800"))
#: The schedule CI runs: about five faults.
SHORT = 150.0
CALL_TIMEOUT = 10.0
#: The client's heartbeat: a silenced link is found out within 3 x (2 + 1) s.
HEARTBEAT = 2
KINDS = [
    "kill",
    "kill the client's node",
    "pause",
    "cut a node from the others",
    "silence the client's link",
    "one-way cut",
    "lossy client link",
]


@pytest.mark.timeout(SHORT + 600)
@pytest.mark.not_on_rabbitmq4(
    "each of its faults runs on 4.0 in test_partitions and test_node_loss; the mix, 4 minutes, "
    "on 3.10 only (the 30-minute schedule, --chaos, runs on either)"
)
async def test_a_short_random_fault_schedule(
    cluster_pool: str,
    healthy_cluster: Cluster,
    network: Network,
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    await random_faults(cluster_pool, healthy_cluster, network, make_controller, SHORT)


@pytest.mark.soak
@pytest.mark.timeout(0)
async def test_random_faults_for_a_long_time(
    cluster_pool: str,
    healthy_cluster: Cluster,
    network: Network,
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    await random_faults(cluster_pool, healthy_cluster, network, make_controller, SECONDS)


async def inflict(
    kind: str, node: int, client_port: int, cluster: Cluster, network: Network, rng: random.Random
) -> None:
    """One fault of `KINDS` on `node`, undone 5-15 s later (a pause: 15 s).

    Every step that runs a program (iptables, which waits up to 5 s for its lock; the cluster
    script) runs in a thread: the client and the controller share this event loop, and a
    loop held there made a call end 22.6 s past its deadline by the loop's own clock."""
    lasts = rng.uniform(5, 15)
    if kind == "pause":
        await asyncio.to_thread(cluster.pause, node)
        await asyncio.sleep(15)
        await asyncio.to_thread(cluster.resume, node)
        await asyncio.to_thread(cluster.restore)  # restarts a resumed node
        return
    if kind.startswith("kill"):
        await asyncio.to_thread(cluster.kill, node)
        await asyncio.sleep(lasts)
        await asyncio.to_thread(cluster.start, node)
        return
    if kind == "cut a node from the others":
        await asyncio.to_thread(network.isolate, node)
    elif kind == "silence the client's link":
        await asyncio.to_thread(network.cut_connection, node, client_port)
        await asyncio.to_thread(network.refuse_new_connections, node)
    elif kind == "one-way cut":
        other = rng.choice([n for n in (1, 2, 3) if n != node])
        await asyncio.to_thread(network.cut, node, other, one_way=True)
    else:
        await asyncio.to_thread(network.lose_packets, node, client_port, 0.10)
    try:
        await asyncio.sleep(lasts)
    finally:
        await asyncio.to_thread(network.heal)
    await asyncio.to_thread(cluster.restore)  # a node whose recovery failed is restarted


async def random_faults(
    pool: str,
    cluster: Cluster,
    network: Network,
    make_controller: Callable[..., Awaitable[Running]],
    seconds: float,
) -> None:
    await make_controller(pool, **echo_controller(cluster, unbind_delay=120, stop_delay=60))
    rng = random.Random(int(os.environ.get("OSRDYNE_CHAOS_SEED", "18")))
    name = f"chaos {pool}"
    outcomes: list[tuple[float, str]] = []  # (time, "ok" or the error)
    #: The history: request id -> (sent, ended, outcome); every call has one entry.
    history: dict[int, tuple[float, float, str]] = {}
    started = [0]
    faults: list[tuple[float, str]] = []
    stop = asyncio.Event()

    async def calls(client: Client) -> None:
        keys = [f"key-{i}" for i in range(6)]
        i = 0
        while not stop.is_set():
            if i % 500 == 499:
                keys[rng.randrange(len(keys))] = f"cold-{i}"  # a new key, during the faults
            key = keys[i % len(keys)]
            i += 1
            started[0] += 1
            sent = time.monotonic()
            try:
                response = await client.call(pool, key, b"chaos", timeout=CALL_TIMEOUT)
                outcome = "ok" if response.ok else response.status
            except exceptions.ClientError as exc:
                outcome = type(exc).__name__
            ended = time.monotonic()
            outcomes.append((ended, outcome))
            history[i] = (sent, ended, outcome)
            if outcome != "ok":
                await asyncio.sleep(0.1)

    async def chaos(client_link: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(rng.uniform(20, 40))
            kind = rng.choice(KINDS)
            client_node, client_port = await client_link()
            node = client_node if "client" in kind else rng.choice((1, 2, 3))
            faults.append((time.monotonic(), f"{kind} {node}"))
            await inflict(kind, node, client_port, cluster, network, rng)

    urls = cluster.urls(HEARTBEAT)
    async with Client(urls, name=name) as client:

        async def client_link() -> tuple[int, int]:
            # Waited for when the client is between connections: a client-link fault always
            # cuts the link the client is on.
            return await connection_port(cluster, name)

        caller = asyncio.create_task(calls(client), name="chaos calls")
        try:
            await chaos(client_link)
            await asyncio.to_thread(cluster.restore)
            restored = time.monotonic()
            served_after: float | None = None

            def served() -> bool:
                """Every call of the last 10 s ok, all nodes back for 10 s at least."""
                now = time.monotonic()
                recent = [o for t, o in outcomes if t > now - 10]
                return now - restored >= 10 and bool(recent) and all(o == "ok" for o in recent)

            # After the last fault, with every node back, the client is served again: waited
            # for, not slept (after a one-way cut RabbitMQ's autoheal may restart a node a
            # minute later, and a link that lost packets may wait out TCP's back-off: a fixed
            # 30 s once ended on a timeout, CI 2026-11-28).
            with contextlib.suppress(AssertionError):  # None in the report, asserted below
                await eventually(served, what="served for 10 s", timeout=240)
                served_after = time.monotonic() - restored
        finally:
            stop.set()
            await caller
        late = client.late_replies

    by_kind = Counter(outcome for _, outcome in outcomes)
    rows = []
    for n, (at, what) in enumerate(faults):
        until = faults[n + 1][0] if n + 1 < len(faults) else float("inf")
        after = [(t, o) for t, o in outcomes if at <= t < until]
        first_ok = next((t - at for t, o in after if o == "ok"), None)
        last_error = max((t - at for t, o in after if o != "ok"), default=None)
        rows.append(
            {
                "fault": what,
                "first ok s": None if first_ok is None else round(first_ok, 1),
                "last error s": None if last_error is None else round(last_error, 1),
            }
        )
    overrun = max((ended - sent - CALL_TIMEOUT for sent, ended, _ in history.values()), default=0)
    report = {
        "seconds": seconds,
        "faults": len(faults),
        "calls": len(outcomes),
        "ok": by_kind["ok"],
        "errors": {k: v for k, v in by_kind.items() if k != "ok"},
        "lost": started[0] - len(history),
        "late replies": late,
        "resends": client.resends,
        "latest end past a deadline s": round(max(0.0, overrun), 2),
        "served again after the restore s": served_after and round(served_after, 1),
        "per fault": rows,
    }
    print("CHAOS", json.dumps(report, indent=1))
    # Also to a file: under pytest-xdist a worker's printed lines are not shown, even with -s
    # (a 30-minute run on 2026-12-02 kept only its assertions).
    if out := os.environ.get("OSRDYNE_CHAOS_REPORT"):
        Path(out).write_text(json.dumps(report, indent=1) + "\n")
    assert report["lost"] == 0, report
    assert served_after is not None, "the client not served for 10 s within 240 s of the restore"
    assert all(r["first ok s"] is not None for r in rows), rows
