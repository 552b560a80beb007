"""Cluster benchmark: osrdyne on the three-node cluster vs on one node, and a node kill.

One run, side by side, in interleaved rounds (order alternating, so a load spike from
something else on the machine hits both):

* **one node**: the shared broker (`RABBITMQ_URL`, default 127.0.0.1:5672): request queues
  quorum of one member, pool queues classic (osrdyne's single-node defaults).
* **cluster**: `scripts/ensure_cluster.sh`'s three nodes (started if needed): request queues
  quorum of three members with leaders balanced, pool queues quorum (osrdyne's cluster
  defaults, chosen because `amqp.url` lists three addresses).

Each target: an in-process `Controller` with the subprocess driver running the echo worker
(concurrency C), our `Client` given the target's addresses, one warm key. Fast-path throughput
(N calls, C in flight) and sequential latency (p50/p95 of L calls). Ratios cluster / one node.

Then **time from a node kill to the first answer served again**, on the cluster, for K kills
of each kind: SIGKILL of the node leading the key's request queue (the client, controller and
worker stay connected elsewhere), and SIGKILL of the node every connection is on (client,
controller and worker all move). A caller loops sequential calls (1 s timeout, retried at
once); the clock runs from the kill to the first `ok` answer. The node is started again
(`ensure_cluster.sh --start N`) between kills. Everything created is deleted at the end.

    python bench/cluster_bench.py --quick     # ~2 minutes: N=500 C=16, L=100, 1 round, 1 kill each
    python bench/cluster_bench.py             # N=2000 C=32, L=300, 3 rounds, 3 kills each
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from osrdyne import Client  # noqa: E402
from osrdyne.controller import Controller, Settings  # noqa: E402
from osrdyne.exceptions import ClientError  # noqa: E402
from tests.cluster.conftest import Cluster, _all_running  # noqa: E402

AMQP_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
PAYLOAD = b"x" * 100
KEY = "bench"

log = logging.getLogger("cluster_bench")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


class Target:
    """One broker (one node or the cluster) with a controller, its echo worker and a client."""

    def __init__(self, label: str, urls: list[str], management: list[str], c: int) -> None:
        self.label = label
        self.pool = f"bench-{label}-{uuid.uuid4().hex[:6]}"
        self.urls = urls
        self.management = management
        self.state = tempfile.mkdtemp(prefix="cluster-bench-")
        self.controller = Controller(
            Settings(
                pool=self.pool,
                amqp={"url": urls, "management_url": management},
                groups={"unbind_delay": 3600, "stop_delay": 3600, "loop_interval": 1.0},
                api={"enabled": False},
                driver={
                    "kind": "subprocess",
                    "subprocess": {
                        "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
                        "env": {"WORKER_CONCURRENCY": str(c)},
                        "owner": self.state,
                        "stop_timeout": 5,
                        "restart_backoff": 0.2,
                        "restart_backoff_max": 1,
                        "cwd": str(REPO),
                    },
                },
            )
        )
        self.task: asyncio.Task[None] | None = None
        self.client = Client(urls, name=f"cluster bench {label}")

    async def start(self) -> None:
        self.task = asyncio.create_task(self.controller.run(), name=f"controller {self.label}")
        await asyncio.wait_for(self.controller.wait_leader(), 60)
        await self.client.connect()
        response = await self.client.call(self.pool, KEY, PAYLOAD, timeout=60)
        assert response.ok, response.status

    async def call(self, timeout: float = 30) -> None:
        response = await self.client.call(self.pool, KEY, PAYLOAD, timeout=timeout)
        if not response.ok:
            raise RuntimeError(response.status)

    async def throughput(self, n: int, c: int) -> float:
        left = n

        async def slot() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await self.call()

        started = time.perf_counter()
        await asyncio.gather(*(slot() for _ in range(c)))
        return n / (time.perf_counter() - started)

    async def latency(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await self.call()
            out.append((time.perf_counter() - t) * 1000)
        return out

    async def close(self, cluster: Cluster | None) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()
        self.controller.stop()
        if self.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.task, 60)
        if cluster is not None:
            await cluster.delete_pool(self.pool)
        else:
            from tests import broker

            await broker.delete_pool_objects(self.pool)


async def time_to_answer(target: Target, kill: Any) -> float:
    """Seconds from `kill()` to the first `ok` answer of a call made after it."""
    await target.call()
    loop = asyncio.get_running_loop()
    killed_at = time.monotonic()
    await loop.run_in_executor(None, kill)
    deadline = killed_at + 120
    seen: collections.Counter[str] = collections.Counter()
    while time.monotonic() < deadline:
        try:
            await target.call(timeout=1.0)
            return time.monotonic() - killed_at
        except (ClientError, RuntimeError) as exc:
            seen[type(exc).__name__] += 1
            await asyncio.sleep(0.01)
    raise TimeoutError(f"no answer within 120 s of the kill; errors: {dict(seen)}")


async def diagnose(cluster: Cluster, target: Target) -> None:
    """What the broker says of the pool's queues, and where the client is (after a failure)."""
    connection = target.client._connection
    print(
        "client on",
        getattr(connection, "url", None),
        "controller on",
        target.controller.broker_node,
    )
    for q in await cluster.queues(target.pool):
        print(" ", q["name"], q.get("leader"), q.get("online"), q.get("messages"))
    # The same request on a fresh connection to each node: refused by the broker, or only on
    # the client's channel?
    import aio_pika

    from osrdyne.wire import PoolNames

    for n in (1, 2, 3):
        if not cluster.up(n):
            continue
        async with await aio_pika.connect(cluster.amqp(n)) as connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.get_exchange(
                PoolNames(target.pool).request_exchange, ensure=False
            )
            try:
                await exchange.publish(aio_pika.Message(PAYLOAD), routing_key=KEY, timeout=5)
                print(f"  a fresh connection to c{n}: publish confirmed")
            except Exception as exc:  # diagnostics: whatever it is, say it
                print(f"  a fresh connection to c{n}: {exc!r}")


async def healthy(cluster: Cluster, target: Target) -> None:
    """Every node back, no partition seen, the key's queue with its three members online."""
    await asyncio.to_thread(cluster.restore)
    from osrdyne.wire import PoolNames

    name = PoolNames(target.pool).request_queue(KEY)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        queue = await cluster.api(f"/queues/%2F/{name}")
        if await _all_running(cluster) and queue and len(queue.get("online", [])) == 3:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError("the cluster did not heal within 180 s")


async def leader_of(cluster: Cluster, target: Target) -> int:
    from osrdyne.wire import PoolNames

    name = PoolNames(target.pool).request_queue(KEY)
    queue = await cluster.api(f"/queues/%2F/{name}")
    return Cluster.number(queue["leader"])


async def run(args: argparse.Namespace) -> None:
    cluster = Cluster()
    await asyncio.to_thread(cluster.ensure)
    single = Target("one-node", [AMQP_URL], [MANAGEMENT_URL], args.c)
    clustered = Target("cluster", cluster.amqp_urls, cluster.management_urls, args.c)
    results: dict[str, dict[str, list[float]]] = {
        t.label: {"tput": [], "p50": [], "p95": []} for t in (single, clustered)
    }
    kills: dict[str, list[float]] = {"leader node": [], "node of every connection": []}
    try:
        for target in (single, clustered):
            await target.start()
        for r in range(args.rounds):
            order = (single, clustered) if r % 2 == 0 else (clustered, single)
            for target in order:
                tput = await target.throughput(args.n, args.c)
                lat = await target.latency(args.l)
                results[target.label]["tput"].append(tput)
                results[target.label]["p50"].append(pct(lat, 50))
                results[target.label]["p95"].append(pct(lat, 95))
                print(
                    f"round {r + 1} {target.label:9s} throughput {tput:7.0f}/s  "
                    f"p50 {pct(lat, 50):6.2f} ms  p95 {pct(lat, 95):6.2f} ms",
                    flush=True,
                )
        await single.close(None)
        await healthy(cluster, clustered)
        for _ in range(args.kills):
            # The node leading the key's queue, but not the one the connections are on.
            node = await leader_of(cluster, clustered)
            everyone = await cluster.node_of_connection(f"osrdyne {clustered.pool} ")
            if node == everyone:
                print("(the leader shares the connections' node: counted as such)")
            seconds = await time_to_answer(clustered, lambda n=node: cluster.kill(n))
            kind = "node of every connection" if node == everyone else "leader node"
            kills[kind].append(seconds)
            print(f"kill of {kind} (c{node}): first answer after {seconds:.2f} s", flush=True)
            await healthy(cluster, clustered)
            node = None
            while node is None:  # the management API lists a new connection within seconds
                node = await cluster.node_of_connection(f"osrdyne {clustered.pool} ")
                await asyncio.sleep(0.5)
            seconds = await time_to_answer(clustered, lambda n=node: cluster.kill(n))
            kills["node of every connection"].append(seconds)
            print(f"kill of the connections' node (c{node}): first answer after {seconds:.2f} s")
            await healthy(cluster, clustered)
    except TimeoutError:
        await diagnose(cluster, clustered)
        raise
    finally:
        await single.close(None) if single.task and not single.task.done() else None
        await clustered.close(cluster)
        await asyncio.to_thread(cluster.restore)

    one, many = results["one-node"], results["cluster"]
    med = statistics.median
    print("\n| | one node | cluster (3 nodes) | cluster / one node |")
    print("| --- | --- | --- | --- |")
    print(
        f"| throughput (N={args.n}, C={args.c}) | {med(one['tput']):.0f}/s | "
        f"{med(many['tput']):.0f}/s | {med(many['tput']) / med(one['tput']):.2f}x |"
    )
    for q in ("p50", "p95"):
        print(
            f"| sequential {q} | {med(one[q]):.2f} ms | {med(many[q]):.2f} ms | "
            f"{med(many[q]) / med(one[q]):.2f}x |"
        )
    for kind, values in kills.items():
        if values:
            print(
                f"| kill -> first answer, {kind} | | median {med(values):.2f} s "
                f"(min {min(values):.2f}, max {max(values):.2f}, n={len(values)}) | |"
            )
    print(f"\nrounds={args.rounds} (median shown); commit {_git_head()}")


def _git_head() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--c", type=int, default=32)
    parser.add_argument("--l", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.n, args.c, args.l, args.rounds, args.kills = 500, 16, 100, 1, 1
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
