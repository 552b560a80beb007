"""Every request's Spark work is bounded in time, planning included, and the caller is answered
at the bound whatever the JVM does.

A handler thread hands the work to a Spark thread (`Runner`), which tags the Spark jobs it
starts with a job group of its own, and waits at most until the request's `x-deadline` (or
the worker's `query_timeout`). At the bound the caller gets `DeadlineExceeded` (reason
`timeout`) at once, and the job group is cancelled: Spark interrupts the running tasks, the
work raises in its Spark thread and the session carries on. On a Spark Connect session the
group is an operation tag (`addTag`, thread-local in the client) interrupted with
`interruptTag`: only that request's work, in that session only.

Planning (parsing, analysis, optimisation: constant folding runs in the driver) is not a job
and cannot be cancelled. If the Spark thread is still busy `grace` seconds after the bound,
`on_overrun` is called: the worker then ends its process (a non-zero exit, its driver starts
a new one) rather than keep a JVM thread busy for an unknown time.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from spark_workers import backend
from worker_sdk import HandlerError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: `on_overrun(description, seconds past the bound)`.
OverrunHandler = Callable[[str, float], object]


class DeadlineExceeded(HandlerError):
    """The query ran out of time: the caller's deadline (or the query timeout) passed."""

    def __init__(self, timeout: float, *, group: str) -> None:
        super().__init__(
            f"query cancelled: it ran out of time ({timeout:.3g} s allowed)",
            details={"reason": "timeout", "timeout_s": round(timeout, 3), "job_group": group},
        )


class Runner:
    """Runs Spark work on Spark threads of its own, bounded by a timeout."""

    def __init__(
        self,
        spark: SparkSession,
        *,
        grace: float | None = None,
        on_overrun: OverrunHandler | None = None,
        max_threads: int = 64,
    ) -> None:
        self.spark = spark
        self.backend = backend.of(spark)
        self.grace = grace
        self.on_overrun = on_overrun
        # Threads are made on demand and reused; the spares keep serving while cancelled
        # work winds down in the others.
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="spark"
        )
        self._thread = threading.local()

    def run(self, fn: Callable[[], T], *, timeout: float | None, description: str) -> T:
        """`fn()` in a fresh job group on a Spark thread; `DeadlineExceeded` after `timeout`."""
        group = f"osrdyne-{uuid.uuid4().hex}"
        if timeout is not None and timeout <= 0:
            raise DeadlineExceeded(0.0, group=group)
        started = time.monotonic()
        future = self._threads.submit(self._in_group, group, description[:200], fn)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            pass
        assert timeout is not None
        elapsed = time.monotonic() - started
        logger.warning("%s ran out of time after %.1f s: cancelling it", description, elapsed)
        # Not in this thread: with the JVM unresponsive, cancelling could block the answer.
        threading.Thread(
            target=self._cancel, args=(group,), name=f"cancel {group}", daemon=True
        ).start()
        self._watch(future, description, bound=time.monotonic())
        raise DeadlineExceeded(elapsed, group=group)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _in_group(self, group: str, description: str, fn: Callable[[], T]) -> T:
        return self.backend.in_group(self.spark, group, description, fn, self._thread)

    def _cancel(self, group: str) -> None:
        try:
            self.backend.cancel(self.spark, group)
        except Exception:  # the JVM may be gone: whoever ran the work hears about it
            logger.warning("could not cancel job group %s", group, exc_info=True)

    def _watch(
        self, future: concurrent.futures.Future[T], description: str, *, bound: float
    ) -> None:
        """Call `on_overrun` if the cancelled work still runs `grace` seconds from now."""
        if self.grace is None or self.on_overrun is None:
            return
        on_overrun = self.on_overrun

        def check() -> None:
            if not future.done():
                on_overrun(description, time.monotonic() - bound)

        timer = threading.Timer(self.grace, check)
        timer.name, timer.daemon = f"overrun {description[:40]}", True
        future.add_done_callback(lambda _: timer.cancel())
        timer.start()


_runners: dict[int, Runner] = {}
_runners_lock = threading.Lock()


def run_in_job_group(
    spark: SparkSession,
    fn: Callable[[], T],
    *,
    timeout: float | None,
    description: str = "osrdyne request",
) -> T:
    """Run `fn` (which starts Spark jobs) in a fresh job group, answered within `timeout` s.

    The work runs on a Spark thread shared by the session's callers of this function; an
    overrun is only logged (`SparkWorker` ends the process instead: see `Runner`).
    """
    with _runners_lock:
        runner = _runners.get(id(spark))
        if runner is None:
            runner = _runners[id(spark)] = Runner(spark, grace=None)
    return runner.run(fn, timeout=timeout, description=description)
