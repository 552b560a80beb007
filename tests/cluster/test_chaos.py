"""Random faults on the cluster for a long time (opt-in: `--chaos`, OSRDYNE_CHAOS_SECONDS,
default 1800): every 20-40 s one of SIGKILL of a random node, SIGKILL of the node holding
the client's connection, or SIGSTOP of a random node for 15 s (longer than the heartbeat);
the node is brought back 5-15 s later. Meanwhile one client, created once, calls six keys
one after another (a new key now and then: cold starts during faults).

Every call gets an answer: an `ok`, an error status, or a client error (refused, timed out,
connection lost) within its 10 s timeout; none hangs, so none is lost. Printed and recorded
in docs/reliability.md: calls, ok, errors by kind, and for each fault the seconds from it to
the first `ok` and to the last error; late replies (an answer after its call gave up, the
only way a request could run twice unseen here).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from osrdyne import Client, exceptions
from tests.cluster.conftest import Cluster
from tests.conftest import Running

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(0)]

SECONDS = float(os.environ.get("OSRDYNE_CHAOS_SECONDS", "1800"))
CALL_TIMEOUT = 10.0


async def test_random_faults_for_a_long_time(
    cluster_pool: str,
    healthy_cluster: Cluster,
    make_controller: Callable[..., Awaitable[Running]],
) -> None:
    cluster, pool = healthy_cluster, cluster_pool
    await make_controller(
        pool,
        amqp={"url": cluster.amqp_urls, "management_url": cluster.management_urls},
        groups={"unbind_delay": 120, "stop_delay": 60},
        driver={
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
                "env": {"WORKER_ACTIVITY_INTERVAL": "0.5", "WORKER_DRAIN_TIMEOUT": "5"},
                "stop_timeout": 5,
                "restart_backoff": 0.2,
                "restart_backoff_max": 2,
            },
        },
    )
    rng = random.Random(int(os.environ.get("OSRDYNE_CHAOS_SEED", "18")))
    name = f"chaos {pool}"
    outcomes: list[tuple[float, str]] = []  # (time, "ok" or the error)
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
            try:
                response = await client.call(pool, key, b"chaos", timeout=CALL_TIMEOUT)
                outcomes.append((time.monotonic(), "ok" if response.ok else response.status))
            except exceptions.ClientError as exc:
                outcomes.append((time.monotonic(), type(exc).__name__))
                await asyncio.sleep(0.1)

    async def chaos(client_node: Callable[[], Awaitable[int]]) -> None:
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            await asyncio.sleep(rng.uniform(20, 40))
            kind = rng.choice(["kill", "kill the client's node", "pause"])
            node = (
                await client_node() if kind == "kill the client's node" else rng.choice((1, 2, 3))
            )
            faults.append((time.monotonic(), f"{kind} {node}"))
            if kind == "pause":
                cluster.pause(node)
                await asyncio.sleep(15)
                cluster.resume(node)
                await asyncio.to_thread(cluster.restore)  # restarts a resumed node (autoheal)
            else:
                await asyncio.to_thread(cluster.kill, node)
                await asyncio.sleep(rng.uniform(5, 15))
                await asyncio.to_thread(cluster.start, node)

    async with Client(cluster.amqp_urls, name=name) as client:

        async def client_node() -> int:
            return await cluster.node_of_connection(name) or 1

        caller = asyncio.create_task(calls(client), name="chaos calls")
        try:
            await chaos(client_node)
            await asyncio.to_thread(cluster.restore)
            await asyncio.sleep(30)  # calls after the last fault, all nodes back
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
    report = {
        "seconds": SECONDS,
        "faults": len(faults),
        "calls": len(outcomes),
        "ok": by_kind["ok"],
        "errors": {k: v for k, v in by_kind.items() if k != "ok"},
        "lost": 0,  # every call above ended with an outcome
        "late replies": late,
        "per fault": rows,
    }
    print("CHAOS", json.dumps(report, indent=1))
    # After the last fault, with every node back, the client is served again.
    tail = [o for t, o in outcomes if t > outcomes[-1][0] - 10]
    assert tail and all(o == "ok" for o in tail), tail
    assert all(r["first ok s"] is not None for r in rows), rows
