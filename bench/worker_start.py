"""How long a worker process takes to start, beside an earlier version's, in one run.

A worker started for a never-seen key (no standby) costs a new key most of its first answer:
`bench/dispatch_bench.py` shows it as phase (b). This bench isolates it. It spawns the SDK's
echo worker with the protocol's environment, against the shared broker, and times it from
spawn to the `ready` activity report. The report is heard on the activity exchange, as the
controller hears it, so any version that speaks the protocol is measured the same way. It
also times the bare import of the worker module in a process of its own.

With `--baseline REF`, REF's echo worker (its own code, from `git archive REF`) is measured
in the same rounds, interleaved with ours, and the ratio ours / REF is printed per round.
Any figure that could not be measured fails the run: no `nan`.

    PYTHONPATH=. .venv/bin/python bench/worker_start.py --rounds 15 --baseline 38bd5b1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aio_pika

from osrdyne import wire

REPO = Path(__file__).resolve().parent.parent
AMQP_URL = os.environ.get("OSRDYNE_BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
#: Seconds one worker may take to be ready before the run fails.
READY_TIMEOUT = 30.0


def checkout(ref: str, into: Path) -> Path:
    """REF's tree, as `git archive` gives it."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


class Bench:
    def __init__(self, channel: aio_pika.abc.AbstractChannel, names: wire.PoolNames) -> None:
        self.channel = channel
        self.names = names
        self.ready: dict[str, asyncio.Future[float]] = {}

    async def setup(self) -> None:
        """The pool's activity exchange (heard here) and the key's request queue."""
        exchange = await self.channel.declare_exchange(
            self.names.activity_exchange, aio_pika.ExchangeType.FANOUT, auto_delete=True
        )
        self.queue = await self.channel.declare_queue(
            self.names.request_queue("k"), durable=True, arguments={"x-queue-type": "quorum"}
        )
        reports = await self.channel.declare_queue(exclusive=True)
        await reports.bind(exchange)
        await reports.consume(self._report, no_ack=True)

    async def _report(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        headers = message.headers or {}
        worker_id = wire.text(headers.get(wire.Header.WORKER_ID))
        event = wire.text(headers.get(wire.Header.EVENT))
        future = self.ready.get(worker_id or "")
        if event == wire.Event.READY and future is not None and not future.done():
            future.set_result(time.perf_counter())

    def environment(self, root: Path, worker_id: str) -> dict[str, str]:
        env = wire.worker_environment(
            names=self.names, key="k", worker_id=worker_id, amqp_uri=AMQP_URL
        )
        return {**os.environ, **env, "PYTHONPATH": str(root)}

    async def start(self, root: Path) -> float:
        """Seconds from spawning `root`'s echo worker to its `ready` report."""
        worker_id = uuid.uuid4().hex[:12]
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.ready[worker_id] = future
        began = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "worker_sdk.examples.echo",
            env=self.environment(root, worker_id),
            cwd=root,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            return await asyncio.wait_for(future, READY_TIMEOUT) - began
        finally:
            process.terminate()
            await process.wait()
            self.ready.pop(worker_id, None)

    def import_time(self, root: Path) -> float:
        """Seconds of a process that imports `root`'s echo worker module and exits."""
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import worker_sdk.examples.echo"],
            env=self.environment(root, "import"),
            cwd=root,
            check=True,
        )
        return time.perf_counter() - began


def row(name: str, values: list[float]) -> str:
    ms = sorted(1000 * v for v in values)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"| {name} | {statistics.median(ms):.1f} | {p95:.1f} | {ms[-1]:.1f} |"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--baseline", help="an earlier commit, measured in the same rounds")
    args = parser.parse_args()
    trees = {"ours": REPO}
    with tempfile.TemporaryDirectory(prefix="worker-start-") as tmp:
        if args.baseline:
            trees[args.baseline] = checkout(args.baseline, Path(tmp))
        connection = await aio_pika.connect(AMQP_URL)
        try:
            bench = Bench(
                await connection.channel(), wire.PoolNames(f"wstart-{uuid.uuid4().hex[:6]}")
            )
            await bench.setup()
            try:
                for root in trees.values():  # a first start of each, not measured (caches)
                    await bench.start(root)
                ready: dict[str, list[float]] = {name: [] for name in trees}
                imports: dict[str, list[float]] = {name: [] for name in trees}
                for _ in range(args.rounds):
                    for name, root in trees.items():
                        ready[name].append(await bench.start(root))
                        imports[name].append(await asyncio.to_thread(bench.import_time, root))
            finally:  # the quorum queue stays on the shared broker otherwise
                await bench.queue.delete(if_unused=False, if_empty=False)
        finally:
            await connection.close()
    print(f"echo worker, {args.rounds} rounds, interleaved")
    print("| what | p50 ms | p95 ms | max ms |")
    print("| --- | --- | --- | --- |")
    for name in trees:
        print(row(f"{name}: spawn -> `ready` report", ready[name]))
        print(row(f"{name}: a process that imports the worker module and exits", imports[name]))
    if args.baseline:
        ratios = [a / b for a, b in zip(ready["ours"], ready[args.baseline], strict=True)]
        print(
            f"spawn -> ready, ours / {args.baseline} per round: "
            f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        )


if __name__ == "__main__":
    asyncio.run(main())
