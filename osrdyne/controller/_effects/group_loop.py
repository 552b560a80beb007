"""The worker-group control loop: make the driver's running groups match the expected state.

Each pass lists the groups the driver runs, stops those no longer expected, starts the missing
ones, upgrades the outdated ones a driver reports (`drivers.base.Upgrades`), and publishes the
generation it reached. A driver that cannot list its groups (`drivers.base.Unlisted`, e.g.
noop) is taken at its word for what it did: the loop's own record of the groups it started
and has not stopped stands for its listing, so each group is started once, not on every pass.
A failed call is logged and tried again on a
later pass, never in a tight loop: drivers are idempotent, so converging again is always safe.
Starts, stops and new failures are noted in the keys' history.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from drivers import base
from osrdyne.controller._decisions import reconcile
from osrdyne.controller._decisions.history import EventKind, KeyHistory
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.controller._effects.watch import Watch
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics

logger = logging.getLogger(__name__)


class WorkerGroupLoop:
    def __init__(
        self,
        *,
        driver: base.Driver,
        tracker: PoolStateTracker,
        interval: float,
        metrics: ControllerMetrics,
        call_timeout: float = 60.0,
        concurrency: int = 16,
        pool: str = "",
        queues_reached: Callable[[int], Awaitable[object]] | None = None,
        queue_wait: float = 2.0,
        history: KeyHistory | None = None,
    ) -> None:
        self._pool = pool
        #: Waits until the request-queue loop reached a generation (None: do not wait).
        self._queues_reached = queues_reached
        self._queue_wait = queue_wait
        self._history = history
        self._driver = driver
        self._tracker = tracker
        self._interval = interval
        self._metrics = metrics
        self._call_timeout = call_timeout
        self._limit = asyncio.Semaphore(concurrency)
        self.reached: Watch[int] = Watch(0)
        #: The groups the driver listed on the last pass, after that pass's actions.
        self.running: set[str] = set()
        #: The last failure of each key still failing.
        self.errors: dict[str, str] = {}

    async def run(self) -> None:
        while True:
            version = self._tracker.state.version
            target = self._tracker.state.value
            await self._let_queues_catch_up(target.generation)
            started = time.monotonic()
            converged = await self._converge(set(target.groups))
            self._metrics.loop_seconds.labels("groups").observe(time.monotonic() - started)
            if converged:
                self.reached.set(target.generation)
            wait = self._interval if converged else min(self._interval, 2.0)
            try:
                async with asyncio.timeout(wait):
                    await self._tracker.state.changed_since(version)
            except TimeoutError:
                pass

    async def _let_queues_catch_up(self, generation: int) -> None:
        """Give the request-queue loop a moment to reach `generation` first: new workers find
        their queue at once, and starting processes stays off the orphans' critical path
        (declare, bind, republish). Bounded: groups never wait on a stuck queue loop."""
        if self._queues_reached is None:
            return
        try:
            async with asyncio.timeout(self._queue_wait):
                await self._queues_reached(generation)
        except TimeoutError:
            pass

    async def _converge(self, expected: set[str]) -> bool:
        driver = self._driver
        if isinstance(driver, base.Unlisted) and driver.cannot_list():
            running = set(self.running)
        else:
            listed = await self._call("list", None, driver.list)
            if not isinstance(listed, set):
                return False
            running = listed
        outdated = driver.outdated() if isinstance(driver, base.Upgrades) else set()
        plan = reconcile.plan_groups(expected, running, outdated)
        stopped = await asyncio.gather(*(self._bounded("stop", k, driver.stop) for k in plan.stop))
        started = await asyncio.gather(
            *(self._bounded("start", k, driver.start) for k in plan.start)
        )
        upgraded = await asyncio.gather(
            *(self._bounded("upgrade", k, driver.start) for k in plan.upgrade)
        )
        self.running = (running - {k for k, ok in zip(plan.stop, stopped, strict=True) if ok}) | {
            k for k, ok in zip(plan.start, started, strict=True) if ok
        }
        return all(stopped) and all(started) and all(upgraded)

    async def _bounded(self, op: str, key: str, fn: Callable[[str], Awaitable[None]]) -> bool:
        async with self._limit:
            result = await self._call(op, key, lambda: fn(key))
        return result is not None

    async def _call(self, op: str, key: str | None, fn: Callable[[], Awaitable[object]]) -> object:
        """Run one driver call; None when it failed (logged, counted, retried next pass)."""
        try:
            async with asyncio.timeout(self._call_timeout):
                result = await fn()
        except (base.DriverError, TimeoutError) as exc:
            self._record_failure(op, key, f"{type(exc).__name__}: {exc}")
            return None
        except Exception as exc:  # a driver bug must not kill the loop
            logger.exception("driver %s(%r) raised unexpectedly", op, key, extra=self._fields(key))
            self._record_failure(op, key, f"{type(exc).__name__}: {exc}")
            return None
        self._metrics.driver_calls.labels(op, "ok").inc()
        if key is not None:
            self.errors.pop(key, None)
            logger.info("worker group %r: %s", key, op, extra=self._fields(key))
            if self._history is not None and op in _DONE:
                self._history.record(key, *_DONE[op])
        return True if result is None else result

    def _fields(self, key: str | None) -> dict[str, object]:
        return logs.fields(pool=self._pool, key=key, generation=self._tracker.generation)

    def _record_failure(self, op: str, key: str | None, message: str) -> None:
        self._metrics.driver_calls.labels(op, "error").inc()
        logger.warning("driver %s(%r) failed: %s", op, key, message, extra=self._fields(key))
        if key is not None:
            error = f"{op}: {message}"
            if self._history is not None and self.errors.get(key) != error:
                self._history.record(key, EventKind.DRIVER_ERROR, error)  # once per new error
            self.errors[key] = error


#: What a driver call that succeeded means for a key's history.
_DONE = {
    "start": (EventKind.GROUP_STARTED, "the driver started the group"),
    "upgrade": (EventKind.GROUP_STARTED, "the driver upgraded the group"),
    "stop": (EventKind.GROUP_STOPPED, "the driver stopped the group"),
}
