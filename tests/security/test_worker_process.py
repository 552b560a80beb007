"""Real query worker processes, started by a controller with the subprocess driver, whose JVM
is exhausted or kept busy for real: the caller gets an answer, the process ends non-zero, the
driver starts a new one, and the old JVM goes with the old process.

Each test starts one worker with a small heap (512m) and sees it restart once; the first also
calls the restarted worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from osrdyne import Client
from spark_workers.ending import EXIT_JVM_LOST, EXIT_OVERRUN

#: Each test starts Spark twice and bounds each step itself (calls up to 180 s, a restart up to
#: 180 s); the test's own bound is their sum, not less: on a loaded 2-core CI machine one Spark
#: start took 97 s and the whole test ran past an earlier 300 s bound.
pytestmark = pytest.mark.timeout(660)

#: Passes the guard (one small constant), then doubles a string 40 times while the optimizer
#: folds it: the driver's heap runs out at planning time.
OOM_AT_PLANNING = (
    "SELECT length(aggregate(sequence(1, 40), 'x', (acc, i) -> concat(acc, acc))) AS n"
)
#: Passes the guard, then backtracks for hours while the optimizer folds it (n^12 steps).
ENDLESS_PLANNING = "SELECT regexp_like(concat(repeat('a', 100), '!'), '(.*a){12}$') AS r"
#: Each worker's driver heap: small, so that it runs out soon.
SMALL_HEAP = "512m"


def jvm_of(pid: int) -> int:
    """The pid of the JVM a worker process launched (its `java` child)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and command.endswith(b"java"):
                return int(entry.name)
    raise AssertionError(f"worker {pid} has no JVM child")


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def eventually(condition: Callable[[], bool], *, within: float = 180) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.2)


async def test_a_jvm_out_of_memory_is_answered_and_the_worker_restarts(
    pool: str, run_query_workers: Callable[..., Awaitable[Any]], client: Client
) -> None:
    running = await run_query_workers(memory=SMALL_HEAP, restart_backoff=0.2)
    first = await client.call(pool, "trips", path="schema", timeout=180)
    assert first.ok, first.text[:500]
    worker = running.controller.driver.describe()["trips"][0]
    pid, java = worker.pid, jvm_of(worker.pid)

    # The worker holds the broker's URI with its password; its JVM does not.
    assert b"WORKER_AMQP_URI=amqp://guest:guest@" in Path(f"/proc/{pid}/environ").read_bytes()
    jvm_environ = Path(f"/proc/{java}/environ").read_bytes().split(b"\0")
    assert not [v for v in jvm_environ if v.startswith((b"WORKER_", b"OSRDYNE_"))]
    assert not [v for v in jvm_environ if b"guest:guest@" in v]

    answer = await client.call(pool, "trips", {"sql": OOM_AT_PLANNING}, timeout=120)
    assert answer.status == "worker_error", answer.text[:500]
    assert answer.json()["details"]["reason"] == "resources"

    await eventually(lambda: worker.restarts >= 1)
    assert worker.last_exit == EXIT_JVM_LOST
    again = await client.call(pool, "trips", {"sql": "SELECT 1 AS one"}, timeout=180)
    assert again.ok and again.json()["rows"] == [{"one": 1}]
    assert worker.pid != pid and gone(java)


async def test_planning_that_cannot_be_cancelled_is_answered_then_ends_the_worker(
    pool: str, run_query_workers: Callable[..., Awaitable[Any]], client: Client
) -> None:
    bounds = {"SPARK_WORKER_QUERY_TIMEOUT": "5", "SPARK_WORKER_CANCEL_GRACE": "2"}
    running = await run_query_workers(memory=SMALL_HEAP, restart_backoff=0.2, env=bounds)
    first = await client.call(pool, "trips", path="schema", timeout=180)
    assert first.ok, first.text[:500]
    worker = running.controller.driver.describe()["trips"][0]
    pid, java = worker.pid, jvm_of(worker.pid)

    # Answered at the bound (5 s), long before the client's own timeout.
    answer = await client.call(pool, "trips", {"sql": ENDLESS_PLANNING}, timeout=120)
    assert answer.status == "worker_error", answer.text[:500]
    assert answer.json()["details"]["reason"] == "timeout"

    await eventually(lambda: worker.restarts >= 1)
    assert worker.last_exit == EXIT_OVERRUN
    await eventually(lambda: gone(java))  # the busy JVM went with its process
    # A new process took its place (that a restarted worker answers again is the test above's).
    assert worker.pid != pid and not gone(worker.pid)
