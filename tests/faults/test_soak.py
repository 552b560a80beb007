"""Soak (opt-in: `scripts/test.sh tests/faults/test_soak.py --soak`): minutes of churn on one
pool, then nothing lost and nothing left behind.

For `OSRDYNE_SOAK_SECONDS` (default 600), a caller with a durable reply queue sends requests
in waves over a rotating set of keys, so worker groups keep being created, going Unbound,
stopping and coming back (short delays); every `kill_every` seconds a random worker is
SIGKILLed mid-work. At the end every request must have been answered ok (a duplicate answer is
allowed and counted: delivery is at least once), and once
the pool is idle no group, worker or request queue may remain. The controller's memory at the
start and end is recorded in the report row, not asserted.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import signal
import time
from collections.abc import Awaitable, Callable

import pytest

from tests import broker
from tests.conftest import Running
from tests.faults.conftest import Caller, workers_of
from tests.faults.report import Tally
from tests.waiting import eventually

SECONDS = float(os.environ.get("OSRDYNE_SOAK_SECONDS", "600"))

pytestmark = [pytest.mark.soak, pytest.mark.timeout(SECONDS + 600)]


def _rss_mib() -> float:
    """This process's resident memory now (the controller runs in it), in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


async def test_soak_churn_with_worker_kills(
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    tally = make_tally(
        f"soak: {SECONDS:.0f} s of key churn (groups up and down) with worker SIGKILLs",
        "every request answered ok; afterwards no group, worker or queue is left",
    )
    delays = {"unbind_delay": 3, "stop_delay": 3, "loop_interval": 0.5}
    running = await make_controller(pool, groups=delays)
    caller = await make_caller(tally, reply_queue=f"{pool}-replies")
    rng = random.Random(7)
    keys = [f"soak-{i}" for i in range(24)]
    kills = 0
    rss_start = _rss_mib()
    started = time.monotonic()
    stop = asyncio.Event()

    async def send() -> None:
        wave = 0
        while not stop.is_set():
            # A wave serves a third of the keys, so the others go idle and stop meanwhile.
            live = keys[(wave % 3) :: 3]
            wave_end = time.monotonic() + 10
            while time.monotonic() < wave_end and not stop.is_set():
                key = rng.choice(live)
                if rng.random() < 0.2:
                    await caller.send(pool, key, b"0.5", path="sleep")
                else:
                    await caller.send(pool, key, key.encode())
                await asyncio.sleep(0.02)
            wave += 1

    async def kill() -> None:
        nonlocal kills
        while not stop.is_set():
            await asyncio.sleep(15)
            pids = list(workers_of(pool))
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills += 1

    sender = asyncio.create_task(send(), name="soak sender")
    killer = asyncio.create_task(kill(), name="soak killer")
    await asyncio.sleep(SECONDS)
    stop.set()
    await asyncio.gather(sender, killer)
    assert not await caller.settle(120, grace=3)
    elapsed = time.monotonic() - started
    groups_started = int(running.controller.metrics.driver_calls.labels("start", "ok")._value.get())

    # Idle now: every group must stop and every request queue go.
    tracker = running.controller.session.tracker
    assert tracker is not None
    await eventually(lambda: not tracker.state.value.groups, what="no group expected", timeout=60)
    await eventually(lambda: not workers_of(pool), what="no worker left", timeout=60)

    async def no_queue_left() -> bool:
        return not await broker.request_queues(pool)

    await eventually(no_queue_left, what="no request queue left", timeout=60)

    tally.extra.update(
        {
            "seconds": round(elapsed),
            "requests/s": round(len(tally.sent) / elapsed),
            "worker SIGKILLs": kills,
            "groups started": groups_started,
            "controller RSS MiB at start": round(rss_start),
            "controller RSS MiB at end": round(_rss_mib()),
        }
    )
    row = tally.row()
    # Duplicates are allowed (at least once: a worker killed between its reply and its ack)
    # and reported; losses and error answers are not.
    assert row["lost"] == 0, row
    assert row["ok"] == len(tally.sent) and not row["errors"], row
