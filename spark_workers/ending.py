"""The end of a keyed worker that cannot go on: its JVM is gone, its Spark Connect server is
gone, or work overran its bound.

Each ends the worker the same way (`Ending.end`): it stops taking requests, answers those in
flight, and its process exits with a code saying why (`EXIT_JVM_LOST`, `EXIT_OVERRUN`,
`EXIT_SERVER_LOST`), so that its driver starts a fresh one. Each logs one line saying why.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

from spark_workers import jvm
from worker_sdk import HandlerError, Request, Requeue

logger = logging.getLogger(__name__)

#: Exit codes of a worker that ends itself: its JVM is gone, or work overran its bound.
EXIT_JVM_LOST = 70
EXIT_OVERRUN = 71
#: Exit code of a Spark Connect worker whose server went away (with its session and data).
EXIT_SERVER_LOST = 72

#: Seconds to wait for the JVM process to exit once py4j cannot reach it (to tell an OOM).
_EXIT_WAIT = 5.0
#: Seconds a broken results stream waits for the JVM's exit before it is a query's failure.
_STREAM_EXIT_WAIT = 2.0
#: Seconds past the drain timeout after which a worker ending itself exits regardless.
_HARD_EXIT_MARGIN = 15.0


class Ending:
    """Whether the worker must end, why, and its ending (once)."""

    def __init__(self, drain_timeout: Callable[[], float]) -> None:
        #: Seconds the worker's shutdown may take to answer the requests in flight.
        self._drain_timeout = drain_timeout
        #: Why the JVM is gone, once it is.
        self.lost: jvm.JvmLost | None = None
        #: The code the process ends with, once it must end.
        self.exit_code: int | None = None
        #: The JVM's watch, while there is one (embedded Spark).
        self.watch: jvm.Watch | None = None
        #: Set by `SparkWorker.run()`: ending the worker ends this process.
        self.owns_process = False
        #: Set once the worker stops anyway: a JVM exit is then no reason to end it.
        self.stopping = False
        self._lock = threading.Lock()

    def watching(self, watch: jvm.Watch | None) -> None:
        """Hear from `watch` when the JVM exits."""
        self.watch = watch
        if watch is not None:
            watch.subscribe(self.jvm_exited)

    def stop_watching(self) -> None:
        self.stopping = True
        if self.watch is not None:
            self.watch.unsubscribe(self.jvm_exited)

    def lost_by(self, exc: BaseException) -> jvm.JvmLost | None:
        """Whether `exc` means the JVM is gone (then the worker ends), and why."""
        if self.lost is None and self.watch is not None and self.watch.lost is not None:
            self.jvm_exited(self.watch.lost)  # seen exiting before its subscribers heard
        if self.lost is not None:
            return self.lost
        if not jvm.is_connection_error(exc):
            if not jvm.is_stream_error(exc) or self.watch is None:
                return None
            # The results' stream broke: the JVM may be dying (its exit not seen yet, seen in
            # CI: the caller was told `query_failed` for an out-of-memory), or Arrow refused
            # the data. Only an exit seen shortly after says which.
            watched = self.watch.wait_lost(_STREAM_EXIT_WAIT)
            if watched is None:
                return None
            self.jvm_exited(watched)
            return self.lost
        watched = self.watch.wait_lost(_EXIT_WAIT) if self.watch is not None else None
        lost = watched or jvm.JvmLost("jvm_lost", None)
        self.jvm_exited(lost)
        return self.lost

    def server_lost(self, exc: BaseException, request: Request) -> None:
        """The Spark Connect server went away (its session with it): end the worker, and give
        `request` back to the queue, once (see `connect`)."""
        self.end_server_lost(exc)
        if request.redelivered:
            raise HandlerError(
                "the Spark Connect server went away while this request ran, and it had "
                "been delivered before (a request is requeued once)",
                details={"reason": "server_lost"},
            ) from exc
        raise Requeue("the Spark Connect server went away") from exc

    def end_server_lost(self, exc: BaseException) -> None:
        """The Spark Connect server is gone, and this worker's session and data with it."""
        with self._lock:
            if self.lost is None:
                self.lost = jvm.JvmLost("server_lost", None)
        self.end(EXIT_SERVER_LOST, f"the Spark Connect server is gone: {str(exc)[:200]}")

    def jvm_exited(self, lost: jvm.JvmLost) -> None:
        if self.stopping:
            return  # the worker stops anyway: the JVM goes with it
        with self._lock:
            if self.lost is None:
                self.lost = lost
        self.end(EXIT_JVM_LOST, lost.cause)

    def overrun(self, description: str, seconds: float) -> None:
        self.end(
            EXIT_OVERRUN,
            f"{description.strip()} is still running {seconds:.0f} s after it was cancelled "
            "(planning cannot be interrupted)",
        )

    def end(self, code: int, why: str) -> None:
        """End the worker: stop taking requests, answer those in flight, exit with `code`."""
        with self._lock:
            if self.exit_code is not None:
                return
            self.exit_code = code
        logger.error("ending the worker (exit code %d): %s", code, why)
        if not self.owns_process:
            return  # an embedded worker (tests): the caller decides
        os.kill(os.getpid(), signal.SIGTERM)  # worker_sdk's staged shutdown, then `run` exits
        grace = self._drain_timeout() + _HARD_EXIT_MARGIN
        timer = threading.Timer(grace, os._exit, args=(code,))
        timer.name, timer.daemon = "hard exit", True
        timer.start()
