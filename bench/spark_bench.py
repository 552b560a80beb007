"""Spark query worker benchmark: warm latency on a cached 1M-row dataset, against a new
SparkSession per request and DuckDB on the same Parquet; first answer; worker memory.

    .venv/bin/python bench/spark_bench.py [--rows 1000000] [--runs 60] [--naive-runs 3]
    .venv/bin/python bench/spark_bench.py --mode embedded,connect --no-baselines --keys 20

Stages (run one after the other: this machine has two cores):

1. data: `pipeline.trips` rows written as Parquet under a temporary dataset root;
2. in-process: the query worker's handler (`SparkWorker.call`, what a request costs once
   the message is in) on the cached dataset;
3. through RabbitMQ: a real `python -m spark_workers.query_worker` process consuming a queue
   declared here; the client publishes and waits on direct reply-to; first answer split into
   Spark start and load (from the worker's log), worker RSS (python + its JVM) from /proc;
4. naive: a new process building a SparkSession, reading the Parquet and answering, per
   request; and a new session in a live process (JVM kept: the cheapest "naive" variant);
5. DuckDB in-process on the same Parquet files: the floor;
6. with `--mode ...,connect`: the same worker through RabbitMQ in Spark Connect mode
   (SPARK_WORKER_REMOTE) against a server started by scripts/ensure_spark_connect.sh, same
   data, same queries: first answer, warm p50/p95 (the structured queries, then the same as
   client SQL: `sql_guard` embedded, `text_guard` over Connect), RSS of worker and server;
   then Connect's own floor on the same server, same runs, from a client of its own (no
   worker, no broker): a query answered without a job, and a one-task job;
7. then `--keys N` Connect workers at once, each on its own 1M-row dataset (copies of the
   same Parquet under N names: N distinct datasets, plans and caches), started one after
   the other while the machine keeps `--min-available-gib` available; memory after each,
   and one query per key with all of them loaded.

8. with `--standby`: for each mode, a never-seen key given to a standby worker (started
   ahead of demand, docs/protocol.md: it started Spark, or opened its Connect session,
   before it had a key): first answer from the assignment, beside the worker started for
   its key in stage 3 or 6.

`--no-baselines` skips stages 2, 4 and 5 (the embedded worker is still measured in 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FILTER_COUNT = {
    "where": [
        {"column": "distance_km", "op": ">", "value": 25},
        {"column": "payment", "op": "=", "value": "card"},
    ],
    "aggregates": [{"fn": "count", "as": "n"}],
}
GROUP_BY = {
    "group_by": ["city"],
    "aggregates": [{"fn": "count", "as": "n"}, {"fn": "avg", "column": "fare", "as": "avg_fare"}],
    "order_by": ["city"],
}
QUERIES = {"filter/count": FILTER_COUNT, "group-by": GROUP_BY}
SQL = {
    "filter/count": "SELECT count(*) AS n FROM {t} WHERE distance_km > 25 AND payment = 'card'",
    "group-by": "SELECT city, count(*) AS n, avg(fare) AS avg_fare FROM {t} "
    "GROUP BY city ORDER BY city",
}
AMQP_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"p50": statistics.median(ordered), "p95": p95, "n": len(ordered)}


def timed(fn: Callable[[], Any], runs: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return stats(samples)


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


# -- 1. data --------------------------------------------------------------------------------


DATA_SCRIPT = """
import sys
from spark_workers import SparkWorkerSettings, build_session, pipeline
spark = build_session(SparkWorkerSettings(app_name="bench-data", shuffle_partitions=4))
pipeline.trips(spark, int(sys.argv[2]), 42).repartition(2).write.parquet(sys.argv[1])
spark.stop()
"""


def make_data(root: Path, rows: int) -> float:
    """Parquet written by a separate process: the in-process stage gets a fresh JVM."""
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", DATA_SCRIPT, str(root / "trips"), str(rows)],
        check=True,
        capture_output=True,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return time.perf_counter() - t0


# -- 2. in-process handler --------------------------------------------------------------------


def in_process(root: Path, runs: int, warmup: int) -> dict[str, Any]:
    from spark_workers import SparkWorkerSettings, query_worker
    from tests.spark.conftest import make_request

    app = query_worker.create_app(SparkWorkerSettings(dataset_root=str(root)))
    app.start("trips")
    assert app.data is not None
    out: dict[str, Any] = {"timings": dict(app.data.timings)}
    for name, doc in QUERIES.items():
        body = json.dumps(doc).encode()
        out[name] = timed(
            lambda body=body: app.call(query_worker.answer_query, make_request(body)),
            runs,
            warmup,
        )
    app.data.spark.stop()
    return out


# -- 3. through RabbitMQ ----------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    """RSS of a process and all its descendants (the worker's JVM is its child)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        total += int(match.group(1)) if match else 0
    return total


class Broker:
    """Queues declared here, one per key, and calls answered on direct reply-to."""

    def __init__(self) -> None:
        self.pool = f"bench-{uuid.uuid4().hex[:6]}"
        self.activity = f"{self.pool}-activity-xchg"
        self.pending: dict[str, asyncio.Future[Any]] = {}
        self.queues: list[Any] = []

    async def open(self) -> None:
        import aio_pika

        self.connection = await aio_pika.connect(AMQP_URL)
        self.channel = await self.connection.channel()
        self.exchange = await self.channel.declare_exchange(
            self.activity, aio_pika.ExchangeType.FANOUT
        )
        reply_queue = await self.channel.get_queue("amq.rabbitmq.reply-to", ensure=False)
        await reply_queue.consume(self._on_reply, no_ack=True)

    async def _on_reply(self, message: Any) -> None:
        future = self.pending.pop(message.correlation_id, None)
        if future is not None and not future.done():
            future.set_result(message)

    async def queue(self, key: str) -> str:
        name = f"{self.pool}-req-{key}"
        self.queues.append(await self.channel.declare_queue(name))
        return name

    async def call(self, queue: str, doc: dict[str, Any], timeout: float = 300) -> Any:
        import aio_pika

        cid = uuid.uuid4().hex
        future = asyncio.get_running_loop().create_future()
        self.pending[cid] = future
        await self.channel.default_exchange.publish(
            aio_pika.Message(
                json.dumps(doc).encode(), correlation_id=cid, reply_to="amq.rabbitmq.reply-to"
            ),
            routing_key=queue,
        )
        reply = await asyncio.wait_for(future, timeout)
        assert reply.headers["x-status"] == "ok", reply.body[:300]
        return reply

    def start_worker(
        self,
        key: str,
        queue: str,
        root: Path,
        log_path: Path,
        env: dict[str, str] | None = None,
        *,
        standby: bool = False,
    ) -> subprocess.Popen[bytes]:
        """The query worker for `key`; with `standby`, a standby worker not yet keyed (it
        waits on `standby_queue(WORKER_ID)` for the assignment naming `key`)."""
        from osrdyne.wire import PoolNames

        keyed = {"WORKER_KEY": key, "WORKER_REQUESTS_QUEUE": queue}
        if standby:
            keyed = {"WORKER_STANDBY_QUEUE": PoolNames(self.pool).standby_queue(f"bench-{key}")}
        worker_env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "WORKER_ID": f"bench-{key}",
            **keyed,
            "WORKER_POOL": self.pool,
            "WORKER_ACTIVITY_EXCHANGE": self.activity,
            "WORKER_AMQP_URI": AMQP_URL,
            "SPARK_WORKER_DATASET_ROOT": str(root),
            **(env or {}),
        }
        with log_path.open("wb") as worker_log:
            return subprocess.Popen(
                [sys.executable, "-m", "spark_workers.query_worker"],
                env=worker_env,
                stdout=worker_log,
                stderr=subprocess.STDOUT,
                cwd=str(REPO),
            )

    async def close(self) -> None:
        for queue in self.queues:
            await queue.delete(if_unused=False, if_empty=False)
        await self.exchange.delete()
        await self.connection.close()


def load_timings(log_path: Path) -> dict[str, float]:
    """Spark start and load (the dataset defined: ready), and the cache's build once done."""
    text = log_path.read_text(errors="replace")
    out = {}
    match = re.search(r"spark start ([\d.]+) s, load ([\d.]+) s", text)
    if match:
        out.update(spark_start_s=float(match[1]), load_s=float(match[2]))
    match = re.search(r"cached: \d+ rows in ([\d.]+) s", text)
    if match:
        out["cache_s"] = float(match[1])
    return out


async def wait_cached(log_path: Path, worker: Any, timeout: float = 900) -> None:
    """Until the worker serves from memory (it answers from the source while it caches in
    the background): warm figures are for the cached dataset."""
    deadline = time.perf_counter() + timeout
    while "cache_s" not in load_timings(log_path):
        if worker.poll() is not None or time.perf_counter() > deadline:
            raise RuntimeError(f"the worker never cached its dataset: see {log_path}")
        await asyncio.sleep(0.1)


async def through_rabbitmq(
    root: Path,
    runs: int,
    warmup: int,
    workdir: Path,
    *,
    env: dict[str, str] | None = None,
    server_pid: int | None = None,
) -> dict[str, Any]:
    broker = Broker()
    await broker.open()
    queue_name = await broker.queue("trips")

    async def call(doc: dict[str, Any], timeout: float = 300) -> Any:
        return await broker.call(queue_name, doc, timeout)

    log_path = workdir / f"query_worker-{'connect' if env else 'embedded'}.log"
    out: dict[str, Any] = {}
    started = time.perf_counter()
    worker = broker.start_worker("trips", queue_name, root, log_path, env)
    try:
        await call(FILTER_COUNT)
        out["first_answer_s"] = time.perf_counter() - started
        await wait_cached(log_path, worker)
        out.update(load_timings(log_path))
        # The structured queries, then the same as client SQL (checked by `sql_guard`
        # embedded, by `text_guard` over Spark Connect).
        sql_docs = {f"sql {n}": {"sql": SQL[n].format(t="dataset")} for n in QUERIES}
        for name, doc in {**QUERIES, **sql_docs}.items():
            for _ in range(warmup):
                await call(doc)  # answered `ok`, or `call` fails
            samples = []
            for _ in range(runs):
                t0 = time.perf_counter()
                await call(doc)
                samples.append((time.perf_counter() - t0) * 1000)
            out[name] = stats(samples)
        samples = []  # a plan never seen before: a new filter value on every request
        for i in range(runs):
            doc = json.loads(json.dumps(FILTER_COUNT))
            doc["where"][0]["value"] = 25 + (i + 1) / 1000
            t0 = time.perf_counter()
            await call(doc)
            samples.append((time.perf_counter() - t0) * 1000)
        out["fresh_plan"] = stats(samples)
        out["rss_mib"] = rss_kib(worker.pid) / 1024
        if server_pid is not None:
            out["server_rss_mib"] = rss_kib(server_pid) / 1024
    finally:
        worker.terminate()
        worker.wait(60)
        await broker.close()
    return out


async def standby_first_answer(
    root: Path, workdir: Path, *, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A never-seen key given to a standby worker: the worker starts without a key, starts
    Spark (or opens its Connect session) and waits; the clock starts when the assignment is
    published (the key's queue exists, as the controller declares it first)."""
    import aio_pika

    from osrdyne import wire

    broker = Broker()
    await broker.open()
    queue_name = await broker.queue("trips")
    log_path = workdir / f"query_worker-standby-{'connect' if env else 'embedded'}.log"
    out: dict[str, Any] = {}
    started = time.perf_counter()
    worker = broker.start_worker("trips", queue_name, root, log_path, env, standby=True)
    try:
        while "on standby" not in log_path.read_text(errors="replace"):
            if worker.poll() is not None or time.perf_counter() - started > 600:
                raise RuntimeError(f"the standby worker never waited: see {log_path}")
            await asyncio.sleep(0.05)
        out["standby_ready_s"] = time.perf_counter() - started
        names = wire.PoolNames(broker.pool)
        t0 = time.perf_counter()
        await broker.channel.default_exchange.publish(
            aio_pika.Message(
                wire.assignment(names, "trips"), content_type=wire.ASSIGNMENT_CONTENT_TYPE
            ),
            routing_key=names.standby_queue("bench-trips"),
        )
        await broker.call(queue_name, FILTER_COUNT)
        out["first_answer_s"] = time.perf_counter() - t0
        await wait_cached(log_path, worker)
        out.update(load_timings(log_path))
    finally:
        worker.terminate()
        worker.wait(60)
        await broker.close()
    return out


def standby_report(results: dict[str, Any]) -> list[str]:
    lines = []
    for mode, name, keyed in (
        ("embedded", "embedded", "rabbitmq"),
        ("connect", "Spark Connect", "connect"),
    ):
        r = results.get(f"standby_{mode}")
        if r is None:
            continue
        nan = float("nan")
        cache = (
            f"then answered from the source while the cache was built in "
            f"{r.get('cache_s', nan):.1f} s"
            if mode == "connect"
            else f"cached in {r.get('cache_s', nan):.1f} s before ready"
        )
        line = (
            f"standby worker ({name}): a never-seen key's first answer {r['first_answer_s']:.2f} s "
            f"from its assignment (load {r.get('load_s', nan):.2f} s, {cache}; Spark was "
            f"started and warmed up on standby, {r['standby_ready_s']:.1f} s after the process)"
        )
        if keyed in results:
            line += f"; started for its key: {results[keyed]['first_answer_s']:.1f} s"
        lines.append(line)
    return ["", *lines] if lines else []


# -- 6-7. Spark Connect -----------------------------------------------------------------------

CONNECT_PORT = int(os.environ.get("BENCH_CONNECT_PORT", "15120"))


def connect_server(state: Path, memory: str, *stop: str) -> int | None:
    """Start (or `--stop`) the bench's Spark Connect server; its pid once started."""
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "SPARK_CONNECT_PORT": str(CONNECT_PORT),
        "SPARK_CONNECT_DRIVER_MEMORY": memory,
        "SPARK_CONNECT_STATE_DIR": str(state),
    }
    script = REPO / "scripts" / "ensure_spark_connect.sh"
    subprocess.run([str(script), *stop], env=env, check=True, capture_output=True)
    if stop:
        return None
    return int(next(state.glob("*.pid")).read_text())


def available_gib() -> float:
    match = re.search(r"MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text())
    assert match
    return int(match[1]) / 1024 / 1024


async def connect_scale(
    root: Path, keys: int, workdir: Path, *, server_pid: int, min_available: float
) -> dict[str, Any]:
    """`keys` Connect workers at once, each on its own dataset, started one by one."""
    import shutil

    for i in range(keys):
        if not (root / f"trips{i}").exists():
            shutil.copytree(root / "trips", root / f"trips{i}")
    broker = Broker()
    await broker.open()
    env = {"SPARK_WORKER_REMOTE": f"sc://127.0.0.1:{CONNECT_PORT}"}
    workers: list[subprocess.Popen[bytes]] = []
    queues: list[str] = []
    steps: list[dict[str, Any]] = []
    out: dict[str, Any] = {"steps": steps, "before_available_gib": available_gib()}
    try:
        for i in range(keys):
            if available_gib() < min_available:
                out["stopped"] = f"available memory under {min_available} GiB"
                break
            key = f"trips{i}"
            queue = await broker.queue(key)
            started = time.perf_counter()
            workers.append(broker.start_worker(key, queue, root, workdir / f"{key}.log", env))
            queues.append(queue)
            await broker.call(queue, GROUP_BY, timeout=600)
            await wait_cached(workdir / f"{key}.log", workers[-1])
            step = {
                "keys": i + 1,
                "first_answer_s": time.perf_counter() - started,
                **load_timings(workdir / f"{key}.log"),
                "server_rss_mib": rss_kib(server_pid) / 1024,
                "workers_rss_mib": sum(rss_kib(w.pid) for w in workers) / 1024,
                "available_gib": available_gib(),
            }
            steps.append(step)
            log(
                f"  {i + 1} keys: first answer {step['first_answer_s']:.1f} s, server "
                f"{step['server_rss_mib']:.0f} MiB, workers {step['workers_rss_mib']:.0f} MiB, "
                f"available {step['available_gib']:.1f} GiB"
            )
        samples = []
        for _ in range(3):  # every key answers, all of them loaded
            for queue in queues:
                t0 = time.perf_counter()
                await broker.call(queue, GROUP_BY)
                samples.append((time.perf_counter() - t0) * 1000)
        out["all_keys_group_by"] = stats(samples)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(60)
        await broker.close()
    return out


# -- 4. naive: a new session per request -------------------------------------------------------

NAIVE_SCRIPT = """
import sys, time
t0 = time.perf_counter()
from spark_workers import SparkWorkerSettings, build_session
spark = build_session(SparkWorkerSettings(master="local[*]"))
spark.read.parquet(sys.argv[1]).createOrReplaceTempView("trips")
rows = spark.sql(sys.argv[2]).toArrow()
spark.stop()
print(time.perf_counter() - t0)
"""


def naive_process(root: Path, sql: str, runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", NAIVE_SCRIPT, str(root / "trips"), sql.format(t="trips")],
            check=True,
            capture_output=True,
            cwd=str(REPO),
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        samples.append((time.perf_counter() - t0) * 1000)
    return stats(samples)


def naive_session(root: Path, sql: str, runs: int) -> dict[str, float]:
    from spark_workers import SparkWorkerSettings, build_session

    def once() -> None:
        spark = build_session(SparkWorkerSettings())
        spark.read.parquet(str(root / "trips")).createOrReplaceTempView("trips")
        spark.sql(sql.format(t="trips")).toArrow()
        spark.stop()

    return timed(once, runs, 0)


# -- 5. DuckDB ---------------------------------------------------------------------------------


def duckdb_floor(root: Path, runs: int, warmup: int) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    source = f"read_parquet('{root / 'trips'}/*.parquet')"
    out = {}
    for name, sql in SQL.items():
        query = sql.format(t=source)
        out[name] = timed(lambda q=query: con.sql(q).to_arrow_table(), runs, warmup)
    return out


# -- report ------------------------------------------------------------------------------------


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    if "in_process" not in results:
        return modes_report(results, args)
    lines = [
        f"rows={args.rows} runs={args.runs} (after {args.warmup} warm-up) "
        f"naive-runs={args.naive_runs} cpus={os.cpu_count()}",
        "",
        "| query | worker via RabbitMQ p50 / p95 | handler in-process p50 / p95 | "
        "new process per request p50 | new session, live JVM p50 | DuckDB p50 | "
        "per-request process ÷ worker | worker ÷ DuckDB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in QUERIES:
        rmq, inproc = results["rabbitmq"][name], results["in_process"][name]
        naive_p, naive_s = results["naive_process"][name], results["naive_session"][name]
        duck = results["duckdb"][name]
        lines.append(
            f"| {name} | {rmq['p50']:.0f} / {rmq['p95']:.0f} ms | "
            f"{inproc['p50']:.0f} / {inproc['p95']:.0f} ms | {naive_p['p50']:.0f} ms | "
            f"{naive_s['p50']:.0f} ms | {duck['p50']:.1f} ms | "
            f"{naive_p['p50'] / rmq['p50']:.0f}x | {rmq['p50'] / duck['p50']:.0f}x |"
        )
    r = results["rabbitmq"]
    lines += [
        "",
        f"first answer for a new key (worker process start to first reply): "
        f"{r['first_answer_s']:.1f} s = Spark start {r.get('spark_start_s', float('nan')):.1f} s"
        f" + load {r.get('load_s', float('nan')):.1f} s + cache "
        f"{r.get('cache_s', float('nan')):.1f} s + the rest (interpreter, imports, broker, "
        f"the query)",
        f"filter/count with a new filter value on every request (no plan reuse), via "
        f"RabbitMQ: p50 {r['fresh_plan']['p50']:.0f} ms, p95 {r['fresh_plan']['p95']:.0f} ms",
        f"worker RSS (python + JVM) after the runs: {r['rss_mib']:.0f} MiB",
    ]
    if "connect" in results:
        lines += ["", modes_report(results, args)]
    return "\n".join(lines)


def modes_report(results: dict[str, Any], args: argparse.Namespace) -> str:
    """Embedded vs Spark Connect, side by side, same data and queries."""
    modes = [m for m in ("rabbitmq", "connect") if m in results]
    names = {"rabbitmq": "embedded", "connect": "Spark Connect"}
    lines = [
        f"rows={args.rows} runs={args.runs} (after {args.warmup} warm-up) cpus={os.cpu_count()}",
        "",
        "| worker through RabbitMQ | " + " | ".join(names[m] for m in modes) + " |",
        "| --- |" + " --- |" * len(modes),
    ]

    def row(label: str, cell: Callable[[dict[str, Any]], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(results[m]) for m in modes) + " |")

    nan = float("nan")
    row("first answer, new key", lambda r: f"{r['first_answer_s']:.1f} s")
    row(
        "  of which session start + load",
        lambda r: f"{r.get('spark_start_s', nan):.1f} s + {r.get('load_s', nan):.1f} s",
    )
    row(
        "cache built (embedded: before ready; Connect: in the background)",
        lambda r: f"{r.get('cache_s', nan):.1f} s",
    )
    for name in [*QUERIES, *(f"sql {n}" for n in QUERIES)]:
        row(f"{name} warm p50 / p95", lambda r, n=name: f"{r[n]['p50']:.0f} / {r[n]['p95']:.0f} ms")
    row(
        "new filter value each time p50 / p95",
        lambda r: f"{r['fresh_plan']['p50']:.0f} / {r['fresh_plan']['p95']:.0f} ms",
    )
    row("RSS of the keyed worker", lambda r: f"{r['rss_mib']:.0f} MiB")
    row(
        "RSS of the shared server",
        lambda r: f"{r['server_rss_mib']:.0f} MiB" if "server_rss_mib" in r else "none",
    )
    if "rabbitmq" in results and "connect" in results:
        e, c = results["rabbitmq"], results["connect"]
        lines += [
            "",
            f"Connect ÷ embedded: first answer {c['first_answer_s'] / e['first_answer_s']:.2f}x, "
            + ", ".join(
                f"{n} p50 {c[n]['p50'] / e[n]['p50']:.2f}x"
                for n in [*QUERIES, *(f"sql {q}" for q in QUERIES)]
            )
            + f", worker RSS {c['rss_mib'] / e['rss_mib']:.3f}x",
        ]
    floor = results.get("connect_floor")
    if floor:
        versus = ""
        if "rabbitmq" in results:
            fastest = min(results["rabbitmq"][n]["p50"] for n in QUERIES)
            versus = (
                f" = {floor['one_job']['p50'] / fastest:.2f}x embedded's fastest warm query "
                "through RabbitMQ"
            )
        lines += [
            "",
            "Spark Connect's floor, same server, a client of its own (no worker, no broker), "
            f"same runs: a query answered without a job p50 {floor['no_job']['p50']:.1f} ms, "
            f"a one-task job (`range(1)`) p50 {floor['one_job']['p50']:.1f} ms{versus}",
        ]
    scale = results.get("connect_scale")
    if scale:
        lines += [
            "",
            f"Spark Connect, keys served at once (each its own {args.rows}-row dataset, "
            f"server heap {args.server_memory}; available before: "
            f"{scale['before_available_gib']:.1f} GiB):",
            "",
            "| keys | first answer of the new key | server RSS | all workers RSS | available |",
            "| --- | --- | --- | --- | --- |",
        ]
        for step in scale["steps"]:
            lines.append(
                f"| {step['keys']} | {step['first_answer_s']:.1f} s | "
                f"{step['server_rss_mib']:.0f} MiB | {step['workers_rss_mib']:.0f} MiB | "
                f"{step['available_gib']:.1f} GiB |"
            )
        served = scale["all_keys_group_by"]
        lines.append(
            f"\nwith all {len(scale['steps'])} keys loaded, group-by on each key in turn: "
            f"p50 {served['p50']:.0f} ms, p95 {served['p95']:.0f} ms"
            + (f" (stopped: {scale['stopped']})" if "stopped" in scale else "")
        )
    return "\n".join(lines)


#: What a Spark Connect query costs before it reads any data, timed by a client of its own
#: (no worker, no broker) on the server the worker used: the floor under a warm query.
_CONNECT_FLOOR = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from bench.spark_bench import timed
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[2]).getOrCreate()
runs, warmup = int(sys.argv[3]), int(sys.argv[4])
no_job = spark.createDataFrame([(1,)], "x int")  # a local relation: answered without a job
one_job = spark.range(1)  # one job of one task
print(json.dumps({
    "no_job": timed(no_job.toArrow, runs, warmup),
    "one_job": timed(one_job.toArrow, runs, warmup),
}))
spark.stop()
"""


def connect_floor(runs: int, warmup: int) -> dict[str, Any]:
    """Trivial queries over Spark Connect, straight from a client process."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _CONNECT_FLOOR,
            str(REPO),
            f"sc://127.0.0.1:{CONNECT_PORT}",
            str(runs),
            str(warmup),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--naive-runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument(
        "--mode", default="embedded", help="embedded, connect, or both: embedded,connect"
    )
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="skip the in-process, per-request and DuckDB stages",
    )
    parser.add_argument("--keys", type=int, default=0, help="Connect keys served at once")
    parser.add_argument("--server-memory", default="8g", help="the Connect server's heap")
    parser.add_argument("--min-available-gib", type=float, default=6.0)
    parser.add_argument(
        "--standby", action="store_true", help="also a new key given to a standby worker"
    )
    args = parser.parse_args()
    modes = {m.strip() for m in args.mode.split(",")}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        root = Path(tmp) / "datasets"
        log(f"writing {args.rows} rows of Parquet under {root}")
        results["data_s"] = make_data(root, args.rows)
        if not args.no_baselines:
            log("in-process handler")
            results["in_process"] = in_process(root, args.runs, args.warmup)
        if "embedded" in modes:
            log("real worker through RabbitMQ (embedded Spark)")
            results["rabbitmq"] = asyncio.run(
                through_rabbitmq(root, args.runs, args.warmup, Path(tmp))
            )
            if args.standby:
                log("a new key given to a standby worker (embedded Spark)")
                results["standby_embedded"] = asyncio.run(standby_first_answer(root, Path(tmp)))
        if "connect" in modes:
            state = Path(tmp) / "connect"
            log(f"starting a Spark Connect server (heap {args.server_memory})")
            server_pid = connect_server(state, args.server_memory)
            assert server_pid is not None
            try:
                log("real worker through RabbitMQ (Spark Connect)")
                remote = {"SPARK_WORKER_REMOTE": f"sc://127.0.0.1:{CONNECT_PORT}"}
                results["connect"] = asyncio.run(
                    through_rabbitmq(
                        root, args.runs, args.warmup, Path(tmp), env=remote, server_pid=server_pid
                    )
                )
                log("the floor: trivial queries over Spark Connect, no worker")
                results["connect_floor"] = connect_floor(args.runs, args.warmup)
                if args.standby:
                    log("a new key given to a standby worker (Spark Connect)")
                    results["standby_connect"] = asyncio.run(
                        standby_first_answer(root, Path(tmp), env=remote)
                    )
                if args.keys:
                    log(f"{args.keys} Spark Connect keys at once")
                    results["connect_scale"] = asyncio.run(
                        connect_scale(
                            root,
                            args.keys,
                            Path(tmp),
                            server_pid=server_pid,
                            min_available=args.min_available_gib,
                        )
                    )
            finally:
                connect_server(state, args.server_memory, "--stop")
        if args.no_baselines:
            if args.json:
                args.json.write_text(json.dumps(results, indent=2))
            print()
            print("\n".join([report(results, args), *standby_report(results)]))
            return
        log("naive: new process per request")
        results["naive_process"] = {
            n: naive_process(root, SQL[n], args.naive_runs) for n in QUERIES
        }
        log("naive: new session per request in a live process")
        results["naive_session"] = {
            n: naive_session(root, SQL[n], args.naive_runs) for n in QUERIES
        }
        log("DuckDB")
        results["duckdb"] = duckdb_floor(root, args.runs, args.warmup)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print()
    print("\n".join([report(results, args), *standby_report(results)]))


if __name__ == "__main__":
    main()
