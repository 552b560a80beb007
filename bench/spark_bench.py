"""Spark query worker benchmark: warm latency on a cached 1M-row dataset, against a new
SparkSession per request and DuckDB on the same Parquet; first answer; worker memory.

    .venv/bin/python bench/spark_bench.py [--rows 1000000] [--runs 60] [--naive-runs 3]

Stages (run one after the other: this machine has two cores):

1. data: `pipeline.trips` rows written as Parquet under a temporary dataset root;
2. in-process: the query worker's handler (`SparkWorker.call`, what a request costs once
   the message is in) on the cached dataset;
3. through RabbitMQ: a real `python -m spark_workers.query_worker` process consuming a queue
   declared here; the client publishes and waits on direct reply-to; first answer split into
   Spark start and load (from the worker's log), worker RSS (python + its JVM) from /proc;
4. naive: a new process building a SparkSession, reading the Parquet and answering, per
   request; and a new session in a live process (JVM kept: the cheapest "naive" variant);
5. DuckDB in-process on the same Parquet files: the floor.
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


async def through_rabbitmq(root: Path, runs: int, warmup: int, workdir: Path) -> dict[str, Any]:
    import aio_pika

    pool = f"bench-{uuid.uuid4().hex[:6]}"
    queue_name, activity = f"{pool}-req-trips", f"{pool}-activity-xchg"
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    exchange = await channel.declare_exchange(activity, aio_pika.ExchangeType.FANOUT)
    queue = await channel.declare_queue(queue_name)
    pending: dict[str, asyncio.Future[Any]] = {}

    async def on_reply(message: Any) -> None:
        future = pending.pop(message.correlation_id, None)
        if future is not None and not future.done():
            future.set_result(message)

    reply_queue = await channel.get_queue("amq.rabbitmq.reply-to", ensure=False)
    await reply_queue.consume(on_reply, no_ack=True)

    async def call(doc: dict[str, Any], timeout: float = 300) -> Any:
        cid = uuid.uuid4().hex
        future = asyncio.get_running_loop().create_future()
        pending[cid] = future
        await channel.default_exchange.publish(
            aio_pika.Message(
                json.dumps(doc).encode(), correlation_id=cid, reply_to="amq.rabbitmq.reply-to"
            ),
            routing_key=queue_name,
        )
        reply = await asyncio.wait_for(future, timeout)
        assert reply.headers["x-status"] == "ok", reply.body[:300]
        return reply

    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORKER_ID": "bench",
        "WORKER_KEY": "trips",
        "WORKER_POOL": pool,
        "WORKER_REQUESTS_QUEUE": queue_name,
        "WORKER_ACTIVITY_EXCHANGE": activity,
        "WORKER_AMQP_URI": AMQP_URL,
        "SPARK_WORKER_DATASET_ROOT": str(root),
    }
    log_path = workdir / "query_worker.log"
    out: dict[str, Any] = {}
    with log_path.open("wb") as worker_log:
        started = time.perf_counter()
        worker = subprocess.Popen(
            [sys.executable, "-m", "spark_workers.query_worker"],
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
        )
    try:
        await call(FILTER_COUNT)
        out["first_answer_s"] = time.perf_counter() - started
        match = re.search(r"spark start ([\d.]+) s, load ([\d.]+) s", log_path.read_text())
        if match:
            out["spark_start_s"], out["load_s"] = float(match[1]), float(match[2])
        for name, doc in QUERIES.items():
            for _ in range(warmup):
                await call(doc)
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
    finally:
        worker.terminate()
        worker.wait(60)
        await queue.delete(if_unused=False, if_empty=False)
        await exchange.delete()
        await connection.close()
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
        f" + load and cache {r.get('load_s', float('nan')):.1f} s + the rest (interpreter, "
        f"imports, broker)",
        f"filter/count with a new filter value on every request (no plan reuse), via "
        f"RabbitMQ: p50 {r['fresh_plan']['p50']:.0f} ms, p95 {r['fresh_plan']['p95']:.0f} ms",
        f"worker RSS (python + JVM) after the runs: {r['rss_mib']:.0f} MiB",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--naive-runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        root = Path(tmp) / "datasets"
        log(f"writing {args.rows} rows of Parquet under {root}")
        results["data_s"] = make_data(root, args.rows)
        log("in-process handler")
        results["in_process"] = in_process(root, args.runs, args.warmup)
        log("real worker through RabbitMQ")
        results["rabbitmq"] = asyncio.run(through_rabbitmq(root, args.runs, args.warmup, Path(tmp)))
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
    print(report(results, args))


if __name__ == "__main__":
    main()
