"""The activity processor: worker reports folded into few tracker updates.

Workers report `started`, `ready` and `request-received` (already rate-limited on their side),
and `start-failed` when their start-up fails: those go to the groups' breakers
(`failing`), which also hear every `ready` and `request-received`; a failed start, or a
failing group's worker starting again, is no sign of life and keeps no group alive.
Only orphans create groups: a report for a key that has no group is counted and ignored (a
forged report starts nothing). A report keeps its group Active (an Unbound one Active again);
reports of one key closer than `fold` seconds are folded into one tracker update that carries
`fold` seconds of extra lifetime, so folding never shortens a group's life. Malformed reports
are logged and skipped. Reports are acked on arrival: none is ever redelivered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aio_pika.abc

from osrdyne import wire
from osrdyne.controller._decisions.history import EventKind, KeyHistory
from osrdyne.controller._effects.consumer import QueueConsumer
from osrdyne.controller._effects.failing import FailingGroups
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.ops import logs
from osrdyne.ops.metrics import ColdStartClock, ControllerMetrics

logger = logging.getLogger(__name__)

_EVENTS = {e.value for e in wire.Event}


class ActivityProcessor(QueueConsumer):
    def __init__(
        self,
        channel: aio_pika.abc.AbstractChannel,
        *,
        names: wire.PoolNames,
        tracker: PoolStateTracker,
        metrics: ControllerMetrics,
        cold_starts: ColdStartClock,
        fold: float,
        prefetch: int = 256,
        clock: Callable[[], float] = time.monotonic,
        history: KeyHistory | None = None,
        failing: FailingGroups | None = None,
        on_report: Callable[[str, str | None, Mapping[str, Any]], None] | None = None,
    ) -> None:
        super().__init__(channel, prefetch=prefetch, names=names, metrics=metrics)
        self._failing = failing
        self.queue_name = names.activity_queue
        self._tracker = tracker
        self._cold_starts = cold_starts
        self._fold = fold
        self._clock = clock
        self._history = history
        #: Every valid report of a key that has a group, folded or not (the group scaler).
        self._on_report = on_report
        self._last: dict[str, float] = {}
        #: Wall-clock time of each key's last valid report (the status document shows it).
        self.last_seen: dict[str, float] = {}

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.ack()
        key = message.routing_key or ""
        event = (message.headers or {}).get(wire.Header.EVENT)
        if isinstance(event, bytes):
            event = event.decode(errors="replace")
        if event not in _EVENTS or wire.key_problem(self._names, key) is not None:
            self._metrics.activity_malformed.inc()
            logger.warning(
                "skipping malformed activity report: key=%r event=%r",
                key,
                event,
                extra=logs.fields(pool=self._names.pool, key=key),
            )
            return
        if key not in self._tracker.state.value.groups:
            self._metrics.activity_ignored.inc()
            logger.info(
                "ignoring activity %r for key %r: it has no group (only orphans create groups)",
                event,
                key,
                extra=logs.fields(pool=self._names.pool, key=key),
            )
            return
        self._metrics.activity.labels(event).inc()
        headers = message.headers or {}
        worker = wire.text(headers.get(wire.Header.WORKER_ID))
        if self._failing is not None and not self._breaker(key, str(event), worker, headers):
            return  # a failed start: no sign of life
        self.last_seen[key] = time.time()
        now = self._clock()
        if self._on_report is not None:
            self._on_report(key, worker, headers)
        if event not in (wire.Event.REQUEST_RECEIVED, wire.Event.LOADING):
            self._worker_event(key, event, worker)
        if event == wire.Event.READY:
            self._cold_starts.end(key, now)
        if now - self._last.get(key, float("-inf")) < self._fold:
            self._metrics.activity_folded.inc()
            return
        if len(self._last) > 10_000:  # forget keys quiet for longer than the fold window
            self._last = {k: t for k, t in self._last.items() if now - t < self._fold}
            self.last_seen = {
                k: self.last_seen[k]
                for k in self._tracker.state.value.groups
                if k in self.last_seen
            }
        self._last[key] = now
        self._tracker.require(key, extra_lifetime=self._fold, cause="its workers' activity")

    def _breaker(
        self, key: str, event: str, worker: str | None, headers: Mapping[str, Any]
    ) -> bool:
        """Tell the group's breaker (`failing`) what a worker said; False when the report is
        no sign of life: a failed start, or a failing group's worker starting (again)."""
        assert self._failing is not None
        if event == wire.Event.START_FAILED:
            self._failing.reported(key, worker, headers.get(wire.Header.REASON))
            return False
        if event in (wire.Event.READY, wire.Event.REQUEST_RECEIVED):
            self._failing.served(key, worker, ready=event == wire.Event.READY)
            return True
        # A failing group's workers start over and over: that keeps nobody's group alive.
        return self._failing.failing(key) is None

    def _worker_event(self, key: str, event: object, worker: str | None) -> None:
        """A worker `started` or is `ready`: logged, and noted in the key's history."""
        logger.info(
            "worker of key %r: %s",
            key,
            event,
            extra=logs.fields(pool=self._names.pool, key=key, worker_id=worker),
        )
        if self._history is None:
            return
        if event == wire.Event.READY:
            self._history.worker_ready(key, worker)
        else:
            self._history.record(key, EventKind.WORKER_STARTED, f"worker {worker} {event}")
