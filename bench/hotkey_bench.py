"""Hot-key benchmark: a static group of one worker, a static group of `max_workers`, and a group
sized by the group scaler, side by side in one run, under the same step of load on one key.

Each system is an in-process `Controller` with the subprocess driver running
`worker_sdk.examples.echo` with a 50 ms handler (`ECHO_DELAY=0.05`) and concurrency 1, in a pool
of its own on the shared broker. The load is open-loop (calls sent on a schedule, whatever the
answers do): `--base` calls/s for `--before` seconds, then `--peak` calls/s for `--hot` seconds,
then `--base` again until the scaled group is back at its minimum (or `--after` seconds for the
static ones). Measured, per system:

- one worker's rate: the static single worker's throughput while saturated (calls/s; it takes
  the step for `--floor-hot` seconds only, then drains its backlog: a minute, not three);
- throughput in the hot phase (calls answered per second, sliding 1 s windows), and for the
  scaled group the seconds from the step until it first reaches 0.9 x max_workers x one
  worker's rate (the target: within 5 s; KEDA's default polling alone is 30 s);
- latency p50/p99 of the calls sent in the second half of the hot phase (the steady state),
  and its ratio to the static `max_workers` group (target: within 2x);
- the scaled group's seconds from the end of the hot phase (its backlog drained) back to its
  minimum, beside the configured `scale_in_window`;
- every call answered once, `ok`, with its own body (late replies counted by the client).

The scaled group runs twice: workers started as it grows, and (`scaled_standby`) with
`--standby` standby workers waiting, which a growing group takes before it starts processes.

Then a skewed load (`--zipf-*`): 100 keys, each a group of one worker started before the
clock, and calls drawn by Zipf's law, the first key taking half of them (80 calls/s in all:
the hot key needs about two workers, the rest one or less each). Systems: one worker per key
(`zipf_static_1`) and the same with the scaler (`zipf_scaled`), the draws the same for both.
Measured: the share of the hot key's calls answered as fast as they came (second half of the
load; target >= 0.95 for the scaled pool), its latency p50/p99, the other keys' p99, the hot
key's most workers.

Ratios are between runs of the same invocation. A figure that could not be measured (nan) fails
the run (exit 1), as does a target missed. Celery's `--autoscale` is not a peer here: it
sizes one worker's process pool, not a group per key (docs/benchmarks.md).

    PYTHONPATH=. .venv/bin/python bench/hotkey_bench.py                # ~7 minutes
    PYTHONPATH=. .venv/bin/python bench/hotkey_bench.py --skip-zipf    # the step, ~3 minutes
    PYTHONPATH=. .venv/bin/python bench/hotkey_bench.py --max-workers 4 --peak 100 --hot 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

AMQP_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
KEY = "hot"

TARGETS = {
    "reach_s": 5.0,  # <=: seconds from the step to 0.9 x max_workers x one worker's rate
    "p99_vs_static_max": 2.0,  # <=
    # >=: the hot key's calls answered over those sent, second half of the Zipf load
    "zipf_kept_up": 0.95,
}

log = logging.getLogger("hotkey_bench")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


@dataclasses.dataclass
class Call:
    n: int
    sent: float
    answered: float = float("nan")
    ok: bool = False


@dataclasses.dataclass
class Run:
    name: str
    calls: list[Call]
    step_at: float
    hot_end: float
    sizes: list[tuple[float, int]]
    back_to_min_s: float = float("nan")
    #: Seconds from the end of the hot phase until its backlog was drained.
    drain_s: float = float("nan")
    late_replies: int = 0

    def answered(self) -> list[Call]:
        return [c for c in self.calls if not math.isnan(c.answered)]

    def throughput_windows(self, start: float, end: float) -> list[tuple[float, float]]:
        """(window end, calls answered in the 1 s before it), every 0.25 s over [start, end]."""
        times = sorted(c.answered for c in self.answered())
        out = []
        t = start + 1.0
        while t <= end:
            count = sum(1 for a in times if t - 1.0 <= a < t)
            out.append((t, float(count)))
            t += 0.25
        return out

    def saturated_rate(self) -> float:
        """Calls answered per second from 1 s after the step until the backlog drained."""
        times = [c.answered for c in self.answered() if c.answered >= self.step_at + 1.0]
        last = max((c.answered for c in self.answered() if c.sent < self.hot_end), default=0)
        n = sum(1 for t in times if t <= last)
        return n / (last - self.step_at - 1.0) if last > self.step_at + 1.0 else float("nan")

    def hot_throughput(self) -> float:
        """Calls answered per second over the second half of the hot phase."""
        mid = (self.step_at + self.hot_end) / 2
        n = sum(1 for c in self.answered() if mid <= c.answered < self.hot_end)
        return n / (self.hot_end - mid)

    def steady_latencies(self) -> list[float]:
        mid = (self.step_at + self.hot_end) / 2
        return [c.answered - c.sent for c in self.answered() if mid <= c.sent < self.hot_end]


async def timed_call(client: Any, pool: str, key: str, c: Call) -> None:
    """Call `key` with `c`'s number as the body; note when it was answered and whether `ok`
    with that body (a failure is logged and leaves `c` unanswered)."""
    try:
        response = await client.call(pool, key, str(c.n).encode(), timeout=300)
    except Exception as exc:  # noqa: BLE001
        log.warning("call %d failed: %r", c.n, exc)
        return
    c.answered = time.monotonic()
    c.ok = response.ok and response.body == str(c.n).encode()


def settings(
    pool: str,
    state: str,
    *,
    workers: int,
    scaling: dict[str, Any] | None,
    standby: int = 0,
    max_processes: int = 64,
) -> Any:
    from osrdyne.controller import Settings

    return Settings(
        pool=pool,
        amqp={"url": AMQP_URL, "management_url": MANAGEMENT_URL},
        groups={"unbind_delay": 3600, "stop_delay": 3600},
        scaling=scaling or {},
        api={"enabled": False},
        driver={
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
                "env": {
                    "WORKER_CONCURRENCY": "1",
                    "ECHO_DELAY": "0.05",
                    "WORKER_ACTIVITY_INTERVAL": "1",
                    "WORKER_DRAIN_TIMEOUT": "10",
                    "WORKER_LOG_LEVEL": "WARNING",  # 100 workers' start lines hide the report
                    "PYTHONPATH": str(REPO),
                },
                "owner": state,
                "workers": workers,
                "stop_timeout": 15,
                "cwd": str(REPO),
                "max_processes": max_processes,
                "standby": standby,
            },
        },
    )


async def one_run(
    name: str,
    args: argparse.Namespace,
    tmp: Path,
    *,
    workers: int,
    scaled: bool,
    hot: float | None = None,
    standby: int = 0,
) -> Run:
    from osrdyne import Client
    from osrdyne.controller import Controller

    pool = f"hotkey-{name}-{uuid.uuid4().hex[:6]}"
    scaling = scaling_settings(args) if scaled else None
    controller = Controller(
        settings(pool, str(tmp / pool), workers=workers, scaling=scaling, standby=standby)
    )
    task = asyncio.create_task(controller.run(), name=f"controller {pool}")
    calls: list[Call] = []
    sizes: list[tuple[float, int]] = []
    try:
        await asyncio.wait_for(controller.wait_leader(), 60)
        async with Client(AMQP_URL, name=f"hotkey bench {name}") as client:
            first = await client.call(pool, KEY, b"warm", timeout=60)
            assert first.ok, first
            # Every worker of a static group (and every standby worker) serving before the
            # clock starts.
            driver: Any = controller.driver
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                described = driver.describe().get(KEY, ())
                waiting = driver.standby_workers()
                if (
                    len(described) == workers
                    and all(w.pid for w in described)
                    and len(waiting) == standby
                    and all(w.pid for w in waiting)
                ):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # their imports and connections (a worker takes ~1 s)

            def call(c: Call) -> Awaitable[None]:
                return timed_call(client, pool, KEY, c)

            tasks: list[asyncio.Task[None]] = []
            start = time.monotonic()
            hot = args.hot if hot is None else hot
            phases = [(args.base, args.before), (args.peak, hot)]
            step_at = start + args.before
            hot_end = step_at + hot
            after_end = hot_end + (args.after if not scaled else args.window + 60)

            async def watch_sizes() -> None:
                while True:
                    sizes.append((time.monotonic(), driver.sizes().get(KEY, 0)))
                    await asyncio.sleep(0.1)

            watcher = asyncio.create_task(watch_sizes(), name="sizes")
            log.warning("%s: load starts; the step at +%.0f s", name, args.before)
            n = 0
            t = start
            for rate, seconds in phases:
                end = t + seconds
                while t < end:
                    await asyncio.sleep(max(0.0, t - time.monotonic()))
                    c = Call(n=n, sent=time.monotonic())
                    calls.append(c)
                    tasks.append(asyncio.create_task(call(c)))
                    n += 1
                    t += 1.0 / rate
            # The base load again, until the scaled group is back to its minimum.
            back_at = float("nan")
            while t < after_end:
                await asyncio.sleep(max(0.0, t - time.monotonic()))
                c = Call(n=n, sent=time.monotonic())
                calls.append(c)
                tasks.append(asyncio.create_task(call(c)))
                n += 1
                t += 1.0 / args.base
                if (
                    scaled
                    and driver.sizes().get(KEY) == 1
                    and all(not math.isnan(x.answered) for x in calls if x.sent < hot_end)
                ):
                    back_at = time.monotonic()
                    break
            await asyncio.wait_for(asyncio.gather(*tasks), 400)
            watcher.cancel()
            await asyncio.sleep(1.0)  # a duplicate answer would come late
            run = Run(name, calls, step_at, hot_end, sizes, late_replies=client.late_replies)
            if scaled:
                drained = max(c.answered for c in calls if c.sent < hot_end)
                run.back_to_min_s = back_at - drained
                run.drain_s = drained - hot_end
            return run
    finally:
        controller.stop()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(task, 60)
        await asyncio.to_thread(delete_pool, pool)


def scaling_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_workers": args.max_workers,
        "min_workers": 1,
        "scale_in_window": args.window,
        "interval": 1.0,
    }


def zipf_weights(keys: int, top_share: float) -> list[float]:
    """Zipf weights over `keys` keys (rank r weighs 1 / r**s), the exponent s chosen so the
    first key takes `top_share` of the calls."""

    def first(s: float) -> float:
        return 1.0 / sum(float(r) ** -s for r in range(1, keys + 1))

    low, high = 0.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if first(mid) < top_share else (low, mid)
    exponent = (low + high) / 2
    total = sum(r**-exponent for r in range(1, keys + 1))
    return [r**-exponent / total for r in range(1, keys + 1)]


@dataclasses.dataclass
class ZipfRun:
    name: str
    #: (key rank, call) of every call.
    calls: list[tuple[int, Call]]
    start: float
    end: float
    most_hot_workers: int
    late_replies: int

    def of(self, hot: bool) -> list[Call]:
        return [c for rank, c in self.calls if (rank == 0) == hot]

    def steady(self, hot: bool) -> list[float]:
        """Latencies of the calls sent in the second half of the load."""
        mid = (self.start + self.end) / 2
        return [c.answered - c.sent for c in self.of(hot) if c.sent >= mid and c.ok]

    def hot_keeps_up(self) -> float:
        """The hot key's calls answered over those sent, second half of the load (answers
        counted until the load ends: a backlog makes it fall below 1)."""
        mid = (self.start + self.end) / 2
        sent = sum(1 for c in self.of(True) if mid <= c.sent < self.end)
        answered = sum(1 for c in self.of(True) if mid <= c.answered < self.end)
        return answered / sent if sent else float("nan")


async def zipf_run(name: str, args: argparse.Namespace, tmp: Path, *, scaled: bool) -> ZipfRun:
    """`--zipf-keys` keys, each a group of one worker started before the clock; then
    `--zipf-rate` calls/s for `--zipf-seconds`, each to a key drawn by Zipf's law (the first
    key takes `--zipf-top` of them), the draws the same for every system (one seed)."""
    import random

    from osrdyne import Client
    from osrdyne.controller import Controller

    pool = f"hotkey-{name}-{uuid.uuid4().hex[:6]}"
    keys = [f"zipf-{rank}" for rank in range(args.zipf_keys)]
    controller = Controller(
        settings(
            pool,
            str(tmp / pool),
            workers=1,
            scaling=scaling_settings(args) if scaled else None,
            max_processes=args.zipf_keys + 4 * args.max_workers,
        )
    )
    task = asyncio.create_task(controller.run(), name=f"controller {pool}")
    calls: list[tuple[int, Call]] = []
    most = 0
    try:
        await asyncio.wait_for(controller.wait_leader(), 60)
        async with Client(AMQP_URL, name=f"hotkey bench {name}") as client:
            log.warning("%s: starting %d groups", name, len(keys))
            warm = await asyncio.gather(
                *(client.call(pool, key, b"warm", timeout=600) for key in keys)
            )
            assert all(w.ok for w in warm), [w for w in warm if not w.ok][:3]
            await asyncio.sleep(2.0)
            driver: Any = controller.driver
            draw = random.Random(7)
            weights = zipf_weights(len(keys), args.zipf_top)

            tasks: list[asyncio.Task[None]] = []
            start = time.monotonic()
            end = start + args.zipf_seconds
            log.warning("%s: Zipf load for %.0f s", name, args.zipf_seconds)
            t, n = start, 0
            while t < end:
                await asyncio.sleep(max(0.0, t - time.monotonic()))
                rank = draw.choices(range(len(keys)), weights)[0]
                c = Call(n=n, sent=time.monotonic())
                calls.append((rank, c))
                tasks.append(asyncio.create_task(timed_call(client, pool, keys[rank], c)))
                most = max(most, driver.sizes().get(keys[0], 0))
                n += 1
                t += 1.0 / args.zipf_rate
            await asyncio.wait_for(asyncio.gather(*tasks), 600)
            await asyncio.sleep(1.0)  # a duplicate answer would come late
            return ZipfRun(name, calls, start, end, most, client.late_replies)
    finally:
        controller.stop()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(task, 120)
        await asyncio.to_thread(delete_pool, pool)


def delete_pool(pool: str) -> None:
    import httpx

    vhost = urllib.parse.quote(urllib.parse.urlsplit(AMQP_URL).path[1:] or "/", safe="")
    with httpx.Client(base_url=MANAGEMENT_URL + "/api", auth=("guest", "guest"), timeout=60) as h:
        for kind in ("queues", "exchanges"):
            listed = h.get(
                f"/{kind}/{vhost}",
                params={
                    "name": "^" + re.escape(pool + "-"),
                    "use_regex": "true",
                    "page": 1,
                    "page_size": 500,
                    "columns": "name",
                },
            ).json()
            for item in listed.get("items", []):
                h.delete(f"/{kind}/{vhost}/{urllib.parse.quote(item['name'], safe='')}")
        for policy in (f"osrdyne-{pool}-requests", f"osrdyne-{pool}-poison"):
            h.delete(f"/policies/{vhost}/{policy}")


def reach_seconds(run: Run, goal: float) -> float:
    for t, count in run.throughput_windows(run.step_at, run.hot_end):
        if count >= goal:
            return t - run.step_at
    return float("nan")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-workers", type=int, default=8)
    parser.add_argument("--base", type=float, default=5.0, help="calls/s before and after")
    parser.add_argument("--peak", type=float, default=200.0, help="calls/s in the hot phase")
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument("--hot", type=float, default=15.0)
    parser.add_argument("--after", type=float, default=3.0)
    parser.add_argument(
        "--floor-hot", type=float, default=3.0, help="seconds of the step for static_1"
    )
    parser.add_argument("--window", type=float, default=10.0, help="scaling.scale_in_window")
    parser.add_argument(
        "--standby",
        type=int,
        default=None,
        help="standby workers of the `scaled_standby` system (default max_workers - 1; 0: "
        "no such system)",
    )
    parser.add_argument("--zipf-keys", type=int, default=100)
    parser.add_argument("--zipf-rate", type=float, default=80.0, help="calls/s over all keys")
    parser.add_argument("--zipf-top", type=float, default=0.5, help="the first key's share")
    parser.add_argument("--zipf-seconds", type=float, default=30.0)
    parser.add_argument("--skip-step", action="store_true", help="the Zipf load only")
    parser.add_argument("--skip-zipf", action="store_true", help="the step only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.standby is None:
        args.standby = args.max_workers - 1
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    # The group scaler's decisions, logged.
    logging.getLogger("osrdyne.controller._effects.group_scaler").setLevel(logging.INFO)

    tmp = Path(tempfile.mkdtemp(prefix="hotkey-bench-"))
    results: dict[str, dict[str, float]] = {}
    failures: list[str] = []
    try:
        if not args.skip_step:
            failures += await step_load(args, tmp, results)
        if not args.skip_zipf:
            failures += await zipf_load(args, tmp, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    unmeasured = [f"{n}.{k}" for n, r in results.items() for k, v in r.items() if math.isnan(v)]
    if unmeasured:
        failures.append(f"not measured (nan): {', '.join(unmeasured)}")
    for failure in failures:
        print("FAIL", failure)
    if not failures:
        print("all targets met")
    return 1 if failures else 0


async def step_load(
    args: argparse.Namespace, tmp: Path, results: dict[str, dict[str, float]]
) -> list[str]:
    """The step on one key: the static floors, the scaled group (with and without standby
    workers); the figures into `results`, the targets missed returned."""
    runs = {
        "static_1": await one_run(
            "static1", args, tmp, workers=1, scaled=False, hot=args.floor_hot
        ),
        "static_max": await one_run("staticmax", args, tmp, workers=args.max_workers, scaled=False),
        "scaled": await one_run("scaled", args, tmp, workers=1, scaled=True),
    }
    if args.standby:
        runs["scaled_standby"] = await one_run(
            "scaledstandby", args, tmp, workers=1, scaled=True, standby=args.standby
        )
    one_worker = runs["static_1"].saturated_rate()
    goal = 0.9 * args.max_workers * one_worker
    max_p99 = pct(runs["static_max"].steady_latencies(), 99)
    for name, run in runs.items():
        lat = run.steady_latencies()
        answered = run.answered()
        results[name] = {
            "calls": float(len(run.calls)),
            "answered_ok": float(sum(1 for c in answered if c.ok)),
            "late_replies": float(run.late_replies),
            "hot_throughput": run.hot_throughput() if name != "static_1" else one_worker,
            "p50_ms": 1000 * pct(lat, 50),
            "p99_ms": 1000 * pct(lat, 99),
            "p99_vs_static_max": pct(lat, 99) / max_p99 if max_p99 > 0 else float("nan"),
        }
    scaled_names = [n for n in ("scaled", "scaled_standby") if n in runs]
    for name in scaled_names:
        run = runs[name]
        results[name]["reach_s"] = reach_seconds(run, goal)
        results[name]["max_workers_seen"] = float(max((n for _, n in run.sizes), default=0))
        results[name]["back_to_min_s"] = run.back_to_min_s
        results[name]["drain_s"] = run.drain_s
        results[name]["scale_in_window_s"] = args.window

    print(
        f"\none worker's rate (static_1, saturated): {one_worker:.1f} calls/s; goal "
        f"0.9 x {args.max_workers} x it = {goal:.1f} calls/s; step {args.base:g} -> "
        f"{args.peak:g} calls/s for {args.hot:g} s"
    )
    print(
        f"{'system':<16}{'calls':>7}{'ok':>7}{'late':>6}{'thr/s':>8}{'p50 ms':>9}"
        f"{'p99 ms':>9}{'p99/max':>9}"
    )
    for name, r in results.items():
        if name in runs:
            print(
                f"{name:<16}{r['calls']:>7.0f}{r['answered_ok']:>7.0f}{r['late_replies']:>6.0f}"
                f"{r['hot_throughput']:>8.1f}{r['p50_ms']:>9.0f}{r['p99_ms']:>9.0f}"
                f"{r['p99_vs_static_max']:>9.2f}"
            )
    failures = []
    for name in runs:
        r = results[name]
        if r["answered_ok"] != r["calls"] or r["late_replies"]:
            failures.append(
                f"{name}: {r['answered_ok']:.0f} of {r['calls']:.0f} answered ok, "
                f"{r['late_replies']:.0f} late replies"
            )
    for name in scaled_names:
        s = results[name]
        print(
            f"{name}: reached {goal:.1f} calls/s {s['reach_s']:.2f} s after the step "
            f"(target <= {TARGETS['reach_s']:g}); most workers {s['max_workers_seen']:.0f}; "
            f"back to 1 worker {s['back_to_min_s']:.1f} s after its backlog drained "
            f"({s['drain_s']:.1f} s after the step ended; window {args.window:g} s)"
        )
        if not s["reach_s"] <= TARGETS["reach_s"]:
            failures.append(f"{name}: reach {s['reach_s']:.2f} s > {TARGETS['reach_s']:g} s")
        if not s["p99_vs_static_max"] <= TARGETS["p99_vs_static_max"]:
            failures.append(f"{name}: p99 {s['p99_vs_static_max']:.2f}x the static max group")
        if not s["back_to_min_s"] <= args.window + 5:
            failures.append(f"{name}: back to min after {s['back_to_min_s']:.1f} s > window + 5 s")
    return failures


async def zipf_load(
    args: argparse.Namespace, tmp: Path, results: dict[str, dict[str, float]]
) -> list[str]:
    """The skewed load over many keys: one worker per key, against the same with the scaler."""
    runs = {
        "zipf_static_1": await zipf_run("zipfstatic", args, tmp, scaled=False),
        "zipf_scaled": await zipf_run("zipfscaled", args, tmp, scaled=True),
    }
    hot_rate = args.zipf_rate * zipf_weights(args.zipf_keys, args.zipf_top)[0]
    print(
        f"\nZipf load: {args.zipf_rate:g} calls/s over {args.zipf_keys} keys for "
        f"{args.zipf_seconds:g} s, the first key {hot_rate:.1f} calls/s"
    )
    print(
        f"{'system':<16}{'calls':>7}{'ok':>7}{'late':>6}{'kept up':>9}{'hot p50':>9}"
        f"{'hot p99':>9}{'rest p99':>10}{'workers':>9}"
    )
    failures = []
    for name, run in runs.items():
        every = [c for _, c in run.calls]
        hot, rest = run.steady(True), run.steady(False)
        r = results[name] = {
            "calls": float(len(every)),
            "answered_ok": float(sum(1 for c in every if c.ok)),
            "late_replies": float(run.late_replies),
            "hot_kept_up": run.hot_keeps_up(),
            "hot_p50_ms": 1000 * pct(hot, 50),
            "hot_p99_ms": 1000 * pct(hot, 99),
            "rest_p99_ms": 1000 * pct(rest, 99),
            "most_hot_workers": float(run.most_hot_workers),
        }
        print(
            f"{name:<16}{r['calls']:>7.0f}{r['answered_ok']:>7.0f}{r['late_replies']:>6.0f}"
            f"{r['hot_kept_up']:>9.2f}{r['hot_p50_ms']:>9.0f}{r['hot_p99_ms']:>9.0f}"
            f"{r['rest_p99_ms']:>10.0f}{r['most_hot_workers']:>9.0f}"
        )
        if r["answered_ok"] != r["calls"] or r["late_replies"]:
            failures.append(
                f"{name}: {r['answered_ok']:.0f} of {r['calls']:.0f} answered ok, "
                f"{r['late_replies']:.0f} late replies"
            )
    scaled = results["zipf_scaled"]
    if not scaled["hot_kept_up"] >= TARGETS["zipf_kept_up"]:
        failures.append(
            f"zipf_scaled: the hot key kept up with {scaled['hot_kept_up']:.2f} of its calls"
        )
    return failures


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
