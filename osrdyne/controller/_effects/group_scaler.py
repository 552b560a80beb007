"""The group scaler: sizes every running group through a driver that can (`drivers.base.Sizes`).

The decision is `scaling`'s, pure; this loop feeds it and carries it out. Workers' activity
reports (with their load figures, docs/protocol.md) arrive through `report()`, which wakes the
loop when a group has work: a step in load is acted on at once, not on a poll. Each pass reads
the backlog (ready messages, by a passive declare: one round trip, no management API) of the
groups that are busy, grown, or were recently, asks `scaling.Scaler` for their size, and
resizes the groups whose size changes: one log line and one count per decision, with its reason.

Capacity is shared by a stated policy: groups are resized smallest first, and a driver grows a
group only into the room its caps leave (`max_processes`, `max_containers`): a hot key never
takes the last worker another hot key could have, and since extra workers count against the
driver's capacity a new key still gets its first worker or is answered `overloaded` as before.
A group that needs more than its maximum or than the room left is `saturated` (in `/status`
and `osrdyne_scaling_saturated_groups`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aio_pika.abc

from drivers import base
from osrdyne import wire
from osrdyne.controller._decisions import scaling
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._decisions.status import ScalingReport
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics

logger = logging.getLogger(__name__)

_FIGURES = {
    "handled": wire.Header.HANDLED,
    "busy_seconds": wire.Header.BUSY_SECONDS,
    "in_flight": wire.Header.IN_FLIGHT,
    "concurrency": wire.Header.CONCURRENCY,
}


@dataclasses.dataclass
class _Group:
    scaler: scaling.Scaler
    rates: scaling.RateEstimator
    #: Monotonic time of the last report with work, or of a growth.
    busy_at: float = float("-inf")
    backlog: int | None = None
    saturated: bool = False


class GroupScaler:
    def __init__(
        self,
        *,
        driver: base.Sizes,
        tracker: PoolStateTracker,
        names: wire.PoolNames,
        channel: Callable[[], Awaitable[aio_pika.abc.AbstractChannel]],
        policy: scaling.Policy,
        interval: float,
        metrics: ControllerMetrics,
        call_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._driver = driver
        self._tracker = tracker
        self._names = names
        self._open_channel = channel
        self._channel: aio_pika.abc.AbstractChannel | None = None
        self.policy = policy
        self._interval = interval
        self._metrics = metrics
        self._call_timeout = call_timeout
        self._clock = clock
        self._groups: dict[str, _Group] = {}
        self._wake = asyncio.Event()
        #: Shrinks under way, by key: a driver may wait for the workers it stops to drain
        #: (docker stop), which must not hold up the other groups' growth.
        self._shrinking: dict[str, asyncio.Task[None]] = {}

    # -- input ----------------------------------------------------------------------------

    def report(self, key: str, worker: str | None, headers: Mapping[str, Any]) -> None:
        """A worker's activity report (already checked by the activity processor)."""
        figures = {name: headers.get(header) for name, header in _FIGURES.items()}
        counters = {k: float(v) for k, v in figures.items() if isinstance(v, int | float)}
        group = self._group(key)
        now = self._clock()
        if counters and worker is not None:
            group.rates.report(worker, counters, now)
        if counters.get("in_flight", 1) > 0:  # work (or a worker that does not say): look now
            group.busy_at = now
            self._wake.set()

    def _group(self, key: str) -> _Group:
        group = self._groups.get(key)
        if group is None:
            group = _Group(scaling.Scaler(self.policy), scaling.RateEstimator())
            self._groups[key] = group
        return group

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(self._interval):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                await self.scale_once()
                _raise_if_cancelled()
                # At most one pass per tenth of the interval, however many reports wake it.
                await asyncio.sleep(self._interval / 10)
        finally:
            shrinking = list(self._shrinking.values())
            for task in shrinking:
                task.cancel()
            await asyncio.gather(*shrinking, return_exceptions=True)

    async def scale_once(self) -> None:
        """One pass over the running groups."""
        expected = self._tracker.state.value.groups
        sizes = dict(self._driver.sizes())
        for key in [k for k in self._groups if k not in expected]:
            del self._groups[key]
        now = self._clock()
        # Smallest first: the room the caps leave goes to the groups with fewest workers.
        for key, workers in sorted(sizes.items(), key=lambda item: (item[1], item[0])):
            if expected.get(key) is not GroupStatus.ACTIVE and workers <= self.policy.min_workers:
                continue
            if key in self._shrinking:
                continue
            group = self._group(key)
            if not self._worth_a_look(group, workers, now):
                continue
            backlog = await self._backlog(key)
            if backlog is None:
                continue
            group.backlog = backlog
            group.rates.sample(backlog, now)
            decision = group.scaler.decide(group.rates.load(workers=workers, backlog=backlog), now)
            group.saturated = decision.reason is scaling.Reason.MAXIMUM and backlog > 0
            if decision.desired > workers:
                await self._resize(key, group, workers, decision)
            elif decision.desired < workers:
                task = asyncio.create_task(
                    self._resize(key, group, workers, decision), name=f"shrink group {key!r}"
                )
                self._shrinking[key] = task
                task.add_done_callback(functools.partial(self._shrunk, key))
        self._gauges()

    def _shrunk(self, key: str, _: asyncio.Task[None]) -> None:
        self._shrinking.pop(key, None)

    def _worth_a_look(self, group: _Group, workers: int, now: float) -> bool:
        """A group at its minimum, quiet for longer than the window, is left alone."""
        if workers != self.policy.min_workers or group.backlog:
            return True
        return now - group.busy_at <= self.policy.scale_in_window + self._interval * 5

    async def _resize(
        self, key: str, group: _Group, workers: int, decision: scaling.Decision
    ) -> None:
        try:
            async with asyncio.timeout(self._call_timeout):
                await self._driver.resize(key, decision.desired)
        except (base.DriverError, TimeoutError) as exc:
            self._metrics.driver_calls.labels("resize", "error").inc()
            logger.warning("driver resize(%r, %d) failed: %s", key, decision.desired, exc)
            return
        except Exception:  # a driver bug must not kill the scaler
            logger.exception("driver resize(%r, %d) raised unexpectedly", key, decision.desired)
            return
        self._metrics.driver_calls.labels("resize", "ok").inc()
        granted = self._driver.sizes().get(key, workers)
        if granted < decision.desired:
            group.saturated = True
        if granted == workers:
            return
        if granted > workers:
            group.busy_at = self._clock()
        self._metrics.scaling_decisions.labels(decision.reason.value).inc()
        load = group.rates.load(workers=workers, backlog=group.backlog or 0)
        logger.info(
            "worker group %r: %d -> %d workers (%s; wanted %d: backlog %d, arrival %s/s, "
            "service %s/s a worker, busy %s, in flight %d)",
            key,
            workers,
            granted,
            decision.reason.value,
            decision.desired,
            load.backlog,
            _figure(load.arrival_rate),
            _figure(load.service_rate),
            _figure(load.busy),
            load.in_flight,
            extra=logs.fields(pool=self._names.pool, key=key),
        )

    async def _backlog(self, key: str) -> int | None:
        """Ready messages of `key`'s queue; None when it cannot be read now (no queue yet)."""
        try:
            if self._channel is None or self._channel.is_closed:
                self._channel = await self._open_channel()
            queue = await self._channel.declare_queue(
                self._names.request_queue(key), passive=True, timeout=self._call_timeout
            )
        except (aio_pika.exceptions.AMQPError, TimeoutError, ValueError) as exc:
            _raise_if_cancelled()  # a channel closed by our own stop, not a missing queue
            logger.debug("backlog of %r not read: %s", key, exc)
            self._channel = None  # a missing queue closes the channel
            return None
        result = queue.declaration_result
        return int(result.message_count or 0)

    def _gauges(self) -> None:
        sizes = self._driver.sizes()
        desired = sum(
            g.scaler.last.desired if g.scaler.last is not None else sizes.get(k, 0)
            for k, g in self._groups.items()
            if k in sizes
        )
        self._metrics.group_workers.labels("desired").set(desired)
        self._metrics.group_workers.labels("current").set(sum(sizes.values()))
        saturated = sum(1 for k, g in self._groups.items() if g.saturated and k in sizes)
        self._metrics.scaling_saturated.set(saturated)

    # -- output ---------------------------------------------------------------------------

    def view(self, key: str) -> ScalingReport | None:
        """The scaler's view of `key` for `/status` (None: no decision yet)."""
        group = self._groups.get(key)
        current = self._driver.sizes().get(key)
        if group is None or group.scaler.last is None or current is None:
            return None
        last, rates = group.scaler.last, group.rates
        return ScalingReport(
            desired=last.desired,
            current=current,
            reason=last.reason.value,
            backlog=group.backlog,
            arrival_rate=rates.arrival_rate,
            service_rate=rates.service_rate,
            busy=rates.busy,
            saturated=group.saturated,
        )


def _raise_if_cancelled() -> None:
    """End the loop when it was cancelled and a library turned the cancellation into an
    error or a return (a channel call during the connection's close): a loop that went on
    would outlive its session."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _figure(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"
