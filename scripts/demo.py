"""The osrdyne demo: keyed PySpark workers answering real queries through osrdyne.

1. The Spark pipeline makes a dataset: `generate` raw trips as CSV, `ingest` them into
   partitioned Parquet under a dataset root.
2. A controller runs pool `demo` with the subprocess driver; its workers are
   `python -m spark_workers.query_worker`, keyed by dataset.
3. Queries go out for keys nobody serves yet: osrdyne creates each key's queue, starts a
   worker group that loads its dataset once into a long-lived Spark session, and later
   queries take the fast path to the warm worker.

Run through `scripts/demo.sh` (which installs what is needed and starts the broker).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from osrdyne import Client
from osrdyne.controller import Controller, Settings
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.ops import ApiServer, make_app
from spark_workers import demo_queries

POOL = "demo"
SPARK_ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}


def make_dataset(workdir: Path, rows: int) -> Path:
    raw, root = workdir / "raw" / "trips", workdir / "datasets"
    pipeline = [sys.executable, "-m", "spark_workers.pipeline"]
    print(f"== the Spark pipeline: {rows} sample trips -> partitioned Parquet under {root}")
    with (workdir / "pipeline-spark.log").open("w") as jvm_chatter:
        for step in (
            ["generate", str(raw), "--rows", str(rows)],
            ["ingest", str(raw), str(root), "--name", "trips", "--partition-by", "city"],
        ):
            command = [*pipeline, *step, "--master", "local[2]"]
            subprocess.run(command, check=True, stderr=jvm_chatter, env=SPARK_ENV)
    return root


async def remove_pool(settings: Settings) -> None:
    """Delete what earlier demo runs left of the pool (request queues outlive controllers)."""
    api = ManagementApi(
        settings.amqp.management_url,
        vhost=settings.amqp.vhost,
        credentials=settings.amqp.credentials,
    )
    try:
        for queue in await api.queues(name_regex=f"^{POOL}-req-", columns="name"):
            await api.delete_queue(queue["name"])
    finally:
        await api.close()


def broker() -> dict[str, Any]:
    """The broker `scripts/ensure_broker.sh` printed, when its lines are in the environment
    (`RABBITMQ_URL`, `RABBITMQ_MANAGEMENT_URL`: e.g. RabbitMQ 4.0 with `--version 4`), as the
    tests take them; else the settings' own (OSRDYNE_AMQP__*, default the local 3.10)."""
    found: dict[str, Any] = {}
    if url := os.environ.get("RABBITMQ_URL"):
        found["url"] = url
    if management := os.environ.get("RABBITMQ_MANAGEMENT_URL"):
        found["management_url"] = management
    return {"amqp": found} if found else {}


def settings(root: Path) -> Settings:
    return Settings(
        pool=POOL,
        **broker(),
        groups={"unbind_delay": 60, "stop_delay": 30, "loop_interval": 2},
        api={"port": 0},
        driver={
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "spark_workers.query_worker"],
                "env": {
                    "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_WORKER_DATASET_ROOT": str(root),
                    "SPARK_WORKER_MASTER": "local[2]",
                    "SPARK_WORKER_DRIVER_MEMORY": "1g",
                },
            },
        },
    )


async def ask(
    client: Client, key: str, query: Any, *, path: str | None = None, label: str = ""
) -> None:
    began = time.perf_counter()
    response = await client.call(POOL, key, query, path=path, timeout=180)
    took = (time.perf_counter() - began) * 1000
    print(f"\n-- {label or path or 'query'} on key {key!r}: [{response.status}] in {took:.0f} ms")
    try:
        body = json.dumps(response.json(), indent=None)
    except ValueError:
        body = f"<{len(response.body)} bytes of {response.headers.get('content_type', 'data')}>"
    print("   " + (body if len(body) < 600 else body[:600] + " ..."))


async def run(root: Path, keep_running: bool) -> None:
    controller = Controller(settings(root))
    await remove_pool(controller.settings)
    server = ApiServer(make_app(controller), host="127.0.0.1", port=0)
    await server.start()
    running = asyncio.create_task(controller.run())
    await controller.wait_leader()
    print(f"\n== controller of pool {POOL!r} leads; status: http://127.0.0.1:{server.port}/status")
    try:
        async with Client(controller.settings.amqp.url, name="osrdyne demo") as client:
            queries = demo_queries()
            first, *rest = queries.items()
            print("\n== cold key 'trips': osrdyne starts a worker group that loads the dataset")
            await ask(client, "trips", first[1], label=first[0])
            print("\n== the same key again: fast path to the warm Spark session")
            for name, query in rest:
                await ask(client, "trips", query, label=name)
            await ask(client, "trips", first[1], label=first[0] + " (again)")
            await ask(client, "trips", None, path="schema")
            print("\n== another key, another group: one partition of the dataset")
            await ask(client, "trips/city=Lyon", {"sql": "SELECT count(*) AS n FROM dataset"})
            print("\n== every failure is an answer")
            await ask(client, "trips", {"sql": "DROP VIEW dataset"}, label="refused DDL")
            await ask(client, "nope", {"sql": "SELECT 1"}, label="unknown dataset")
            print("\n" + status_table(controller))
            if keep_running:
                print(
                    "\nrunning until Ctrl-C; try: osrdyne call demo trips "
                    '-d \'{"sql": "SELECT city, count(*) FROM dataset GROUP BY city"}\''
                )
                await asyncio.Event().wait()
    finally:
        controller.stop()
        await running
        await server.stop()
        await remove_pool(controller.settings)
        print("\n== controller stopped; its worker groups were stopped with it")


def status_table(controller: Controller) -> str:
    doc = controller.status()
    lines = [f"== pool {doc.pool}: {doc.role.value}, generations {doc.generations}"]
    for key, group in doc.groups.items():
        queue = group.queue.value if group.queue else None
        lines.append(
            f"   {key!r:>20}: {group.state.value:<8} queue={queue} running={group.running}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="sample trips to generate")
    parser.add_argument("--keep-running", action="store_true", help="serve until Ctrl-C")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="osrdyne-demo-"))
    root = make_dataset(workdir, args.rows)
    asyncio.run(run(root, args.keep_running))


if __name__ == "__main__":
    main()
