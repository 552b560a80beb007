"""How osrdyne scales with the number of keys, and which limit (broker or controller) comes first.

One run, on a PRIVATE RabbitMQ node (`tests/faults/rabbit_node.py`: its own ports, data and
logs, removed afterwards; the shared broker is never touched) started under a high open-files
limit, so the broker's own defaults do not cut the curve short. For each queue type (quorum,
classic) and each N (default 100, 1000, 5000), an in-process controller with the in-memory
driver (queues only: no worker processes; `--driver noop`: the real noop driver, which lists
nothing, as for workers started by hand), in the node's `/` vhost (the one the broker's events
are published to; emptied afterwards), takes a burst of N new keys, one request each,
published as fast as the broker confirms. Measured:

- burst: seconds from the first publish until every orphan is forwarded, and keys/s, beside
  the floor measured just before on the same node: plain aio-pika declaring and binding N
  queues of the type on 8 channels (`burst_vs_floor`, 1.0 = the broker's own pace), and a
  second floor, a hand-written dispatcher that carries each key's request as the protocol
  does (`dispatcher_pace`, `burst_vs_dispatcher`), and a third, declare and bind with one
  message published into each new queue (`enqueue_vs_floor`: the most `burst_vs_floor`
  any dispatcher can reach, whatever path the request takes to it); the broker's CPU per
  key in each (the node's Erlang VM, from /proc). `--rounds` bursts (3), each with the
  floors measured just before it: the median of the rounds' ratios is reported, and each
  round's (a quorum queue's declare waits on the disk, whose pace on a shared machine moves
  by a third within minutes);
- orphan handling p50/p99 (arrival -> confirmed republish into the new queue: every sample,
  taken by wrapping the controller's own histogram's `observe`);
- idle controller CPU (a pool of N groups at the default intervals, over one
  `listing_interval`: its passes, one full listing of the request queues, gauges every second,
  the broker's limits every 5 s), per pass and as a share of a core, and the group starts it
  logged meanwhile (`idle_start_lines`: 0, whatever the driver); the wall time of one
  full listing (management API) and of a pass's convergence;
- `/status`: a page of 100 groups and the whole document;
- event lag: a request queue deleted by hand (management API) until the broker shows it made
  again and bound with its key (5 queues, one after the other: median and longest; and the
  parts: the DELETE, then until the controller heard the event);
- controller RSS (this process: the controller plus one publisher connection);
- broker memory, file descriptors and Erlang processes per queue (node figures before and
  after, divided by N).

Then, without a broker, a pool of 10,000 tracked groups in memory: one control-loop pass of
each loop's plan (`plan_queues`, `plan_groups`), the tracker's `advance`, an admission check,
a burst of 1000 new keys through admission and the tracker, and the memory they hold.

Last, `--guard` starts a second private node at RabbitMQ's default open-files limit of 1024
and sends a burst of quorum keys past what it can hold: the controller answers `overloaded`
before the broker runs out, and the node still completes handshakes afterwards (issue 10:
without the check it wedged at about 440 quorum queues).

Growth is printed as ratios between consecutive N (1.0 = constant per key). Results go into
docs/benchmarks.md. From the repository root:

    PYTHONPATH=. .venv/bin/python bench/scale_bench.py                   # ~10 min on 2 cores
    PYTHONPATH=. .venv/bin/python bench/scale_bench.py --sizes 100 1000 --types classic
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import math
import os
import resource
import signal
import statistics
import sys
import time
import tracemalloc
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import aio_pika  # noqa: E402
import aiormq.abc  # noqa: E402
import aiormq.connection  # noqa: E402
import httpx  # noqa: E402

from drivers.memory import MemoryDriver  # noqa: E402
from osrdyne.controller import Controller, Settings  # noqa: E402
from osrdyne.controller._broker_settings import BrokerLimitSettings  # noqa: E402
from osrdyne.controller._decisions import reconcile  # noqa: E402
from osrdyne.controller._decisions.admission import Admission, GroupCount  # noqa: E402
from osrdyne.controller._decisions.pool_state import GroupStatus  # noqa: E402
from osrdyne.controller._effects import topology  # noqa: E402
from osrdyne.controller._effects.tracker import PoolStateTracker  # noqa: E402
from osrdyne.wire import PoolNames  # noqa: E402
from tests.faults.rabbit_node import RabbitNode  # noqa: E402

NODE_COLUMNS = "fd_used,fd_total,proc_used,proc_total,mem_used,mem_limit"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def set_open_files(limit: int) -> None:
    """Open-files limit of this process, inherited by the node it starts next."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, max(hard, limit)))
    except (ValueError, PermissionError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))


class Node:
    """A private node and its management API."""

    def __init__(self, node: RabbitNode) -> None:
        self.node = node
        self.http = httpx.AsyncClient(
            base_url=node.management_url + "/api", auth=("guest", "guest"), timeout=120
        )

    def cpu_seconds(self) -> float:
        """CPU time the node's Erlang VM has used (user and system): what the broker spends,
        whatever else the machine runs."""
        pid = int((self.node.base / "node.pid").read_text().strip())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def figures(self) -> dict[str, int]:
        """The node's figures (a node that just booted answers `[[]]` for a while)."""
        for _ in range(120):
            response = await self.http.get("/nodes", params={"columns": NODE_COLUMNS})
            response.raise_for_status()
            doc = response.json()
            if doc and isinstance(doc[0], dict) and "fd_used" in doc[0]:
                return {k: int(v) for k, v in doc[0].items() if isinstance(v, int)}
            await asyncio.sleep(0.5)
        raise TimeoutError(f"the node reports no figures: {doc!r}")

    async def settled_figures(self, queues: int) -> dict[str, int]:
        """The node's figures once its statistics show `queues` queues (they lag seconds)."""
        for _ in range(60):
            response = await self.http.get("/overview", params={"columns": "object_totals"})
            if response.json()["object_totals"]["queues"] >= queues:
                await asyncio.sleep(6)  # one more statistics interval for the node's figures
                return await self.figures()
            await asyncio.sleep(1)
        return await self.figures()

    async def quiet_figures(self) -> dict[str, int]:
        """The node's figures once no queue is left (the floors' vhosts, and the last
        round's queues, are deleted in the background after their DELETE is answered) and
        its statistics say so."""
        for _ in range(120):
            response = await self.http.get("/overview", params={"columns": "object_totals"})
            if response.json()["object_totals"]["queues"] == 0:
                break
            await asyncio.sleep(1)
        await asyncio.sleep(6)  # one more statistics interval for the node's figures
        return await self.figures()

    async def make_vhost(self, vhost: str) -> None:
        quoted = urllib.parse.quote(vhost, safe="")
        (await self.http.put(f"/vhosts/{quoted}")).raise_for_status()
        body = {"configure": ".*", "write": ".*", "read": ".*"}
        (await self.http.put(f"/permissions/{quoted}/guest", json=body)).raise_for_status()

    async def drop_vhost(self, vhost: str) -> None:
        await self.http.delete(f"/vhosts/{urllib.parse.quote(vhost, safe='')}")

    @contextlib.asynccontextmanager
    async def connected(self, vhost: str) -> AsyncIterator[aio_pika.abc.AbstractConnection]:
        """A connection to a vhost of its own, made for it and dropped after (what the floors
        create goes with it)."""
        await self.make_vhost(vhost)
        try:
            connection = await aio_pika.connect(self.urls(vhost)[0])
            async with connection:
                yield connection
        finally:
            await self.drop_vhost(vhost)

    async def empty_root(self) -> None:
        """Delete every queue and exchange of the `/` vhost but the broker's own (what the
        controller made there), as dropping a vhost would: the controller runs in `/`, the one
        vhost the broker's events are published to (`event_exchange.vhost`)."""
        limit = asyncio.Semaphore(16)

        async def delete(path: str) -> None:
            async with limit:
                await self.http.delete(path)

        for kind in ("queues", "exchanges"):
            for _ in range(100):  # 500 a page: 50,000 queues (a page that stays is an error)
                response = await self.http.get(
                    f"/{kind}/%2F", params={"page": 1, "page_size": 500, "columns": "name"}
                )
                response.raise_for_status()
                names = [
                    item["name"]
                    for item in response.json()["items"]
                    if item["name"] and not item["name"].startswith("amq.")
                ]
                if not names:
                    break
                await asyncio.gather(
                    *(delete(f"/{kind}/%2F/{urllib.parse.quote(n, safe='')}") for n in names)
                )
            else:
                raise RuntimeError(f"{kind} of / could not all be deleted")

    def urls(self, vhost: str) -> tuple[str, str]:
        quoted = urllib.parse.quote(vhost, safe="")
        return (
            f"amqp://guest:guest@127.0.0.1:{self.node.port}/{quoted}",
            self.node.management_url,
        )


#: The driver of the bench's controllers (`--driver`): "memory" lists what it started, as a
#: real driver does; "noop" is the real noop driver (it lists nothing: `base.Unlisted`).
DRIVER = {"kind": "memory"}
#: The controllers' `queues.young_queue_hold` (`--young-queue-hold`).
HOLD = {"seconds": 1.0}


def controller_for(
    pool: str, amqp: str, management: str, n: int, queue_type: str, *, fd_headroom: int = 64
) -> Controller:
    settings = Settings(
        pool=pool,
        amqp={"url": amqp, "management_url": management, "operation_timeout": 60},
        groups={
            "unbind_delay": 3600,
            "stop_delay": 3600,
            "max_groups": n + 10,
            "orphan_wait_timeout": 120,
        },
        queues={"type": queue_type, "young_queue_hold": HOLD["seconds"]},
        # The open-files guard's default (3.5 fds a queue) is set by quorum queues; classic
        # queues hold none (fd_per_queue 0.00 below): at 20,000 open files the default would
        # refuse classic keys past about 5,700, and 10,000 are asked for.
        broker={
            "fd_headroom": fd_headroom,
            "fds_per_queue": 3.5 if queue_type == "quorum" else 1.0,
        },
        driver={"kind": "noop"},
        api={"enabled": False},
    )
    if DRIVER["kind"] == "noop":
        return Controller(settings)
    # The in-memory driver: groups cost nothing, but `list()` shows what was started, as a real
    # driver's does.
    return Controller(settings, driver=MemoryDriver())


class StartLines(logging.Handler):
    """Counts the group loop's `worker group ...: start` lines (a driver that cannot list
    must not make every pass start every group again, issue 30)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().endswith(": start"):
            self.count += 1


async def publish(amqp: str, pool: str, keys: list[str]) -> None:
    connection = await aio_pika.connect(amqp)
    async with connection:
        await publish_to(connection, PoolNames(pool).request_exchange, keys)


async def publish_to(
    connection: aio_pika.abc.AbstractConnection, exchange_name: str, keys: list[str]
) -> None:
    """One request per key to the exchange, as fast as the broker confirms."""
    channel = await connection.channel(publisher_confirms=True)
    exchange = await channel.get_exchange(exchange_name, ensure=False)
    for start in range(0, len(keys), 500):
        await asyncio.gather(
            *(
                exchange.publish(aio_pika.Message(b"x"), routing_key=k, mandatory=True)
                for k in keys[start : start + 500]
            )
        )


def quantile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def broker_pace(
    node: Node, queue_type: str, n: int, channels: int = 8, *, enqueue: bool = False
) -> tuple[float, float]:
    """The floor: keys/s at which plain aio-pika declares and binds `n` queues of the type on
    `channels` channels at once, in a vhost of its own (what a hand-written dispatcher pays
    per new key, with nothing else to do); and the broker's CPU ms per key meanwhile.

    `enqueue`: each queue also gets one message published into it through its new binding,
    with a confirm (the least that any dispatcher pays: a new key's first request must end in
    its queue, however it got to the dispatcher)."""
    kind = "enqueue" if enqueue else "floor"
    async with node.connected(f"bench-{kind}-{queue_type}-{n}") as connection:
        opened = [await connection.channel(publisher_confirms=enqueue) for _ in range(channels)]
        exchange = await opened[0].declare_exchange("floor", aio_pika.ExchangeType.DIRECT)
        pending: asyncio.Queue[str] = asyncio.Queue()
        for i in range(n):
            pending.put_nowait(f"floor-k{i:05d}")

        async def declare_and_bind(channel: aio_pika.abc.AbstractChannel) -> None:
            own = await channel.get_exchange("floor", ensure=False)
            while not pending.empty():
                name = pending.get_nowait()
                queue = await channel.declare_queue(
                    name, durable=True, arguments={"x-queue-type": queue_type}
                )
                await queue.bind(exchange, routing_key=name)
                if enqueue:
                    await own.publish(aio_pika.Message(b"x"), routing_key=name, mandatory=True)

        began, cpu = time.perf_counter(), node.cpu_seconds()
        await asyncio.gather(*(declare_and_bind(c) for c in opened))
        took, cpu = time.perf_counter() - began, node.cpu_seconds() - cpu
        return n / took, 1000 * cpu / n


async def dispatcher_pace(
    node: Node, queue_type: str, n: int, channels: int = 8, at_once: int = 32
) -> tuple[float, float]:
    """A second floor: a hand-written dispatcher that carries each new key's request as
    osrdyne's protocol does, in a vhost of its own. The `n` requests are published (as this
    bench publishes them) to a direct exchange whose alternate exchange leads to a holding
    queue; the dispatcher consumes them and, `at_once` keys at a time on `channels` channels,
    declares and binds the key's queue, republishes the request into it with a confirm and
    acks it. Keys/s from the first publish to the last ack (as the burst is timed), and the
    broker's CPU ms per key. Where the broker is what limits, the burst / this floor is
    osrdyne's own cost; the burst / `broker_pace` adds the request's trip."""
    async with node.connected(f"bench-dispatcher-{queue_type}-{n}") as connection:
        setup = await connection.channel()
        holding_x = await setup.declare_exchange("holding", aio_pika.ExchangeType.FANOUT)
        await setup.declare_exchange(
            "requests",
            aio_pika.ExchangeType.DIRECT,
            arguments={"alternate-exchange": "holding"},
        )
        holding = await setup.declare_queue("holding", durable=True)
        await holding.bind(holding_x)
        pool: asyncio.Queue[aio_pika.abc.AbstractChannel] = asyncio.Queue()
        for _ in range(channels):
            pool.put_nowait(await connection.channel(publisher_confirms=True))
        slots = asyncio.Semaphore(at_once)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        acked = 0
        tasks: set[asyncio.Task[None]] = set()

        async def forward(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            try:
                await forward_one(message)
            except Exception as exc:  # the floor is not measured: say why, at once
                if not done.done():
                    done.set_exception(exc)

        async def forward_one(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal acked
            key = message.routing_key or ""
            async with slots:
                channel = await pool.get()
                try:
                    queue = await channel.declare_queue(
                        key, durable=True, arguments={"x-queue-type": queue_type}
                    )
                    await queue.bind("requests", routing_key=key)
                    exchange = await channel.get_exchange("requests", ensure=False)
                    await exchange.publish(
                        aio_pika.Message(message.body), routing_key=key, mandatory=True
                    )
                finally:
                    pool.put_nowait(channel)
                await message.ack()
            acked += 1
            if acked == n:
                done.set_result(None)

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            task = asyncio.create_task(forward(message))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        consuming = await connection.channel()
        await consuming.set_qos(prefetch_count=256)
        consumed = await consuming.get_queue("holding")
        began, cpu = time.perf_counter(), node.cpu_seconds()
        await consumed.consume(on_message)
        await publish_to(connection, "requests", [f"dispatcher-k{i:05d}" for i in range(n)])
        await asyncio.wait_for(done, 900)
        took, cpu = time.perf_counter() - began, node.cpu_seconds() - cpu
        await asyncio.gather(*tasks)
        return n / took, 1000 * cpu / n


async def burst_round(
    node: Node, queue_type: str, n: int, pool: str
) -> tuple[Controller, asyncio.Task[None], dict[str, Any], dict[str, int]]:
    """One round: the floors, then a controller (left running) takes a burst of `n` new
    keys in the node's `/` vhost. The controller and its task, the round's figures, and the
    node's figures before the burst (once the floors' queues are gone)."""
    floor, floor_broker_cpu = await broker_pace(node, queue_type, n)
    enqueue, enqueue_broker_cpu = await broker_pace(node, queue_type, n, enqueue=True)
    dispatcher, dispatcher_broker_cpu = await dispatcher_pace(node, queue_type, n)
    before = await node.quiet_figures()
    amqp, management = node.urls("/")  # the vhost of the broker's events
    controller = controller_for(pool, amqp, management, n, queue_type)
    samples: list[float] = []
    histogram = controller.metrics.orphan_seconds
    observe = histogram.observe

    def observed(value: float, *args: Any, **kwargs: Any) -> None:
        samples.append(value)
        observe(value, *args, **kwargs)

    histogram.observe = observed  # type: ignore[method-assign]
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.wait_leader(), 120)
        keys = [f"k{i:05d}" for i in range(n)]
        forwarded = controller.metrics.orphans.labels("forwarded")
        overloaded = controller.metrics.orphans.labels("overloaded")
        began, burst_cpu0 = time.perf_counter(), time.process_time()
        broker_cpu0 = node.cpu_seconds()
        await publish(amqp, pool, keys)
        while forwarded._value.get() + overloaded._value.get() < n:
            if time.perf_counter() - began > 900:
                raise TimeoutError(f"{forwarded._value.get()} of {n} forwarded after 900 s")
            await asyncio.sleep(0.05)
        if overloaded._value.get():
            raise SystemExit(
                f"{queue_type} N={n}: {overloaded._value.get():.0f} keys refused `overloaded` "
                "(the broker's open-files guard): the burst is not measured in full"
            )
        burst = time.perf_counter() - began
    except BaseException:
        controller.stop()
        await asyncio.wait_for(task, 120)
        await node.empty_root()
        raise
    return (
        controller,
        task,
        {
            "burst_s": burst,
            "keys_per_s": n / burst,
            "floor_keys_per_s": floor,
            "burst_vs_floor": n / burst / floor,
            "dispatcher_keys_per_s": dispatcher,
            "burst_vs_dispatcher": n / burst / dispatcher,
            # Declare, bind and one message into the queue: the most `burst_vs_floor` any
            # dispatcher can reach, since each new key's request ends in its queue.
            "enqueue_keys_per_s": enqueue,
            "enqueue_vs_floor": enqueue / floor,
            "burst_vs_enqueue": n / burst / enqueue,
            # CPU of this process (controller and the bench's publisher) per key of the
            # burst: what the burst costs whatever else the machine runs.
            "burst_cpu_ms_per_key": 1000 * (time.process_time() - burst_cpu0) / n,
            # The broker's CPU per key, in the burst and in the floors: what each key costs
            # it (the burst carries every key's request too: published, delivered,
            # republished).
            "broker_cpu_ms_per_key": 1000 * (node.cpu_seconds() - broker_cpu0) / n,
            "floor_broker_cpu_ms_per_key": floor_broker_cpu,
            "dispatcher_broker_cpu_ms_per_key": dispatcher_broker_cpu,
            "enqueue_broker_cpu_ms_per_key": enqueue_broker_cpu,
            "orphan_p50_ms": 1000 * statistics.median(samples),
            "orphan_p99_ms": 1000 * quantile(samples, 0.99),
        },
        before,
    )


#: Figures of a burst round, paired per round: their median across rounds is reported.
ROUND_FIELDS = (
    "burst_s",
    "keys_per_s",
    "floor_keys_per_s",
    "burst_vs_floor",
    "dispatcher_keys_per_s",
    "burst_vs_dispatcher",
    "burst_cpu_ms_per_key",
    "broker_cpu_ms_per_key",
    "floor_broker_cpu_ms_per_key",
    "dispatcher_broker_cpu_ms_per_key",
    "enqueue_keys_per_s",
    "enqueue_vs_floor",
    "burst_vs_enqueue",
    "enqueue_broker_cpu_ms_per_key",
    "orphan_p50_ms",
    "orphan_p99_ms",
)


async def one_size(node: Node, queue_type: str, n: int, rounds: int = 3) -> dict[str, Any]:
    """`rounds` bursts, each beside the floors measured just before it (this machine's pace
    moves by a third within minutes: only ratios of the same round are compared, and their
    median reported); then, on the last round's pool, what a pool of `n` groups costs."""
    results: list[dict[str, Any]] = []
    for round_ in range(rounds):
        pool = f"scale-{queue_type}-{n}-r{round_}"
        controller, task, figures, before = await burst_round(node, queue_type, n, pool)
        results.append(figures)
        if round_ < rounds - 1:
            controller.stop()
            await asyncio.wait_for(task, 120)
            await node.empty_root()
    vhost = "/"
    try:
        # Idle: passes and anti-entropy listings only, at the default `loop_interval` and
        # `listing_interval` (what an operator gets), over one listing interval: its passes
        # and one full listing (broker events keep the controller current in between).
        passes = controller.metrics.loop_seconds.labels("queues")
        await asyncio.sleep(controller.settings.groups.loop_interval + 1)
        idle_window = controller.settings.groups.listing_interval
        count0, sum0 = _histogram(passes)
        starts = StartLines()
        group_loop = logging.getLogger("osrdyne.controller._effects.group_loop")
        level = group_loop.level
        group_loop.setLevel(logging.INFO)
        group_loop.addHandler(starts)
        cpu0 = time.process_time()
        try:
            await asyncio.sleep(idle_window)
        finally:
            cpu = time.process_time() - cpu0
            group_loop.removeHandler(starts)
            group_loop.setLevel(level)
        count1, sum1 = _histogram(passes)
        rss = rss_mb()
        listings = []
        for _ in range(3):  # the anti-entropy listing itself (management API, paged)
            t = time.perf_counter()
            listed = await topology.list_request_queues(controller.api, controller.names)
            listings.append(time.perf_counter() - t)
        assert len(listed) == n, f"{len(listed)} request queues listed, {n} expected"
        page_ms, whole_ms, whole_kb = await status_times(controller)
        event_lag = await event_lag_s(controller, node, vhost)
        after = await node.settled_figures(n)
    finally:
        controller.stop()
        await asyncio.wait_for(task, 120)
        await node.empty_root()
    done = count1 - count0
    return {
        "type": queue_type,
        "n": n,
        "rounds": rounds,
        **{field: statistics.median(r[field] for r in results) for field in ROUND_FIELDS},
        # Each round's ratios: how far the median is from the worst and the best round.
        "burst_vs_floor_rounds": [round(r["burst_vs_floor"], 3) for r in results],
        "burst_vs_dispatcher_rounds": [round(r["burst_vs_dispatcher"], 3) for r in results],
        "enqueue_vs_floor_rounds": [round(r["enqueue_vs_floor"], 3) for r in results],
        "cpu_per_pass_ms": 1000 * cpu / done if done else float("nan"),
        "converge_wall_ms": 1000 * (sum1 - sum0) / done if done else float("nan"),
        "list_wall_ms": 1000 * statistics.median(listings),
        "status_page_ms": page_ms,
        "status_whole_ms": whole_ms,
        "status_whole_kb": whole_kb,
        "idle_cpu_pct": 100 * cpu / idle_window,
        # Group starts logged while idle (0: no pass starts a group it already asked for).
        "idle_start_lines": starts.count,
        **event_lag,
        "rss_mb": rss,
        "broker_kb_per_queue": (after["mem_used"] - before["mem_used"]) / n / 1024,
        "fd_per_queue": (after["fd_used"] - before["fd_used"]) / n,
        "proc_per_queue": (after["proc_used"] - before["proc_used"]) / n,
        "fd_total": after["fd_total"],
    }


async def status_times(controller: Controller) -> tuple[float, float, float]:
    """p50 ms of `/status` as the API serves it (the document made and written as JSON):
    a page of 100 groups, and the whole document; and the whole one's size in KB."""
    from osrdyne.controller import GroupQuery

    async def timed(query: GroupQuery | None) -> tuple[float, int]:
        t = time.perf_counter()
        text = (await controller.report(query)).model_dump_json()
        return 1000 * (time.perf_counter() - t), len(text)

    pages = [(await timed(GroupQuery(limit=100, sort="messages")))[0] for _ in range(20)]
    wholes = [await timed(None) for _ in range(10)]
    return (
        statistics.median(pages),
        statistics.median(t for t, _ in wholes),
        wholes[-1][1] / 1024,
    )


#: Queues deleted by hand, one after the other, for the event lag.
EVENT_LAG_SAMPLES = 5


async def event_lag_s(controller: Controller, node: Node, vhost: str) -> dict[str, float]:
    """Seconds from a request queue deleted by hand (management API) to the controller
    having made it again, bound to the request exchange with its key (the broker shows it):
    the broker's event (after `queue_repairs.DELETED_GRACE`), or failing that the next
    anti-entropy listing. `EVENT_LAG_SAMPLES` queues, one after the other: the median and
    the longest; and the medians of two parts: the DELETE itself, and from its answer until
    the controller heard the queue's deletion (the broker's event, or nothing: NaN). A queue
    not back within 90 s fails the bench."""
    session = controller.session
    assert session is not None
    loop = session.queue_loop
    heard: dict[str, float] = {}
    original = loop.queue_changed

    def timed(name: str, *, deleted: bool = True) -> None:
        if deleted:
            heard.setdefault(name, time.perf_counter())
        original(name, deleted=deleted)

    loop.queue_changed = timed  # type: ignore[method-assign]
    totals, deleting, hearing = [], [], []
    try:
        for i in range(EVENT_LAG_SAMPLES):
            key = f"k{i:05d}"
            name = controller.names.request_queue(key)
            asked = time.perf_counter()
            total, deleted = await _made_again(controller, node, vhost, key, name)
            totals.append(total)
            deleting.append(deleted - asked)
            hearing.append(heard.get(name, math.nan) - deleted)
            await asyncio.sleep(0.5)
    finally:
        loop.queue_changed = original  # type: ignore[method-assign]
    return {
        "event_lag_s": statistics.median(totals),
        "event_lag_max_s": max(totals),
        # Of which: the broker's DELETE itself (the management API answers once it is done),
        # then until the controller heard the event.
        "event_delete_s": statistics.median(deleting),
        "event_heard_s": statistics.median(hearing),
    }


async def _made_again(
    controller: Controller, node: Node, vhost: str, key: str, name: str
) -> tuple[float, float]:
    """Delete `key`'s queue by hand: seconds until it is bound again, and when it was
    deleted (perf_counter)."""
    quoted = urllib.parse.quote(vhost, safe="")
    path = f"/queues/{quoted}/{urllib.parse.quote(name, safe='')}"
    exchange = urllib.parse.quote(controller.names.request_exchange, safe="")
    binding = f"/bindings/{quoted}/e/{exchange}/q/{urllib.parse.quote(name, safe='')}"
    t = time.perf_counter()
    response = await node.http.delete(path)
    response.raise_for_status()
    deleted = time.perf_counter()
    while time.perf_counter() - t < 90:
        bound = await node.http.get(binding)
        if bound.status_code == 200 and any(b.get("routing_key") == key for b in bound.json()):
            return time.perf_counter() - t, deleted
        await asyncio.sleep(0.02)
    raise SystemExit(f"queue {name} deleted by hand was not made again within 90 s")


def _histogram(histogram: Any) -> tuple[float, float]:
    count = total = 0.0
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
    return count, total


def tracked_in_memory(n: int) -> dict[str, Any]:
    """One pass of each loop's work with `n` tracked groups, no broker."""
    gc.collect()
    tracemalloc.start()
    tracker = PoolStateTracker(unbind_delay=3600, stop_delay=3600, initial=[])
    for i in range(n):
        tracker.require(f"k{i:05d}")
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    expected = tracker.state.value.groups
    actual = dict.fromkeys(expected, GroupStatus.ACTIVE)
    running = set(expected)

    def timed(fn: Any, repeat: int = 20) -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times)

    count = GroupCount(
        expected=lambda: tracker.state.value.groups,
        running=lambda: running,
        actual=lambda: actual,
        removals=lambda: tracker.removals,
    )
    admission = Admission(
        max_groups=None, capacity=lambda: None, groups=count, broker=None,
        limits=BrokerLimitSettings(),
    )  # fmt: skip

    def burst_of_new_keys(keys: int = 1000) -> None:
        """What a burst costs the controller per new key: admit, then require."""
        for i in range(keys):
            key = f"new{i:05d}"
            if admission.group_cap(key) is None:
                tracker.require(key)

    return {
        "n": n,
        "tracker_mb": held / 2**20,
        "plan_queues_ms": timed(lambda: reconcile.plan_queues(expected, actual)),
        "plan_groups_ms": timed(lambda: reconcile.plan_groups(set(expected), running, set())),
        "advance_ms": timed(tracker.advance),
        "advance_full_scan_ms": timed(lambda: _full_scan(tracker)),
        "admit_new_key_ms": timed(lambda: admission.group_cap("new")),
        "require_ms": timed(lambda: tracker.require(f"k{n // 2:05d}")),
        "burst_1000_new_keys_ms": timed(burst_of_new_keys, repeat=1),
    }


def _full_scan(tracker: PoolStateTracker) -> None:
    """`advance` as when a deadline has passed: it walks every group (none is due here)."""
    tracker._lifecycle._next = -math.inf  # noqa: SLF001  (the bench forces the scan it measures)
    tracker.advance()


async def guard(burst: int) -> dict[str, Any]:
    """A node at 1024 open files, a burst of quorum keys past what it holds."""
    set_open_files(1024)
    node = Node(RabbitNode.start_new())
    try:
        amqp, management = node.urls("/")
        pool = "guard"
        before = await node.figures()
        controller = controller_for(pool, amqp, management, burst, "quorum", fd_headroom=128)
        task = asyncio.create_task(controller.run())
        try:
            await asyncio.wait_for(controller.wait_leader(), 120)
            began = time.perf_counter()
            await publish(amqp, pool, [f"g{i:04d}" for i in range(burst)])
            orphans = controller.metrics.orphans
            while (
                orphans.labels("forwarded")._value.get() + orphans.labels("overloaded")._value.get()
                < burst
            ):
                if time.perf_counter() - began > 600:
                    raise TimeoutError("guard burst not handled in 600 s")
                await asyncio.sleep(0.1)
            took = time.perf_counter() - began
            forwarded = orphans.labels("forwarded")._value.get()
            refused = orphans.labels("overloaded")._value.get()
            await asyncio.sleep(6)
            after = await node.figures()
            # Does the node still complete handshakes?
            try:
                connection = await aio_pika.connect(amqp, timeout=20)
                await connection.close()
                handshake = "ok"
            except (TimeoutError, OSError, aio_pika.exceptions.AMQPError) as exc:
                handshake = f"failed: {type(exc).__name__}"
            doc = controller.status()
        finally:
            controller.stop()
            await asyncio.wait_for(task, 120)
        return {
            "burst": burst,
            "forwarded": forwarded,
            "refused_overloaded": refused,
            "seconds": took,
            "fd_before": before["fd_used"],
            "fd_after": after["fd_used"],
            "fd_total": after["fd_total"],
            "handshake_after": handshake,
            "fds_per_queue": controller.settings.broker.fds_per_queue,
            "refusing": doc.admission.refusing if doc.admission else None,
        }
    finally:
        await node.http.aclose()
        await asyncio.to_thread(node.node.close)


def growth(rows: list[dict[str, Any]], field: str) -> str:
    parts = []
    for a, b in zip(rows, rows[1:], strict=False):
        if a[field] and a[field] == a[field]:
            parts.append(f"x{b[field] / a[field]:.2f} for x{b['n'] / a['n']:.0f} keys")
    return ", ".join(parts)


async def _one_frame(self: aiormq.connection.FrameGenerator) -> aiormq.abc.ChannelFrame:
    """aiormq's own frame iterator: one frame per socket write."""
    if self.close_event.is_set():
        raise StopAsyncIteration
    frame: aiormq.abc.ChannelFrame = await self.queue.get()
    self.queue.task_done()
    return frame


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 5000])
    parser.add_argument("--types", nargs="*", default=["quorum", "classic"])
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="bursts per N, each paired with the floors measured just before it (the "
        "median of the rounds' ratios is reported)",
    )
    parser.add_argument("--tracked", type=int, default=10_000, help="(0: skip)")
    parser.add_argument("--guard", type=int, default=600, help="guard burst (0: skip)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--driver",
        choices=["memory", "noop"],
        default="memory",
        help="the controllers' driver: in-memory (lists what it started) or the real noop "
        "driver (lists nothing: the pool of workers started by hand)",
    )
    parser.add_argument(
        "--one-frame-writes",
        action="store_true",
        help="write each AMQP frame with its own send, as aiormq does without osrdyne "
        "(the A/B of osrdyne.wire._aiormq's batched writes)",
    )
    parser.add_argument(
        "--young-queue-hold",
        type=float,
        default=1.0,
        help="the controllers' queues.young_queue_hold (0: the A/B without the hold)",
    )
    args = parser.parse_args()
    DRIVER["kind"] = args.driver
    HOLD["seconds"] = args.young_queue_hold
    if args.one_frame_writes:
        aiormq.connection.FrameGenerator.__anext__ = _one_frame  # type: ignore[method-assign]
    logging.basicConfig(level=logging.WARNING)
    # The orphan processor logs one line per refusal: silenced.
    logging.getLogger("osrdyne.controller._effects.orphans").setLevel(logging.ERROR)
    results: dict[str, Any] = {"sizes": [], "tracked": None, "guard": None}

    if args.sizes and args.types:
        await sizes(args, results)
    if args.tracked:
        results["tracked"] = tracked_in_memory(args.tracked)
        print("tracked in memory:", json.dumps(results["tracked"]), flush=True)
    if args.guard:
        results["guard"] = await guard(args.guard)
        print("guard (1024 open files):", json.dumps(results["guard"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


async def sizes(args: argparse.Namespace, results: dict[str, Any]) -> None:
    set_open_files(65536)
    # Started in this thread, nothing else running yet: a SIGTERM or Ctrl-C during the start
    # stops the node being started (`start_new`), where a start in a worker thread outlived
    # the bench.
    node = Node(RabbitNode.start_new())
    try:
        for queue_type in args.types:
            rows = []
            for n in args.sizes:
                row = await one_size(node, queue_type, n, args.rounds)
                unmeasured = [k for k, v in row.items() if isinstance(v, float) and math.isnan(v)]
                if unmeasured:
                    raise SystemExit(f"{queue_type} N={n}: not measured: {unmeasured}")
                rows.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                  for k, v in row.items()}), flush=True)  # fmt: skip
            results["sizes"].extend(rows)
            for field in ("burst_s", "keys_per_s", "burst_vs_floor", "burst_vs_dispatcher",
                          "enqueue_vs_floor",
                          "burst_cpu_ms_per_key",
                          "broker_cpu_ms_per_key",
                          "orphan_p99_ms",
                          "cpu_per_pass_ms", "list_wall_ms", "rss_mb",
                          "broker_kb_per_queue", "fd_per_queue", "status_page_ms",
                          "status_whole_ms", "idle_cpu_pct", "idle_start_lines",
                          "event_lag_s"):  # fmt: skip
                print(f"  {queue_type} {field}: {growth(rows, field)}")
    finally:
        await node.http.aclose()
        await asyncio.to_thread(node.node.close)


if __name__ == "__main__":
    # SIGTERM as Ctrl-C: the private node is stopped on the way out (a bench ended by SIGTERM
    # left its RabbitMQ VM running).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
