"""Per-request Spark job groups, cancelled when the caller's deadline passes.

A handler thread tags the Spark jobs it starts with a job group of its own; a timer cancels
that group when the request's `x-deadline` (or the worker's `query_timeout`) runs out. Spark
then interrupts the running tasks and the action raises in the handler thread, which answers
the caller with an error. The session, and every other request's jobs, carry on.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from worker_sdk import HandlerError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")


class DeadlineExceeded(HandlerError):
    """The query was cancelled because the caller's deadline (or the query timeout) passed."""

    def __init__(self, timeout: float, *, group: str) -> None:
        super().__init__(
            f"query cancelled: it ran out of time ({timeout:.3g} s allowed)",
            details={"reason": "deadline", "timeout_s": round(timeout, 3), "job_group": group},
        )


def run_in_job_group(
    spark: SparkSession,
    fn: Callable[[], T],
    *,
    timeout: float | None,
    description: str = "osrdyne request",
) -> T:
    """Run `fn` (which starts Spark jobs) in a fresh job group, cancelled after `timeout` s.

    Must be called from the thread that runs the jobs (job groups are thread-local).
    """
    group = f"osrdyne-{uuid.uuid4().hex}"
    if timeout is not None and timeout <= 0:
        raise DeadlineExceeded(0.0, group=group)
    sc = spark.sparkContext
    sc.setJobGroup(group, description[:200], interruptOnCancel=True)
    cancelled = threading.Event()

    def cancel() -> None:
        cancelled.set()
        sc.cancelJobGroup(group)

    timer = None
    if timeout is not None:
        timer = threading.Timer(timeout, cancel)
        timer.daemon = True
        timer.name = f"deadline {group}"
        timer.start()
    started = time.monotonic()
    try:
        result = fn()
    except Exception as exc:
        if cancelled.is_set():
            raise DeadlineExceeded(time.monotonic() - started, group=group) from exc
        raise
    finally:
        if timer is not None:
            timer.cancel()
    if cancelled.is_set():
        # The last job finished as the timer fired: the caller has gone, say so.
        raise DeadlineExceeded(time.monotonic() - started, group=group)
    return result
