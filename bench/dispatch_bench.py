"""Dispatch benchmark: osrdyne vs a hand-written aio-pika RPC vs Celery, side by side.

One run measures, on the same broker and in interleaved rounds (so a load spike from
something else on the machine hits every system, not just one):

* **osrdyne**: our `Client` -> `{pool}-req-xchg` -> echo worker (`worker_sdk.Worker`, a
  separate process started by the controller, `osrdyne run` in a process of its own, through
  its subprocess driver), after the group is warm. The cold keys' controllers run in this
  process (the bench timestamps their steps).
* **raw aio-pika**: a minimal RPC: a worker process consuming one queue of the same type and
  replying to direct reply-to; the client publishes with the same publisher-confirm setting.
* **Celery**: `task.delay(...).get()` with the `rpc://` result backend, default prefork
  worker, default (classic) queue type.
* **cold key**: a fresh key's first request, split into orphan handling, worker start, and
  total first answer; with standby workers off (every worker started for its key) and on
  (`--standby N`: the subprocess driver keeps N workers started ahead of demand, a new key
  takes one), beside the floor of a plain aio-pika worker spawned by hand for the key, and
  (`--baseline REF`) an earlier commit's osrdyne, controller and echo worker, run from a
  `git archive` of it: a regression of the cold path is seen in the run that makes it.

Throughput: N requests with C in flight (a sliding window). Latency: sequential calls (C=1).
Then ratios against the targets. Everything the script creates (pools, queues, exchanges,
policies, processes) is removed at the end, also on failure or Ctrl-C.

    python bench/dispatch_bench.py --quick                  # ~1 minute
    python bench/dispatch_bench.py                 # full: N=5000 C=64, 1000 seq, 5 rounds, 20 cold
    python bench/dispatch_bench.py --queue-type classic
    python bench/dispatch_bench.py --quick --baseline 38bd5b1   # the first version beside
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import json
import logging
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

AMQP_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
PAYLOAD = b"x" * 100  # every system echoes the same 100-byte body

TARGETS = {
    "throughput_vs_raw": 1.0,  # >= in the median, and in every round within the scatter
    "client_cpu_vs_raw": 1.0,  # <=
    "throughput_vs_celery": 1.5,  # >=
    "p50_vs_raw": 1.1,  # <=
    "orphan_p50_ms": 25.0,  # <=
    "standby_first_answer_p50_ms": 150.0,  # <=
}
#: Interleaved rounds below which the warm path's ratios are shown but not judged against
#: their targets (`--quick` runs one).
MIN_JUDGED_ROUNDS = 3
#: The largest scatter (raw aio-pika's spread between rounds) a round is judged within.
MAX_SCATTER = 0.25

log = logging.getLogger("dispatch_bench")


# ---------------------------------------------------------------------------------------------
# statistics


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank on sorted values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


@dataclasses.dataclass
class Round:
    throughput: float  # requests per second
    lat_ms: list[float]  # sequential latencies
    client_cpu_us: float = float("nan")  # CPU of this process per request (throughput run)
    worker_cpu_us: float = float("nan")  # CPU of the worker process tree per request
    #: osrdyne only: CPU of its controller process per request (its worker's is apart)
    controller_cpu_us: float = float("nan")


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """utime+stime of `pid` and its descendants (from /proc; 0 for a vanished process)."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += tree_cpu_seconds(int(child))
    except (OSError, ValueError, IndexError):
        pass
    return total


@dataclasses.dataclass
class System:
    name: str
    settings: str
    rounds: list[Round] = dataclasses.field(default_factory=list)

    def tp(self) -> tuple[float, float, float]:
        return spread([r.throughput for r in self.rounds])

    def lat(self, q: float) -> tuple[float, float, float]:
        return spread([pct(r.lat_ms, q) for r in self.rounds])

    def cpu(self, which: str) -> tuple[float, float, float]:
        return spread([getattr(r, which) for r in self.rounds])


# ---------------------------------------------------------------------------------------------
# broker housekeeping (management API)


def _vhost() -> str:
    path = urllib.parse.urlsplit(AMQP_URL).path.lstrip("/")
    return urllib.parse.quote(urllib.parse.unquote(path) or "/", safe="")


def _http() -> Any:
    import httpx

    parts = urllib.parse.urlsplit(AMQP_URL)
    auth = (
        urllib.parse.unquote(parts.username or "guest"),
        urllib.parse.unquote(parts.password or "guest"),
    )
    return httpx.Client(base_url=MANAGEMENT_URL + "/api", auth=auth, timeout=30)


def delete_objects(prefixes: list[str], policies: list[str]) -> list[str]:
    """Delete every queue and exchange whose name starts with one of `prefixes`, and policies."""
    import re

    deleted: list[str] = []
    with _http() as http:
        for kind in ("queues", "exchanges"):
            for prefix in prefixes:
                items: list[dict[str, str]] = []
                page = 1
                while True:  # paged: unpaged listings ignore the name filter
                    response = http.get(
                        f"/{kind}/{_vhost()}",
                        params={
                            "name": "^" + re.escape(prefix),
                            "use_regex": "true",
                            "columns": "name",
                            "page": page,
                            "page_size": 500,
                        },
                    )
                    response.raise_for_status()
                    doc = response.json()
                    items.extend(doc["items"])
                    if page >= doc.get("page_count", 1):
                        break
                    page += 1
                for item in items:
                    name = urllib.parse.quote(item["name"], safe="")
                    http.delete(f"/{kind}/{_vhost()}/{name}")
                    deleted.append(f"{kind[:-1]} {item['name']}")
        for policy in policies:
            if http.delete(f"/policies/{_vhost()}/{policy}").status_code < 300:
                deleted.append(f"policy {policy}")
    return deleted


# ---------------------------------------------------------------------------------------------
# child processes (raw worker, celery worker): started in their own session, killed by pid


class Children:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        out = open(log_path, "wb")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
        )
        out.close()
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


# ---------------------------------------------------------------------------------------------
# raw aio-pika RPC


def raw_worker_main(queue: str, prefetch: int, reply_confirms: bool) -> None:
    """A minimal RPC worker: consume `queue`, reply to reply_to, ack after replying."""
    import aio_pika

    async def main() -> None:
        connection = await aio_pika.connect(AMQP_URL)
        channel = await connection.channel(publisher_confirms=reply_confirms)
        await channel.set_qos(prefetch_count=prefetch)
        exchange = channel.default_exchange
        q = await channel.get_queue(queue, ensure=False)

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await exchange.publish(
                aio_pika.Message(message.body, correlation_id=message.correlation_id),
                routing_key=message.reply_to or "",
            )
            await message.ack()

        await q.consume(on_message)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print("ready", flush=True)
        await stop.wait()
        await connection.close()

    asyncio.run(main())


class RawClient:
    """A minimal RPC client: direct reply-to, a future per correlation id."""

    def __init__(self, queue: str, confirm: bool) -> None:
        self.queue = queue
        self.confirm = confirm
        self.pending: dict[str, asyncio.Future[bytes]] = {}

    async def __aenter__(self) -> RawClient:
        import aio_pika

        self.connection = await aio_pika.connect(AMQP_URL)
        self.channel = await self.connection.channel(publisher_confirms=self.confirm)
        replies = await self.channel.get_queue("amq.rabbitmq.reply-to", ensure=False)
        await replies.consume(self._on_reply, no_ack=True)
        self.exchange = self.channel.default_exchange
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.connection.close()

    async def _on_reply(self, message: Any) -> None:
        future = self.pending.pop(message.correlation_id or "", None)
        if future is not None and not future.done():
            future.set_result(message.body)

    async def call(self, body: bytes, timeout: float = 30) -> bytes:
        import aio_pika

        cid = uuid.uuid4().hex
        future = asyncio.get_running_loop().create_future()
        self.pending[cid] = future
        try:
            await self.exchange.publish(
                aio_pika.Message(body, correlation_id=cid, reply_to="amq.rabbitmq.reply-to"),
                routing_key=self.queue,
            )
            return await asyncio.wait_for(future, timeout)
        finally:
            self.pending.pop(cid, None)


# ---------------------------------------------------------------------------------------------
# Celery


def make_celery(queue: str) -> Any:
    from celery import Celery

    app = Celery(
        "dispatch_bench", broker=AMQP_URL.replace("amqp://", "pyamqp://"), backend="rpc://"
    )
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        worker_enable_remote_control=False,  # no pidbox exchanges/queues left behind
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        result_expires=None,
    )

    @app.task(name="dispatch_bench.echo")
    def echo(body: str) -> str:
        return body

    return app


def celery_worker_main(queue: str) -> None:
    app = make_celery(queue)
    app.worker_main(
        [
            "worker",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )


def patch_celery_rpc_timeouts() -> None:
    """Work around celery 5.6.3's regression (celery/celery#10284): the rpc backend's
    result consumer treats the socket timeout of an idle `drain_events` as a lost connection
    and reconnects (a warning with a traceback, and a new connection) every time. Here a
    timeout is passed on as the plain timeout the drainer expects, as before 5.6.3."""
    from celery.backends import rpc

    if getattr(rpc.ResultConsumer, "_bench_patched", False):
        return

    def drain_events(self: Any, timeout: float | None = None) -> Any:
        if not self._connection:
            if timeout:
                time.sleep(timeout)
            return None
        timed_out: BaseException | None = None
        with self.reconnect_on_error():
            try:
                return self._connection.drain_events(timeout=timeout)
            except TimeoutError as exc:
                timed_out = exc
        raise timed_out

    rpc.ResultConsumer.drain_events = drain_events
    rpc.ResultConsumer._bench_patched = True


def _noop(*_: Any) -> None:
    pass


class CeleryBench:
    """Celery's client is synchronous: its runs happen in a thread."""

    def __init__(self, queue: str) -> None:
        patch_celery_rpc_timeouts()
        self.app = make_celery(queue)
        self.echo = self.app.tasks["dispatch_bench.echo"]
        self.body = PAYLOAD.decode()

    def call(self, timeout: float = 30) -> None:
        assert self.echo.delay(self.body).get(timeout=timeout) == self.body

    def throughput(self, n: int, c: int) -> float:
        """A sliding window of c tasks. Each result is registered with the backend as soon as
        it is sent (`.then()`, public API): a plain `.get()` on a result whose reply arrived
        while waiting for another one first blocks in `drain_events` until the *next* message
        or a 1 s interval (measured: ~150 req/s at C=64 that way, 9-24 req/s for batches)."""
        window: collections.deque[Any] = collections.deque()
        started = time.perf_counter()
        for _ in range(n):
            if len(window) >= c:
                assert window.popleft().get(timeout=60) == self.body
            result = self.echo.delay(self.body)
            result.then(_noop)
            window.append(result)
        while window:
            assert window.popleft().get(timeout=60) == self.body
        return n / (time.perf_counter() - started)

    def latency(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            self.call()
            out.append((time.perf_counter() - t) * 1000)
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.app.close()


# ---------------------------------------------------------------------------------------------
# generic async drivers


async def async_throughput(call: Any, n: int, c: int) -> float:
    """n calls, at most c in flight (each slot starts a new call as soon as one ends)."""
    left = n

    async def slot() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()

    started = time.perf_counter()
    await asyncio.gather(*(slot() for _ in range(c)))
    return n / (time.perf_counter() - started)


async def async_latency(call: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t) * 1000)
    return out


# ---------------------------------------------------------------------------------------------
# osrdyne controller in-process (as the tests do), with timing hooks for cold keys


@dataclasses.dataclass
class ColdTimes:
    publish: float = 0.0  # client about to publish (monotonic)
    orphan_arrived: float | None = None  # orphan delivered to the controller
    forwarded: float | None = None  # republish confirmed: the request is in the new queue
    driver_start: float | None = None  # the group loop asked the driver to start the group
    ready: float | None = None  # the controller received the worker's `ready`
    answered: float | None = None  # the client has the first answer


COLD: dict[str, ColdTimes] = {}


def install_hooks() -> None:
    """Timestamp the cold path without touching osrdyne: subclass the orphan and activity
    consumers the controller builds, and wrap the driver's start."""
    # The session module builds the consumers: the names are replaced where it looks them up.
    import osrdyne.controller._session as session_mod
    from osrdyne.controller._effects.activity import ActivityProcessor
    from osrdyne.controller._effects.orphans import OrphanProcessor
    from osrdyne.wire import Event, Header

    for name in ("OrphanProcessor", "ActivityProcessor"):
        if not hasattr(session_mod, name):
            raise SystemExit(f"bench hooks: osrdyne.controller._session has no {name} any more")

    # The orphan's forward is its confirmed republish (`publish` returning), not its ack:
    # the ack of a forward into a queue younger than `queues.young_queue_hold` waits for
    # the queue to be that old, after the first answer has come.
    forwarding: contextvars.ContextVar[ColdTimes | None] = contextvars.ContextVar(
        "forwarding", default=None
    )

    class TimedOrphans(OrphanProcessor):
        async def handle(self, message: Any) -> None:
            times = COLD.get(message.routing_key or "")
            if times is not None and times.orphan_arrived is None:
                times.orphan_arrived = time.monotonic()
            forwarding.set(times)  # this handler's task (and the commit it starts) only
            await super().handle(message)

        async def publish(self, send: Any, *, deadline: float | None = None) -> Any:
            result = await super().publish(send, deadline=deadline)
            times = forwarding.get()
            if times is not None and times.forwarded is None:
                times.forwarded = time.monotonic()
            return result

    class TimedActivity(ActivityProcessor):
        async def handle(self, message: Any) -> None:
            now = time.monotonic()
            event = (message.headers or {}).get(Header.EVENT)
            if isinstance(event, bytes):
                event = event.decode()
            times = COLD.get(message.routing_key or "")
            if times is not None and event == Event.READY.value and times.ready is None:
                times.ready = now
            await super().handle(message)

    session_mod.OrphanProcessor = TimedOrphans  # type: ignore[misc]
    session_mod.ActivityProcessor = TimedActivity  # type: ignore[misc]


def wrap_driver_start(driver: Any) -> None:
    original = driver.start

    async def start(key: str) -> None:
        times = COLD.get(key)
        if times is not None and times.driver_start is None:
            times.driver_start = time.monotonic()
        await original(key)

    driver.start = start


def controller_settings(
    pool: str, queue_type: str, concurrency: int, state_dir: str, standby: int = 0
) -> Any:
    from osrdyne.controller import Settings

    return Settings(
        pool=pool,
        amqp={"url": AMQP_URL, "management_url": MANAGEMENT_URL},
        groups={"unbind_delay": 3600, "stop_delay": 3600},
        queues={"type": queue_type},
        api={"enabled": False},
        driver={
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
                "env": {"WORKER_CONCURRENCY": str(concurrency)},
                "owner": state_dir,
                "stop_timeout": 5,
                "cwd": str(REPO),
                "standby": standby,
            },
        },
    )


# ---------------------------------------------------------------------------------------------
# the run


def histogram_p50(histogram: Any) -> tuple[float, float, int]:
    """Bucketed p50 upper bound, mean and count of a prometheus Histogram."""
    buckets = []
    total = count = 0.0
    for metric in histogram.collect()[0].samples:
        if metric.name.endswith("_bucket"):
            buckets.append((float(metric.labels["le"]), metric.value))
        elif metric.name.endswith("_sum"):
            total = metric.value
        elif metric.name.endswith("_count"):
            count = metric.value
    upper = float("nan")
    for le, cumulative in buckets:
        if count and cumulative >= count / 2:
            upper = le
            break
    return upper, (total / count if count else float("nan")), int(count)


@dataclasses.dataclass
class Bench:
    """Everything one run creates, so that `cleanup` can remove all of it."""

    args: argparse.Namespace
    tag: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:6])
    tmp: Path = dataclasses.field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="dispatch-bench-"))
    )
    children: Children = dataclasses.field(default_factory=Children)
    controllers: list[tuple[Any, asyncio.Task[None]]] = dataclasses.field(default_factory=list)
    celery: CeleryBench | None = None

    @property
    def pool(self) -> str:
        return f"bench-{self.tag}"

    @property
    def cold_pool(self) -> str:
        return f"bench-cold-{self.tag}"

    @property
    def standby_pool(self) -> str:
        return f"bench-standby-{self.tag}"

    @property
    def baseline_pool(self) -> str:
        return f"bench-base-{self.tag}"

    @property
    def pools(self) -> tuple[str, ...]:
        return (self.pool, self.cold_pool, self.standby_pool, self.baseline_pool)

    def raw_queue(self, variant: str) -> str:
        return f"bench-raw-{variant}-{self.tag}"

    @property
    def celery_queue(self) -> str:
        return f"bench-celery-{self.tag}"

    async def start_controller(self, pool: str, standby: int = 0) -> Any:
        from osrdyne.controller import Controller

        settings = controller_settings(
            pool, self.args.queue_type, self.args.c, str(self.tmp / pool), standby
        )
        controller = Controller(settings)
        wrap_driver_start(controller.driver)
        task = asyncio.create_task(controller.run(), name=f"controller {pool}")
        self.controllers.append((controller, task))
        await asyncio.wait_for(controller.wait_leader(), 30)
        return controller

    async def start_baseline(self, ref: str) -> None:
        """Run `ref`'s controller (its own code, from `git archive`) for the baseline pool,
        with `ref`'s echo worker, as a child process; back once it forwards a request."""
        from osrdyne import Client

        root = self.tmp / "baseline"
        root.mkdir()
        archive = subprocess.run(
            ["git", "archive", "--format=tar", ref], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        config = root / "bench.toml"
        config.write_text(self.controller_toml(self.baseline_pool, root, "baseline-owner"))
        # PYTHONPATH before the editable install of this checkout: the controller and its
        # workers import `ref`'s osrdyne, drivers and worker_sdk.
        env = {**os.environ, "PYTHONPATH": str(root)}
        with open(self.tmp / "baseline.log", "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "osrdyne", "run", "--config", str(config)],
                cwd=root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.procs.append(proc)
        # Its exchanges exist once it leads: until then a call is refused; the first key's
        # answer (a cold start of `ref`'s own) is not measured.
        async with Client(AMQP_URL, name="dispatch bench baseline") as client:
            await _first_answer(client, self.baseline_pool, proc, self.tmp / "baseline.log")

    async def start_controller_process(self, pool: str) -> subprocess.Popen[bytes]:
        """This checkout's controller for `pool` in a process of its own, as it runs in
        production (`osrdyne run`): the warm path's client CPU is then the client's alone
        (an in-process controller's loops added 10-50 µs a call to it on a loaded
        machine); the controller's is measured apart."""
        config = self.tmp / f"{pool}.toml"
        config.write_text(self.controller_toml(pool, REPO, f"{pool}-owner"))
        with open(self.tmp / f"{pool}.log", "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "osrdyne", "run", "--config", str(config)],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.procs.append(proc)
        return proc

    def controller_toml(self, pool: str, cwd: Path, owner: str) -> str:
        """A controller's settings for `pool`: the subprocess driver running the echo worker
        (WORKER_CONCURRENCY = C) from `cwd`."""
        return "\n".join(
            [
                f"pool = {json.dumps(pool)}",
                "[amqp]",
                f"url = {json.dumps(AMQP_URL)}",
                f"management_url = {json.dumps(MANAGEMENT_URL)}",
                "[groups]",
                "unbind_delay = 3600",
                "stop_delay = 3600",
                "[queues]",
                f"type = {json.dumps(self.args.queue_type)}",
                "[api]",
                "enabled = false",
                "[driver]",
                'kind = "subprocess"',
                "[driver.subprocess]",
                f"command = {json.dumps([sys.executable, '-m', 'worker_sdk.examples.echo'])}",
                f"env = {{ WORKER_CONCURRENCY = {json.dumps(str(self.args.c))} }}",
                f"owner = {json.dumps(str(self.tmp / owner))}",
                "stop_timeout = 5",
                f"cwd = {json.dumps(str(cwd))}",
                "",
            ]
        )

    async def cleanup(self) -> None:
        if self.celery is not None:
            self.celery.close()
        for controller, _ in self.controllers:
            controller.stop()  # stops its driver, hence every worker group it started
        for _, task in self.controllers:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
        self.children.kill_all()
        policies = [
            f"osrdyne-{pool}-{kind}" for pool in self.pools for kind in ("requests", "poison")
        ]
        try:
            deleted = await asyncio.to_thread(
                delete_objects,
                [pool + "-" for pool in self.pools]
                + [self.celery_queue]
                + [self.raw_queue(v) for v in RAW_VARIANTS],
                policies,
            )
            print(
                f"cleanup: deleted {len(deleted)} broker object(s); stopped "
                f"{len(self.children.procs)} child process(es) and every worker group",
                flush=True,
            )
        except Exception as exc:  # noqa: BLE001
            print(f"cleanup of broker objects failed: {exc}", file=sys.stderr)
        shutil.rmtree(self.tmp, ignore_errors=True)


#: Raw aio-pika workers: (name, reply confirms).
RAW_VARIANTS = {"plain": False, "confirmed": True}


async def _first_answer(
    client: Any, pool: str, proc: subprocess.Popen[bytes], log_path: Path, key: str = "warm-up"
) -> None:
    """Call `key` of `pool`, whose controller runs as `proc`, until it answers (a call is
    refused until the controller leads and has declared the pool's exchanges)."""
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the controller of {pool} exited {proc.returncode}: see {log_path}")
        try:
            response = await client.call(pool, key, PAYLOAD, timeout=60)
        except Exception:  # noqa: BLE001 - not leading yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
            continue
        assert response.ok and response.body == PAYLOAD, response
        return


def own_cpu_seconds(pid: int) -> float:
    """utime+stime of `pid` alone (0 for a vanished process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, ValueError, IndexError):
        return 0.0


async def start_raw(bench: Bench, variant: str) -> RawClient:
    """Declare the variant's queue, start its worker, return a connected client once the
    worker answers."""
    import aio_pika

    queue = bench.raw_queue(variant)
    async with await aio_pika.connect(AMQP_URL) as connection:
        channel = await connection.channel()
        args = {"x-queue-type": bench.args.queue_type}
        await channel.declare_queue(queue, durable=True, arguments=args)
    proc = bench.children.spawn(
        ["_raw-worker", queue, str(bench.args.c), str(int(RAW_VARIANTS[variant]))],
        bench.tmp / f"raw-{variant}.log",
    )
    client = RawClient(queue, confirm=not bench.args.no_confirm)
    await client.__aenter__()
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            await client.call(PAYLOAD, timeout=1)
            return client
    await client.__aexit__()
    raise RuntimeError(f"raw worker {variant} did not answer")


async def measure_warm(bench: Bench, results: dict[str, Any]) -> dict[str, System]:
    """Throughput and sequential latency of every system, in interleaved rounds."""
    from osrdyne import Client

    args = bench.args
    n, c, lat_n = args.n, args.c, args.lat_n
    confirm = "off" if args.no_confirm else "on"
    systems: dict[str, System] = {}
    runs: dict[str, tuple[Any, Any]] = {}
    pids: dict[str, Any] = {}  # system -> callable giving its worker process ids
    raws: list[RawClient] = []
    celery_proc = None
    if not args.skip_celery:
        celery_proc = bench.children.spawn(
            ["_celery-worker", bench.celery_queue], bench.tmp / "celery.log"
        )
    controller = await bench.start_controller_process(bench.pool)
    async with Client(AMQP_URL, confirm=not args.no_confirm, name="dispatch bench") as client:

        async def ours() -> None:
            response = await client.call(bench.pool, "warm", PAYLOAD, timeout=60)
            assert response.ok and response.body == PAYLOAD, response

        # the warm group's cold start (orphan -> queue -> worker), once the controller leads
        await _first_answer(client, bench.pool, controller, bench.tmp / f"{bench.pool}.log", "warm")
        await asyncio.sleep(1)  # its `ready` report heard
        systems["osrdyne"] = System(
            "osrdyne",
            f"{args.queue_type} queue via `{bench.pool.split('-')[0]}-…-req-xchg`; confirms: "
            f"requests {confirm}, replies off (direct reply-to: a confirm guarantees nothing); "
            f"worker prefetch {c} "
            "(WORKER_CONCURRENCY); mandatory, expiration and x-deadline on every request",
        )
        runs["osrdyne"] = (
            lambda: async_throughput(ours, n, c),
            lambda: async_latency(ours, lat_n),
        )
        pids["osrdyne"] = lambda: [controller.pid]  # its tree: the controller and its worker
        try:
            for variant, reply_confirms in RAW_VARIANTS.items():
                raw = await start_raw(bench, variant)
                raws.append(raw)
                proc = bench.children.procs[-1]
                name = "raw aio-pika" + (" +reply confirms" if reply_confirms else "")
                systems[name] = System(
                    name,
                    f"{args.queue_type} queue via the default exchange; confirms: requests "
                    f"{confirm}, replies {'on' if reply_confirms else 'off'}; prefetch {c}",
                )
                runs[name] = _raw_runs(raw, n, c, lat_n)
                pids[name] = lambda proc=proc: [proc.pid]
            if celery_proc is not None:
                bench.celery = celery = CeleryBench(bench.celery_queue)
                await asyncio.to_thread(celery.call, 120)
                systems["celery"] = System(
                    "celery",
                    "classic queue (Celery's default); rpc:// result backend; no publisher "
                    "confirms (kombu default); prefork pool of 2 processes (= cores), "
                    "prefetch multiplier 4 (defaults); `.delay().get()`",
                )
                pids["celery"] = lambda: [celery_proc.pid]
                runs["celery"] = (
                    lambda: asyncio.to_thread(celery.throughput, n, c),
                    lambda: asyncio.to_thread(celery.latency, lat_n),
                )
            print("warm-up (untimed)", flush=True)
            for tp_run, _ in runs.values():
                await tp_run()
            order = list(runs)
            for r in range(args.rounds):
                for name in order if r % 2 == 0 else reversed(order):
                    tp_run, lat_run = runs[name]
                    workers = pids[name]()
                    # osrdyne's controller apart from its worker (the root of its tree)
                    own = controller.pid if name == "osrdyne" else None
                    cpu0, wcpu0 = time.process_time(), sum(map(tree_cpu_seconds, workers))
                    ccpu0 = own_cpu_seconds(own) if own else 0.0
                    tp = await tp_run()
                    cpu1, wcpu1 = time.process_time(), sum(map(tree_cpu_seconds, workers))
                    ccpu1 = own_cpu_seconds(own) if own else 0.0
                    lat = await lat_run()
                    rnd = Round(
                        tp,
                        lat,
                        (cpu1 - cpu0) / n * 1e6,
                        (wcpu1 - wcpu0 - (ccpu1 - ccpu0)) / n * 1e6,
                        (ccpu1 - ccpu0) / n * 1e6 if own else float("nan"),
                    )
                    systems[name].rounds.append(rnd)
                    print(
                        f"  round {r + 1} {name:28s} {tp:7.0f} req/s  "
                        f"p50 {pct(lat, 50):6.2f} ms  p99 {pct(lat, 99):6.2f} ms  "
                        f"CPU/req client {rnd.client_cpu_us:5.0f} us "
                        f"worker {rnd.worker_cpu_us:5.0f} us"
                        + (f" controller {rnd.controller_cpu_us:4.0f} us" if own else ""),
                        flush=True,
                    )
        finally:
            for raw in raws:
                await raw.__aexit__()
    results["systems"] = {
        name: {"settings": s.settings, "rounds": [dataclasses.asdict(r) for r in s.rounds]}
        for name, s in systems.items()
    }
    return systems


def _raw_runs(raw: RawClient, n: int, c: int, lat_n: int) -> tuple[Any, Any]:
    async def call() -> None:
        assert await raw.call(PAYLOAD) == PAYLOAD

    return (lambda: async_throughput(call, n, c), lambda: async_latency(call, lat_n))


async def floor_first_answer(bench: Bench, i: int) -> float:
    """The floor of a cold key: the request published to a fresh queue, a plain aio-pika
    worker process spawned by hand for it (what a hand-made dispatcher does), ms to the
    answer."""
    import aio_pika

    queue = f"{bench.cold_pool}-floor-{i}"
    async with await aio_pika.connect(AMQP_URL) as connection:
        channel = await connection.channel()
        args = {"x-queue-type": bench.args.queue_type}
        await channel.declare_queue(queue, durable=True, arguments=args)
    async with RawClient(queue, confirm=not bench.args.no_confirm) as client:
        t0 = time.monotonic()
        answer = asyncio.ensure_future(client.call(PAYLOAD, timeout=60))
        await asyncio.sleep(0)  # published before the worker starts, as an orphan would be
        proc = bench.children.spawn(["_raw-worker", queue, "1", "0"], bench.tmp / "floor.log")
        try:
            assert await answer == PAYLOAD
            return (time.monotonic() - t0) * 1000
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)


async def wait_standby_waiting(controller: Any, count: int, timeout: float = 60) -> None:
    """Until `count` standby workers of the controller's driver wait for a key (each has
    declared its standby queue): a new key then takes one, as on a quiet pool."""
    from osrdyne import PoolNames

    names = PoolNames(controller.settings.pool)
    deadline = time.monotonic() + timeout
    with _http() as http:
        while time.monotonic() < deadline:
            workers = controller.driver.standby_workers()
            if len(workers) == count and all(
                http.get(
                    f"/queues/{_vhost()}/"
                    + urllib.parse.quote(names.standby_queue(w.worker_id), safe="")
                ).status_code
                == 200
                for w in workers
            ):
                return
            await asyncio.sleep(0.05)
    raise TimeoutError(f"{count} standby workers never waited for a key")


async def cold_key(client: Any, pool: str, key: str) -> dict[str, float]:
    """A fresh key's first request through a controller: every phase of its cold path."""
    times = COLD[key] = ColdTimes()
    times.publish = time.monotonic()
    response = await client.call(pool, key, PAYLOAD, timeout=120)
    times.answered = time.monotonic()
    assert response.ok and response.body == PAYLOAD, response
    for _ in range(300):  # `ready` may trail the first answer a little
        if times.ready is not None:
            break
        await asyncio.sleep(0.01)
    row = {
        "publish_to_orphan_ms": _ms(times.orphan_arrived, times.publish),
        "orphan_handling_ms": _ms(times.forwarded, times.orphan_arrived),
        "publish_to_in_queue_ms": _ms(times.forwarded, times.publish),
        "publish_to_driver_start_ms": _ms(times.driver_start, times.publish),
        "worker_start_ms": _ms(times.ready, times.driver_start),
        "total_first_answer_ms": _ms(times.answered, times.publish),
    }
    unmeasured = [phase for phase, value in row.items() if value != value]  # nan
    if unmeasured:
        raise SystemExit(
            f"cold key {key}: phase(s) {', '.join(unmeasured)} not measured (the "
            "bench's hooks no longer reach the controller): fix the bench"
        )
    return row


async def measure_cold(
    bench: Bench, results: dict[str, Any]
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Fresh keys one at a time, through a controller without standby workers and one with
    `--standby` of them: timestamps of every phase, and the floor (a hand-spawned aio-pika
    worker per key) interleaved with them."""
    from osrdyne import Client

    args = bench.args
    rows: list[dict[str, float]] = []
    standby_rows: list[dict[str, float]] = []
    controller = await bench.start_controller(bench.cold_pool)
    standby = None
    if args.standby:
        standby = await bench.start_controller(bench.standby_pool, standby=args.standby)
    if args.baseline:
        await bench.start_baseline(args.baseline)
    async with Client(AMQP_URL, confirm=not args.no_confirm, name="dispatch bench cold") as client:
        for i in range(args.cold_keys):
            if standby is not None:
                # the replacement of the previous key's standby worker starts while its
                # interpreter imports: let it settle so it does not load the floor's and the
                # standby-off row's machine
                await wait_standby_waiting(standby, args.standby)
            floor_ms = await floor_first_answer(bench, i)
            key = f"cold-{i}"
            row = {
                **await cold_key(client, bench.cold_pool, key),
                "floor_first_answer_ms": floor_ms,
            }
            rows.append(row)
            line = (
                f"  cold {key}: in queue {row['publish_to_in_queue_ms']:.1f} ms, worker start "
                f"{row['worker_start_ms']:.0f} ms, first answer "
                f"{row['total_first_answer_ms']:.0f} ms"
            )
            if args.baseline:
                started = time.monotonic()
                response = await client.call(bench.baseline_pool, key, PAYLOAD, timeout=120)
                assert response.ok and response.body == PAYLOAD, response
                row["baseline_first_answer_ms"] = _ms(time.monotonic(), started)
                line += f"; {args.baseline}: {row['baseline_first_answer_ms']:.0f} ms"
            if standby is not None:
                await wait_standby_waiting(standby, args.standby)
                on = {
                    **await cold_key(client, bench.standby_pool, f"standby-{i}"),
                    "floor_first_answer_ms": floor_ms,
                }
                standby_rows.append(on)
                line += (
                    f"; standby on: worker start {on['worker_start_ms']:.0f} ms, "
                    f"first answer {on['total_first_answer_ms']:.0f} ms"
                )
            print(f"{line} (hand-spawned aio-pika worker: {floor_ms:.0f} ms)", flush=True)
    upper, mean, count = histogram_p50(controller.metrics.orphan_seconds)
    results["orphan_histogram"] = {"p50_bucket_upper_s": upper, "mean_s": mean, "count": count}
    results["cold"] = rows
    results["cold_standby"] = standby_rows
    return rows, standby_rows


async def run(args: argparse.Namespace) -> dict[str, Any]:
    install_hooks()
    bench = Bench(args)
    results: dict[str, Any] = {
        "commit": _git_head(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "pool": bench.pool,
        "load_start": f"{os.getloadavg()[0]:.2f}",
    }
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main_task.cancel)
    try:
        systems = await measure_warm(bench, results)
        cold, standby = await measure_cold(bench, results) if args.cold_keys else ([], [])
        report(args, systems, cold, standby, results)
        return results
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await bench.cleanup()


def _git_head() -> str:
    """The commit measured, and whether osrdyne's own code differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "osrdyne", "worker_sdk", "drivers"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + (" (osrdyne/worker_sdk/drivers modified)" if dirty else "")


def _ms(end: float | None, start: float | None) -> float:
    if end is None or start is None:
        return float("nan")
    return (end - start) * 1000


def _fmt(t: tuple[float, float, float], digits: int = 0) -> str:
    return f"{t[0]:.{digits}f} [{t[1]:.{digits}f}-{t[2]:.{digits}f}]"


def paired(a: System, b: System, metric: str) -> tuple[float, float, float]:
    """Per-round ratio a/b (the two ran back to back in each round): median [min-max]."""
    ratios = []
    for ra, rb in zip(a.rounds, b.rounds, strict=True):
        if metric == "tp":
            ratios.append(ra.throughput / rb.throughput)
        elif metric == "cpu":
            ratios.append(ra.client_cpu_us / rb.client_cpu_us)
        else:
            ratios.append(pct(ra.lat_ms, 50) / pct(rb.lat_ms, 50))
    return spread(ratios)


COLD_LABELS = {
    "publish_to_orphan_ms": "client publish -> orphan delivered to the controller",
    "orphan_handling_ms": "orphan handling: arrival -> confirmed republish into the new queue",
    "publish_to_in_queue_ms": "(a) client publish -> request in the new queue",
    "publish_to_driver_start_ms": "client publish -> driver.start(key) called",
    "worker_start_ms": "(b) worker start: driver.start -> `ready` seen by the controller",
    "total_first_answer_ms": "(c) total: client publish -> first answer",
    "floor_first_answer_ms": "floor: publish -> answer, aio-pika worker spawned by hand",
}


def report(
    args: argparse.Namespace,
    systems: dict[str, System],
    cold: list[dict[str, float]],
    standby: list[dict[str, float]],
    results: dict[str, Any],
) -> None:
    print()
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}; N={args.n} C={args.c}, sequential {args.lat_n}; "
        f"{args.rounds} interleaved round(s), median [min-max] over rounds; "
        f"{args.queue_type} queues; load average {results['load_start']} at start, "
        f"{os.getloadavg()[0]:.2f} at end; commit {results['commit']}"
    )
    print()
    print(
        "| system | throughput req/s | p50 ms | p95 ms | p99 ms "
        "| client CPU us/req | worker CPU us/req | controller CPU us/req |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in systems.values():
        controller = s.cpu("controller_cpu_us")
        print(
            f"| {s.name} | {_fmt(s.tp())} | {_fmt(s.lat(50), 2)} | {_fmt(s.lat(95), 2)} | "
            f"{_fmt(s.lat(99), 2)} | {_fmt(s.cpu('client_cpu_us'))} | "
            f"{_fmt(s.cpu('worker_cpu_us'))} | "
            f"{'-' if controller[0] != controller[0] else _fmt(controller)} |"
        )
    print(
        "\nCPU per request is measured over the throughput runs (utime+stime from /proc; "
        "client = this whole process, which runs no controller during these runs; worker = "
        "the worker's process tree; controller = osrdyne's controller process alone)."
    )
    print()
    for s in systems.values():
        print(f"- {s.name}: {s.settings}")
    checks: list[tuple[str, tuple[float, float, float], str, float]] = []
    ours, raw, cel = systems["osrdyne"], systems["raw aio-pika"], systems.get("celery")
    throughput = paired(ours, raw, "tp")
    checks.append(("throughput ours/raw", throughput, ">=", TARGETS["throughput_vs_raw"]))
    # The bench's own scatter: how far raw aio-pika's throughput moves between rounds with
    # nothing of its own changed ((max - min) / median of its rounds).
    raw_tp = raw.tp()
    scatter = (raw_tp[2] - raw_tp[1]) / raw_tp[0]
    lowest = TARGETS["throughput_vs_raw"] - scatter
    # A scatter past MAX_SCATTER (a machine loaded by others) judges no round: shown only.
    judged = scatter <= MAX_SCATTER
    checks.append(
        (
            f"throughput ours/raw, lowest round (the bench's scatter: {scatter:.2f}"
            + ("" if judged else f", over {MAX_SCATTER}: not judged, rerun on a quiet machine")
            + ")",
            (throughput[1], throughput[1], throughput[2]),
            ">=" if judged else "",
            round(lowest, 2) if judged else 0,
        )
    )
    results["scatter"] = scatter
    checks.append(
        ("client CPU/req ours/raw", paired(ours, raw, "cpu"), "<=", TARGETS["client_cpu_vs_raw"])
    )
    checks.append(("p50 latency ours/raw", paired(ours, raw, "p50"), "<=", 1.1))
    confirmed = systems.get("raw aio-pika +reply confirms")
    if confirmed is not None:
        checks.append(("throughput ours/raw+reply confirms", paired(ours, confirmed, "tp"), "", 0))
        checks.append(("p50 ours/raw+reply confirms", paired(ours, confirmed, "p50"), "", 0))
    if cel is not None:
        checks.append(("throughput ours/celery", paired(ours, cel, "tp"), ">=", 1.5))
        checks.append(("p50 latency ours/celery", paired(ours, cel, "p50"), "", 0))
    # One or two rounds of the warm path swing from 0.73 to 1.4 on a shared machine: their
    # paired ratios are shown, but judged against the targets only with enough rounds.
    warm = {name for name, *_ in checks}
    if cold:
        checks += cold_report(args, cold, standby, results)
    unjudged = f"not judged: {args.rounds} round(s), {MIN_JUDGED_ROUNDS} needed (full mode: 5)"
    print()
    print("| ratio (per-round paired: median [min-max]) | value | target | met |")
    print("| --- | --- | --- | --- |")
    for name, value, op, target in checks:
        if not op:
            print(f"| {name} | {_fmt(value, 2)} | - | - |")
            continue
        if name in warm and args.rounds < MIN_JUDGED_ROUNDS:
            print(f"| {name} | {_fmt(value, 2)} | {op} {target:g} | {unjudged} |")
            continue
        met = value[0] >= target if op == ">=" else value[0] <= target
        print(f"| {name} | {_fmt(value, 2)} | {op} {target:g} | {'MET' if met else 'MISSED'} |")
    results["checks"] = [
        {
            "name": name,
            "median_min_max": value,
            "op": op,
            "target": target,
            "judged": bool(op) and (name not in warm or args.rounds >= MIN_JUDGED_ROUNDS),
        }
        for name, value, op, target in checks
    ]


def cold_report(
    args: argparse.Namespace,
    cold: list[dict[str, float]],
    standby: list[dict[str, float]],
    results: dict[str, Any],
) -> list[tuple[str, tuple[float, float, float], str, float]]:
    """The cold keys' tables; the ratios to check."""
    checks: list[tuple[str, tuple[float, float, float], str, float]] = []
    columns = {k: [row[k] for row in cold] for k in cold[0]}
    print()
    print(f"cold keys: {len(cold)} fresh keys, one at a time, {args.queue_type} queues")
    print()
    print("| phase | p50 ms | p95 ms | max ms |")
    print("| --- | --- | --- | --- |")
    labels = dict(COLD_LABELS)
    if args.baseline:
        labels["baseline_first_answer_ms"] = (
            f"baseline: publish -> first answer, osrdyne at {args.baseline}"
        )
    for k, label in labels.items():
        v = columns[k]
        print(f"| {label} | {pct(v, 50):.1f} | {pct(v, 95):.1f} | {max(v):.1f} |")
    hist = results["orphan_histogram"]
    print(
        f"\nosrdyne_orphan_handling_seconds: count {hist['count']}, mean "
        f"{hist['mean_s'] * 1000:.1f} ms, "
        f"p50 bucket <= {hist['p50_bucket_upper_s'] * 1000:g} ms"
    )
    ratios = [r["total_first_answer_ms"] / r["floor_first_answer_ms"] for r in cold]
    checks.append(("cold first answer ours/hand-spawned floor (per key)", spread(ratios), "", 0))
    if args.baseline:
        ratios = [r["total_first_answer_ms"] / r["baseline_first_answer_ms"] for r in cold]
        checks.append(
            (
                f"standby off: cold first answer ours/{args.baseline} (per key)",
                spread(ratios),
                "<=",
                1.0,
            )
        )
    if standby:
        on = {k: [row[k] for row in standby] for k in standby[0]}
        print()
        print(
            f"standby workers: the same keys' first answers with `standby = "
            f"{args.standby}` (a new key takes a worker started ahead of demand), "
            "interleaved with the rows above"
        )
        print()
        print("| phase | standby off p50 ms | standby on p50 ms | standby on p95 ms |")
        print("| --- | --- | --- | --- |")
        for k, label in COLD_LABELS.items():
            print(
                f"| {label} | {pct(columns[k], 50):.1f} | {pct(on[k], 50):.1f} | "
                f"{pct(on[k], 95):.1f} |"
            )
        first = on["total_first_answer_ms"]
        checks.append(
            (
                "standby on: first answer p50 ms",
                (pct(first, 50), min(first), max(first)),
                "<=",
                TARGETS["standby_first_answer_p50_ms"],
            )
        )
        ratios = [r["total_first_answer_ms"] / r["floor_first_answer_ms"] for r in standby]
        checks.append(
            (
                "standby on: first answer ours/hand-spawned floor (per key)",
                spread(ratios),
                "<=",
                1.0,
            )
        )
    for k, name in (
        ("publish_to_in_queue_ms", "orphan p50 ms, client publish -> in queue"),
        ("orphan_handling_ms", "orphan p50 ms, controller handling (histogram's span)"),
    ):
        v = pct(columns[k], 50)
        checks.append((name, (v, min(columns[k]), max(columns[k])), "<=", 25.0))
    return checks


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_raw-worker":
        raw_worker_main(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_celery-worker":
        celery_worker_main(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small N, about a minute")
    parser.add_argument("--queue-type", choices=["quorum", "classic"], default="quorum")
    parser.add_argument("--n", type=int, help="requests per throughput run (5000; quick 1000)")
    parser.add_argument("--c", type=int, default=64, help="requests in flight, and prefetch")
    parser.add_argument("--lat-n", type=int, help="sequential calls per round (1000; quick 200)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (5; quick 1)")
    parser.add_argument("--cold-keys", type=int, help="fresh keys (20; quick 5)")
    parser.add_argument(
        "--standby", type=int, default=2, help="standby workers of the standby row (0: no row)"
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also run this commit's osrdyne (controller and echo worker) for the cold keys",
    )
    parser.add_argument("--skip-celery", action="store_true")
    parser.add_argument("--no-confirm", action="store_true", help="requests without confirms")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    args.n = args.n or (1000 if args.quick else 5000)
    args.lat_n = args.lat_n or (200 if args.quick else 1000)
    args.rounds = args.rounds or (1 if args.quick else 5)
    if args.cold_keys is None:
        args.cold_keys = 5 if args.quick else 20
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mode = "quick" if args.quick else "full"
    print(f"dispatch bench: {mode} mode, broker {AMQP_URL.split('@')[-1]}", flush=True)
    results = asyncio.run(run(args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
